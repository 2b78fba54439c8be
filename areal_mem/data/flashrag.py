"""FlashRAG QA jsonl: one `{"id", "question", "golden_answers": [...], "metadata": {...}}` per line.

This is also areal-mem's own task format (`Task.to_json`). Read as FlashRAG publishes its eval
sets (`{ds}/test.jsonl`, `dev.jsonl`) and as Search-R1 / MemSearcher load them.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from .errors import DataError
from .records import Parsed, answers_from, describe, id_from, question_from
from .task import Task
from .writing import atomic_output

_CORE = ("id", "question", "golden_answers", "metadata")


def flashrag_record(record: Any, where: str) -> Parsed:
    """Check one decoded line; `where` ("file:line") starts every error."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question = question_from(record.get("question"), where)
    golden = answers_from(record.get("golden_answers"), where, "golden_answers")
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise DataError(f"{where}: 'metadata' must be an object (got {describe(metadata)})")
    metadata = {**{k: v for k, v in record.items() if k not in _CORE}, **metadata}
    return Parsed(id_from(record.get("id"), where, "id"), question, golden, metadata)


def write_flashrag(tasks: Iterable[Task], path: str) -> int:
    n = 0
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for task in tasks:
            f.write(json.dumps(task.to_json(), ensure_ascii=False) + "\n")
            n += 1
    return n
