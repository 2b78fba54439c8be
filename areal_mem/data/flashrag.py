"""FlashRAG QA jsonl: one `{"id", "question", "golden_answers": [...]}` object per line."""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Iterator, List

from ..jsonl import iter_jsonl
from .errors import DataError
from .task import Task

_CORE = ("id", "question", "golden_answers", "metadata")


def task_from_record(record: Any, where: str, default_id: str) -> Task:
    """Check one decoded record; `where` ("file:line") goes into every error."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question = record.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: 'question' must be a non-empty string")
    golden = record.get("golden_answers")
    if isinstance(golden, str):
        golden = [golden]
    if not (isinstance(golden, list) and golden and all(isinstance(g, (str, int, float)) for g in golden)):
        raise DataError(f"{where}: 'golden_answers' must be a non-empty list of strings")
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise DataError(f"{where}: 'metadata' must be an object")
    metadata = {**{k: v for k, v in record.items() if k not in _CORE}, **metadata}
    raw_id = record.get("id", default_id)
    return Task(id=str(raw_id), question=question.strip(), golden_answers=[str(g) for g in golden], metadata=metadata)


def iter_flashrag(path: str) -> Iterator[Task]:
    for n, (where, record) in enumerate(iter_jsonl(path, DataError)):
        yield task_from_record(record, where, default_id=str(n))


def read_flashrag(path: str) -> List[Task]:
    return list(iter_flashrag(path))


def write_flashrag(tasks: Iterable[Task], path: str) -> int:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for task in tasks:
            f.write(json.dumps(task.to_json(), ensure_ascii=False) + "\n")
            n += 1
    return n
