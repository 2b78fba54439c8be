"""Stream a wiki-18 style corpus (`{"id", "contents"}` jsonl, optionally gzip) line by line.

Any other fields of a line (`title`, `url`, ...) travel with the passage as JSON text and come
back in the documents the service returns, for clients that read them (ASearcher reads `url`).

The reader hashes the decompressed bytes as it goes, so a build gets the corpus checksum for
its manifest without a second pass, and a plain and a gzip copy of one corpus match.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from io import BufferedReader
from typing import Iterator, List, Tuple, Union


class CorpusError(ValueError):
    """A corpus line that cannot be used; the message names file and line."""


@dataclass(frozen=True)
class Passage:
    id: str
    contents: str  # wiki-18 form: "Title"\ntext
    extra: str = ""  # the line's other fields as a JSON object ("" when it has none)

    @property
    def title(self) -> str:
        return split_title(self.contents)[0]

    @property
    def text(self) -> str:
        return split_title(self.contents)[1]


def split_title(contents: str) -> Tuple[str, str]:
    """`"Title"\\ntext` -> (Title, text); contents without a title line give ("", contents)."""
    head, sep, rest = contents.partition("\n")
    if not sep:
        return "", contents
    return head.strip().strip('"'), rest


def _open(path: str) -> Union[gzip.GzipFile, BufferedReader]:
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


class CorpusReader:
    """Iterate passages of one file; `checksum` is the sha256 of everything read so far."""

    def __init__(self, path: str):
        self.path = path
        self._sha = hashlib.sha256()
        self.count = 0

    @property
    def checksum(self) -> str:
        return "sha256:" + self._sha.hexdigest()

    def __iter__(self) -> Iterator[Passage]:
        try:
            f = _open(self.path)
        except OSError as e:
            raise CorpusError(f"{self.path}: cannot open corpus: {e}") from None
        with f:
            for lineno, raw in enumerate(f, start=1):
                self._sha.update(raw)
                if not raw.strip():
                    continue
                yield self._parse(raw, lineno)
                self.count += 1

    def chunks(self, size: int) -> Iterator[List[Passage]]:
        """Passages in lists of at most `size`, so callers hold one chunk in memory at a time."""
        chunk: List[Passage] = []
        for p in self:
            chunk.append(p)
            if len(chunk) >= size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def _parse(self, raw: bytes, lineno: int) -> Passage:
        return parse_line(raw, f"{self.path}:{lineno}")


def parse_line(raw: bytes, where: str) -> Passage:
    """One corpus line as a `Passage`; `CorpusError` naming `where` when it cannot be used."""
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise CorpusError(f"{where}: not valid JSON ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(obj, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    pid, contents = obj.get("id"), obj.get("contents")
    if isinstance(pid, int) and not isinstance(pid, bool):
        pid = str(pid)
    if not isinstance(pid, str) or not pid:
        raise CorpusError(f"{where}: field 'id' must be a non-empty string, got {pid!r}")
    if not isinstance(contents, str):
        raise CorpusError(f"{where}: field 'contents' must be a string, got {type(contents).__name__}")
    rest = {k: v for k, v in obj.items() if k not in ("id", "contents")}
    return Passage(pid, contents, json.dumps(rest, ensure_ascii=False) if rest else "")


def is_gzip(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def corpus_checksum(path: str) -> Tuple[str, int]:
    """(checksum, passage count) of a corpus file, validating every line."""
    reader = CorpusReader(path)
    for _ in reader:
        pass
    return reader.checksum, reader.count


def index_text(p: Passage, split: bool) -> str:
    """What gets indexed for one passage: the whole contents, or only the text after the title."""
    return p.text if split else p.contents
