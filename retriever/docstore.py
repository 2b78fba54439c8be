"""Document contents stored with the index as an Arrow IPC file, memory-mapped when served.

Search results are row numbers; the store turns them into `{"id", "contents"}` without holding
the corpus in Python objects (wiki-18 is 21M passages).
"""
from __future__ import annotations

import os
from typing import List, Sequence

import pyarrow as pa

from .corpus import Passage

DOCS = "docs.arrow"
SCHEMA = pa.schema([("id", pa.string()), ("contents", pa.large_string())])


class DocWriter:
    def __init__(self, out_dir: str):
        self._sink = pa.OSFile(os.path.join(out_dir, DOCS), "wb")
        self._writer = pa.ipc.new_file(self._sink, SCHEMA)

    def write(self, passages: Sequence[Passage]) -> None:
        batch = pa.record_batch(
            [pa.array([p.id for p in passages], pa.string()),
             pa.array([p.contents for p in passages], pa.large_string())],
            schema=SCHEMA,
        )
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()
        self._sink.close()


class DocStore:
    def __init__(self, index_dir: str):
        self._table = pa.ipc.open_file(pa.memory_map(os.path.join(index_dir, DOCS), "r")).read_all()

    def __len__(self) -> int:
        return self._table.num_rows

    def get(self, rows: Sequence[int]) -> List[dict]:
        """Documents of `rows`, in that order."""
        return self._table.take(pa.array(rows, pa.int64())).to_pylist()
