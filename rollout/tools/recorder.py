"""Record every search a rollout makes (`rollout.record_tools`), as a wrapper of the backend.

Wrapping the `SearchBackend` rather than a tool means every tool that searches, plugin tools
included, is recorded without a change. One process writes one file, appending one line per
answered call and flushing it, so a crash loses at most the line being written and concurrent
workers never interleave; an exclusive lock on the file refuses a second process at once
instead of letting two writers mix their lines. Only answered calls are recorded: a search
that failed has no documents to replay (a replay stops with a clear error at that call).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from typing import Any, Dict, List, Optional

from .base import EPISODE, SearchBackend, WrappedBackend
from .tape import TapeRecord


class RecordingBackend(WrappedBackend):
    def __init__(self, inner: SearchBackend, path: str) -> None:
        super().__init__(inner)
        self.inner: SearchBackend = inner  # a recording always has a backend to record
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            raise RuntimeError(
                f"{path}: another process is recording tool calls into this file; give each process its own"
            ) from None
        self._checksum: Optional[str] = None
        self._checksum_lock = asyncio.Lock()
        self.recorded = 0

    async def index_checksum(self) -> str:
        """The checksum of the index behind the backend, asked once: the retriever client's
        (its /health), "" for a backend that cannot name its index."""
        async with self._checksum_lock:
            if self._checksum is None:
                ask = getattr(self.inner, "index_checksum", None)
                self._checksum = await ask() if ask is not None else ""
            return self._checksum

    async def search(self, query: str, top_n: int) -> List[Dict[str, Any]]:
        checksum = await self.index_checksum()
        wall, start = time.time(), time.monotonic()
        docs = await self.inner.search(query, top_n)
        record = TapeRecord(query, top_n, docs, checksum, EPISODE.get(), wall, time.monotonic() - start)
        self._file.write(record.to_line())
        self._file.flush()
        self.recorded += 1
        return docs

    async def close(self) -> None:
        self._file.close()  # releases the lock
        await super().close()
