"""Writing Search-R1's training parquet layout (reading: `parquet.py`, which reads it and
MemSearcher's).

The columns Search-R1's reward and areal-mem's reader use, in the order its `nq_search.py`
leaves them: `id`, `question`, `golden_answers`, `data_source`, `ability`,
`reward_model = {style, ground_truth: {target}}`, `extra_info = {split, index}`. Its chat
`prompt` is left out: it holds Search-R1's own prompt text, and the workflows render theirs.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

import pyarrow as pa
import pyarrow.parquet as pq

from .task import Task
from .writing import atomic_output

_ANSWERS = pa.list_(pa.string())
SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("question", pa.string()),
        ("golden_answers", _ANSWERS),
        ("data_source", pa.string()),
        ("ability", pa.string()),
        (
            "reward_model",
            pa.struct([("style", pa.string()), ("ground_truth", pa.struct([("target", _ANSWERS)]))]),
        ),
        ("extra_info", pa.struct([("split", pa.string()), ("index", pa.int64())])),
    ]
)
WRITE_ROWS = 4096


def write_searchr1(tasks: Iterable[Task], path: str, split: str = "train") -> int:
    n = 0
    rows: List[Dict[str, Any]] = []
    with atomic_output(path) as tmp, pq.ParquetWriter(tmp, SCHEMA) as writer:
        for task in tasks:
            answers = list(task.golden_answers)
            rows.append(
                {
                    "id": task.id,
                    "question": task.question,
                    "golden_answers": answers,
                    "data_source": str(task.metadata.get("data_source", "")),
                    "ability": "fact-reasoning",
                    "reward_model": {"style": "rule", "ground_truth": {"target": answers}},
                    "extra_info": {"split": split, "index": n},
                }
            )
            n += 1
            if len(rows) == WRITE_ROWS:
                writer.write_table(pa.Table.from_pylist(rows, schema=SCHEMA))
                rows = []
        if rows or n == 0:
            writer.write_table(pa.Table.from_pylist(rows, schema=SCHEMA))
    return n
