"""Search-R1 parquet: `question`, `golden_answers`, `reward_model.ground_truth.target`, `data_source`.

Search-R1's files (nq_hotpotqa_train) also carry a chat `prompt`; it is not read,
because the workflow renders its own prompt from the question.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DataError
from .flashrag import task_from_record
from .task import Task


def _targets(row: Dict[str, Any]) -> Any:
    golden = row.get("golden_answers")
    if golden is not None:
        return golden
    truth = (row.get("reward_model") or {}).get("ground_truth") or {}
    return truth.get("target")


def read_searchr1(path: str) -> List[Task]:
    if not os.path.isfile(path):
        raise DataError(f"{path}: no such file")
    try:
        rows = pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from None
    tasks = []
    for i, row in enumerate(rows):
        record = {k: v for k, v in row.items() if k in ("question", "data_source", "metadata")}
        record["golden_answers"] = _targets(row)
        index = (row.get("extra_info") or {}).get("index")
        record["id"] = row.get("id") if row.get("id") is not None else (index if index is not None else i)
        tasks.append(task_from_record(record, f"{path}: row {i}", default_id=str(i)))
    return tasks


def write_searchr1(tasks: Iterable[Task], path: str, split: str = "train") -> int:
    """Write the columns Search-R1's reward and our reader use; `prompt` is left out."""
    rows = []
    for i, task in enumerate(tasks):
        source = str(task.metadata.get("data_source", ""))
        rows.append(
            {
                "id": task.id,
                "question": task.question,
                "golden_answers": list(task.golden_answers),
                "data_source": source,
                "ability": "fact-reasoning",
                "reward_model": {"style": "rule", "ground_truth": {"target": list(task.golden_answers)}},
                "extra_info": {"split": split, "index": i},
            }
        )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return len(rows)
