"""ASearcher's training jsonl (`ASearcher-Base-35k.jsonl`, `ASearcher-LRM-35k.jsonl` of
inclusionAI/ASearcher-train-data).

As ASearcher's trainer reads it (`AReaL/ASearcher/train/asearcher.py` loads it with
`load_dataset("json")`; `ASearcher/utils/search_tool.py` maps ids to answers): `question`, the
golden `answer` (a string or a list), the id in `idx`, else `qid`, else `id` (that order), an
optional `aug_answer` (extra answers its reward weighs 0.3) and other keys such as `source`.
`aug_answer` is kept in `metadata`, not among the golden answers: areal-mem's reward is the best
F1 over the golden answers, which would give an augmented answer full weight.
"""

from __future__ import annotations

from typing import Any

from .errors import DataError
from .records import Parsed, answers_from, id_from, question_from

ID_KEYS = ("idx", "qid", "id")  # the order of ASearcher's load_metadata


def asearcher_record(record: Any, where: str) -> Parsed:
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    question = question_from(record.get("question"), where)
    answers = answers_from(record.get("answer"), where, "answer")
    own, used = None, None
    for key in ID_KEYS:
        own = id_from(record.get(key), where, key)
        if own is not None:
            used = key
            break
    metadata = {k: v for k, v in record.items() if k not in ("question", "answer", used)}
    return Parsed(own, question, answers, metadata)
