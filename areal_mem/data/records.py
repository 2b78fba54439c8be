"""Checks shared by every question format: the question, the golden answers, the id.

Every refusal is one `DataError` that starts with where the row is (`file:line` for jsonl,
`file: row N` for parquet) and names the field at fault, so a bad row in a 170k-row file is
found without a traceback.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set

from .errors import DataError


@dataclass
class Parsed:
    """One row read from a file, before its id is settled (`own_id` None: the file has none)."""

    own_id: Optional[str]
    question: str
    golden_answers: List[str]
    metadata: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TextLimits:
    """Longest question and answer a conversion accepts (`areal-mem data convert` flags): a
    question of 256 kB is no question, and 8,192 of them would take gigabytes to convert."""

    max_question_chars: int = 8192
    max_answer_chars: int = 2048

    def check(self, parsed: Parsed, where: str) -> None:
        if len(parsed.question) > self.max_question_chars:
            raise DataError(
                f"{where}: 'question' has {len(parsed.question)} characters, over the limit of "
                f"{self.max_question_chars} (--max-question-chars)"
            )
        for k, answer in enumerate(parsed.golden_answers):
            if len(answer) > self.max_answer_chars:
                raise DataError(
                    f"{where}: answer {k} has {len(answer)} characters, over the limit of "
                    f"{self.max_answer_chars} (--max-answer-chars)"
                )


def json_value(value: Any, where: str, name: str, depth: int = 0) -> Any:
    """`value` (from a parquet column) if a task file can hold it as JSON; else a DataError naming
    `name` and the type (binary, timestamps, decimals, non-finite floats)."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if depth < 32 and isinstance(value, (list, tuple)):
        return [json_value(v, where, f"{name}[{k}]", depth + 1) for k, v in enumerate(value)]
    if depth < 32 and isinstance(value, dict):
        return {str(k): json_value(v, where, f"{name}.{k}", depth + 1) for k, v in value.items()}
    raise DataError(
        f"{where}: {name!r} holds {type(value).__name__} {str(value)[:40]!r}, which a task file (JSON) cannot "
        f"hold; convert the column to text or numbers first"
    )


def describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return "an empty string" if not value.strip() else "a string"
    if isinstance(value, dict):
        return f"an object with keys {sorted(map(str, value))[:6]}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    return type(value).__name__


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (what pandas hands out for parquet lists) as Python values."""
    if isinstance(value, (str, bytes, dict, list, tuple)) or value is None:
        return value
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value


def question_from(value: Any, where: str, name: str = "question") -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: {name!r} must be a non-empty string (got {describe(value)})")
    return value.strip()


def answers_from(value: Any, where: str, name: str) -> List[str]:
    """Golden answers as a list of strings from a list, a numpy array, or a single string/number."""
    value = _plain(value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise DataError(f"{where}: {name!r} must be a non-empty list of strings (got {describe(value)})")
    out = []
    for k, answer in enumerate(value):
        answer = _plain(answer)
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
            raise DataError(f"{where}: {name!r} must be a non-empty list of strings (item {k} is {describe(answer)})")
        out.append(str(answer))
    if not any(a.strip() for a in out):
        raise DataError(f"{where}: {name!r} must be a non-empty list of strings (every answer is blank)")
    return out


def id_from(value: Any, where: str, name: str) -> Optional[str]:
    """A file's own id (string or integer); None when it is absent or empty."""
    value = _plain(value)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"{where}: {name!r} must be a string or an integer (got {describe(value)})")
    return str(value)


def file_stem(path: str) -> str:
    name = os.path.basename(path)
    for suffix in (".jsonl", ".json", ".parquet"):
        if name.endswith(suffix):
            return name[: -len(suffix)] or name
    return name


class IdRule:
    """The id rule, the same in every format and stable across runs of the same file:

    - the file's own id when the row has one (format by format: FlashRAG `id`, ASearcher
      `idx`/`qid`/`id`, Search-R1 `id`, MemSearcher `extra_info.id`);
    - otherwise `<file stem>-<row>`, row = the question's 0-based position in the file
      (`nq_hotpotqa_train.parquet` row 12 -> `nq_hotpotqa_train-12`);
    - an id met again later in the same file becomes `<id>#<row>` (group ids derive from task
      ids, so two questions must not share one; the first keeps its id).
    """

    def __init__(self, path: str) -> None:
        self.stem = file_stem(path)
        self.seen: Set[str] = set()
        self.made = 0  # ids built from the file name and row
        self.repeated = 0  # repeated ids given a `#<row>` suffix

    def assign(self, own: Optional[str], row: int) -> str:
        if own is None:
            new = f"{self.stem}-{row}"
            self.made += 1
        else:
            new = own
        if new in self.seen:
            self.repeated += 1
            base, k = f"{new}#{row}", 1
            new = base
            while new in self.seen:
                new, k = f"{base}.{k}", k + 1
        self.seen.add(new)
        return new
