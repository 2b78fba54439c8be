"""Document contents stored with the index as an Arrow IPC file, memory-mapped when served.

Search results are row numbers; the store turns them into `{"id", "contents", ...}` without
holding the corpus in Python objects (wiki-18 is 21M passages). A passage's other corpus fields
(`title`, `url`, ...) are kept as JSON text in an `extra` column and merged into its document;
an index built before that column existed serves `{"id", "contents"}` as it did.

An imported index (`areal-mem retriever import`) keeps no copy of its corpus: `OffsetDocStore`
memory-maps `offsets.u64` (the byte offset of each passage line) and reads a line by positional
read when it is asked for, so serving wiki-18 (14 GB of jsonl) holds none of it in memory.
"""

from __future__ import annotations

import bisect
import json
import os
from typing import List, Sequence, Tuple

import numpy as np
import pyarrow as pa

from .corpus import Passage, parse_line

DOCS = "docs.arrow"
OFFSETS = "offsets.u64"  # little-endian uint64 byte offset of each passage line of the corpus
SPAN_CHUNK = 1 << 20  # rows per step when finding the longest passage (8 MiB of offsets)


def longest_span(offsets: np.ndarray, end: int) -> Tuple[int, int]:
    """(row, bytes) of the longest span between consecutive `offsets` (the last one ends at
    `end`), read in chunks so that 21M rows take no 168 MB temporary; (-1, 0) when empty."""
    best_row, best, n = -1, 0, len(offsets)
    for s in range(0, n, SPAN_CHUNK):
        e = min(n, s + SPAN_CHUNK)
        starts = offsets[s:e].astype(np.int64)
        ends = np.append(offsets[s + 1 : e].astype(np.int64), np.int64(end) if e == n else np.int64(offsets[e]))
        spans = ends - starts
        i = int(np.argmax(spans))
        if spans[i] > best:
            best_row, best = s + i, int(spans[i])
    return best_row, best


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

    def longest(self) -> Tuple[int, int]:
        """(row, bytes) of the longest `contents`, from the column's offsets alone."""
        best_row, best = -1, 0
        for j, col in enumerate(self._contents):
            if len(col) == 0:
                continue
            offsets = np.frombuffer(col.buffers()[1], dtype=np.int64)[col.offset : col.offset + len(col) + 1]
            row, n = longest_span(offsets[:-1], int(offsets[-1]))
            if n > best:
                best_row, best = self._starts[j] + row, n
        return best_row, best

    def get(self, rows: Sequence[int]) -> List[dict]:
        """Documents of `rows`, in that order."""
        out = []
        for row in rows:
            if not 0 <= row < len(self):
                raise IndexError(f"document row {row} outside 0..{len(self) - 1}")
            j = bisect.bisect_right(self._starts, row) - 1
            i = row - self._starts[j]
            doc = {"id": self._ids[j][i].as_py(), "contents": self._contents[j][i].as_py()}
            extras = self._extra[j]
            extra = extras[i].as_py() if extras is not None else ""
            out.append({**json.loads(extra), **doc} if extra else doc)
        return out


class OffsetDocStore:
    """Documents read from the corpus file itself: row i is the line at `offsets[i]`.

    The offsets are a memory map (8 bytes a passage, paged in as touched) and a line is one
    `os.pread` (a seek and read in one call, safe from any thread), so memory does not grow
    with the corpus. A line that no longer parses raises `CorpusError` naming file and row.
    """

    READ = 4096  # bytes per read; wiki-18 lines are about 600 bytes

    def __init__(self, corpus_path: str, offsets_path: str):
        self.path = corpus_path
        size = os.path.getsize(offsets_path)
        if size % 8:
            raise ValueError(f"{offsets_path}: {size} bytes, not a whole number of uint64 offsets")
        self._offsets = np.memmap(offsets_path, dtype="<u8", mode="r") if size else np.zeros(0, "<u8")
        self._fd = os.open(corpus_path, os.O_RDONLY)

    def __len__(self) -> int:
        return len(self._offsets)

    def longest(self) -> Tuple[int, int]:
        """(row, bytes) of the longest passage line (newline included), from the offsets alone."""
        return longest_span(self._offsets, os.fstat(self._fd).st_size)

    def line(self, row: int) -> bytes:
        """The raw bytes of passage `row`'s line, without its newline."""
        if not 0 <= row < len(self):
            raise IndexError(f"document row {row} outside 0..{len(self) - 1}")
        off, parts = int(self._offsets[row]), []
        while True:
            chunk = os.pread(self._fd, self.READ, off)
            end = chunk.find(b"\n")
            if end >= 0 or not chunk:
                parts.append(chunk[:end] if end >= 0 else chunk)
                return b"".join(parts)
            parts.append(chunk)
            off += len(chunk)

    def get(self, rows: Sequence[int]) -> List[dict]:
        """Documents of `rows`, in that order."""
        out = []
        for row in rows:
            p = parse_line(self.line(row), f"{self.path} row {row}")
            doc = {"id": p.id, "contents": p.contents}
            out.append({**json.loads(p.extra), **doc} if p.extra else doc)
        return out

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()
