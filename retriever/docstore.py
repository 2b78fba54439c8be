"""Document contents stored with the index as an Arrow IPC file, memory-mapped when served.

Search results are row numbers; the store turns them into `{"id", "contents", ...}` without
holding the corpus in Python objects (wiki-18 is 21M passages). A passage's other corpus fields
(`title`, `url`, ...) are kept as JSON text in an `extra` column and merged into its document;
an index built before that column existed serves `{"id", "contents"}` as it did.
"""

from __future__ import annotations

import bisect
import json
import os
from typing import List, Sequence

import pyarrow as pa

from .corpus import Passage

DOCS = "docs.arrow"
SCHEMA = pa.schema([("id", pa.string()), ("contents", pa.large_string()), ("extra", pa.large_string())])


class DocWriter:
    def __init__(self, out_dir: str):
        self._sink = pa.OSFile(os.path.join(out_dir, DOCS), "wb")
        self._writer = pa.ipc.new_file(self._sink, SCHEMA)

    def write(self, passages: Sequence[Passage]) -> None:
        batch = pa.record_batch(
            [
                pa.array([p.id for p in passages], pa.string()),
                pa.array([p.contents for p in passages], pa.large_string()),
                pa.array([p.extra for p in passages], pa.large_string()),
            ],
            schema=SCHEMA,
        )
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()
        self._sink.close()


class DocStore:
    """Row lookups by scalar access into the memory-mapped record batches.

    `Table.take` costs milliseconds per call whatever the row count; a few scalar reads per
    hit cost microseconds, which matters when one query is answered at a time.
    """

    def __init__(self, index_dir: str):
        reader = pa.ipc.open_file(pa.memory_map(os.path.join(index_dir, DOCS), "r"))
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        self._ids = [b.column(0) for b in batches]
        self._contents = [b.column(1) for b in batches]
        self._extra = [b.column("extra") if "extra" in b.schema.names else None for b in batches]
        self._starts = [0]
        for b in batches:
            self._starts.append(self._starts[-1] + b.num_rows)

    def __len__(self) -> int:
        return self._starts[-1]

    def get(self, rows: Sequence[int]) -> List[dict]:
        """Documents of `rows`, in that order."""
        out = []
        for row in rows:
            if not 0 <= row < len(self):
                raise IndexError(f"document row {row} outside 0..{len(self) - 1}")
            j = bisect.bisect_right(self._starts, row) - 1
            i = row - self._starts[j]
            doc = {"id": self._ids[j][i].as_py(), "contents": self._contents[j][i].as_py()}
            extra = self._extra[j][i].as_py() if self._extra[j] is not None else ""
            out.append({**json.loads(extra), **doc} if extra else doc)
        return out
