"""The record of search calls a rollout made (a "tape"): one JSON object per line, per process.

A line: `{"query", "top_n", "docs", "index_checksum", "episode", "time", "latency_s"}`:
the query and `top_n` exactly as the tool sent them, the documents the backend returned,
the checksum of the index that answered (the retriever's /health; "" for a backend that
cannot name its index), the episode (trajectory id) that asked, the wall time it was asked
(Unix seconds) and how long the answer took. JSON only, read with `json.loads`: nothing in a
tape is ever executed. A line that is not such an object is refused naming the file and line.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Tuple, Union


class TapeError(ValueError):
    """A tape that cannot be read (missing, malformed, or recorded against different indexes)."""


@dataclass(frozen=True)
class TapeRecord:
    query: str
    top_n: int
    docs: List[Dict[str, Any]]
    index_checksum: str
    episode: str
    time: float
    latency_s: float

    def to_line(self) -> str:
        return json.dumps(self.__dict__, ensure_ascii=False) + "\n"


_TYPES: Dict[str, Union[type, Tuple[type, ...]]] = {
    "query": str,
    "top_n": int,
    "docs": list,
    "index_checksum": str,
    "episode": str,
    "time": (int, float),
    "latency_s": (int, float),
}


def parse_line(line: str, where: str) -> TapeRecord:
    """One line of a tape; `where` ("file:line") names it in every error."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise TapeError(f"{where}: not JSON ({e.msg} at char {e.pos})") from None
    if not isinstance(obj, dict):
        raise TapeError(f"{where}: a record must be a JSON object, got {type(obj).__name__}")
    for key, kind in _TYPES.items():
        if key not in obj:
            raise TapeError(f"{where}: the record lacks {key!r}")
        if isinstance(obj[key], bool) or not isinstance(obj[key], kind):
            raise TapeError(f"{where}: {key!r} has the wrong type ({type(obj[key]).__name__})")
    if not all(isinstance(d, dict) and "contents" in d for d in obj["docs"]):
        raise TapeError(f"{where}: 'docs' must be a list of documents with 'contents'")
    return TapeRecord(**{k: obj[k] for k in _TYPES})


def read_tape(path: str) -> List[TapeRecord]:
    with open(path, encoding="utf-8") as f:
        return [parse_line(line, f"{path}:{i}") for i, line in enumerate(f, 1) if line.strip()]


def tape_files(paths: Iterable[str]) -> List[str]:
    """The files named, a folder standing for its `*.jsonl` (sorted); a name that is neither is refused."""
    files: List[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(glob.glob(os.path.join(p, "*.jsonl")))
            if not found:
                raise TapeError(f"{p}: no *.jsonl tool recordings in this folder")
            files += found
        elif os.path.isfile(p):
            files.append(p)
        else:
            raise TapeError(f"{p}: no such tool recording (file or folder)")
    return files
