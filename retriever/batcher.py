"""Gather concurrent queries into micro-batches for the encoder and the index.

The first query of a batch waits at most `window_s` for company, a batch holds at most
`max_batch` queries, and the search runs in one worker thread so the event loop keeps
accepting requests meanwhile: queries that arrive during a search form the next batch.
`max_batch=1` is the one-query-at-a-time baseline (a global lock around every search).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Tuple

SearchFn = Callable[[List[str], int], list]  # (queries, k) -> one result per query


class MicroBatcher:
    def __init__(self, search: SearchFn, max_batch: int, window_s: float):
        if max_batch < 1:
            raise ValueError(f"retriever.max_batch_size must be >= 1, got {max_batch}")
        self._search, self.max_batch, self.window_s = search, max_batch, window_s
        self._queue: asyncio.Queue[Tuple[str, int, asyncio.Future]] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retriever-search")
        self._task: asyncio.Task | None = None
        self.batches = 0  # searches run (for /health and tests)
        self.queries = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=True)

    async def submit(self, query: str, k: int) -> list:
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put((query, k, fut))
        return await fut

    async def submit_many(self, queries: List[str], k: int) -> List[list]:
        return list(await asyncio.gather(*(self.submit(q, k) for q in queries)))

    async def _collect(self) -> list:
        batch = [await self._queue.get()]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.window_s
        while len(batch) < self.max_batch:
            try:
                batch.append(self._queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self._queue.get(), left))
            except TimeoutError:
                break
        return batch

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect()
            batch = [item for item in batch if not item[2].done()]  # the client went away
            if not batch:
                continue
            k = max(item[1] for item in batch)
            try:
                results = await loop.run_in_executor(self._executor, self._search, [q for q, _, _ in batch], k)
            except Exception as e:  # one failing batch must not stop the service
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            self.batches += 1
            self.queries += len(batch)
            for (_, want, fut), res in zip(batch, results):
                if not fut.done():
                    fut.set_result(res[:want])
