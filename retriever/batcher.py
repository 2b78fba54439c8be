"""Gather concurrent queries into micro-batches for the encoder and the index.

The first query of a batch waits at most `window_s` for company, a batch holds at most
`max_batch` queries, and the search runs in one worker thread so the event loop keeps
accepting requests meanwhile: queries that arrive during a search form the next batch.
`max_batch=1` is the one-query-at-a-time baseline (a global lock around every search).

Batches are filled round-robin over the requests waiting, one query of each in turn, not in
arrival order: two clients sending 230-query batches would otherwise queue a one-query request
behind all 460 of their queries (8 batches); round-robin puts it in the next batch, so a small
request waits behind at most the batch running when it arrived. Each request's answers are
its own queries' answers, in its order, whichever batches ran them. `round_robin=False` is
arrival order (the baseline of `benchmarks/bench_retriever_fairness.py`). A batch also holds at
most `max_chars` characters of queries (one query always goes), since a search's cost grows with
its terms: 64 queries of 4,000 characters would be one multi-second batch to wait behind.
"""

from __future__ import annotations

import asyncio
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable, Callable, Deque, List, Tuple

SearchFn = Callable[[List[str], int], list]  # (queries, k) -> one result per query
Item = Tuple[str, int, asyncio.Future]  # query, k, where its result goes


class MicroBatcher:
    def __init__(self, search: SearchFn, max_batch: int, window_s: float, round_robin: bool = True, max_chars: int = 0):
        if max_batch < 1:
            raise ValueError(f"retriever.max_batch_size must be >= 1, got {max_batch}")
        self._search, self.max_batch, self.window_s = search, max_batch, window_s
        self.round_robin, self.max_chars = round_robin, max_chars  # max_chars 0: no character budget
        self._requests: Deque[Deque[Item]] = deque()  # requests with queries waiting, in turn
        self._waiting = 0  # queries in `_requests`
        self._arrived = asyncio.Event()
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
        return await self.request()(query, k)

    async def submit_many(self, queries: List[str], k: int) -> List[list]:
        """One request's queries (top `k` each): their results, in order."""
        submit = self.request()
        return list(await asyncio.gather(*(submit(q, k) for q in queries)))

    def request(self) -> Callable[[str, int], Awaitable[list]]:
        """A `submit(query, k)` for one client request: every query it submits takes that
        request's turn in the round-robin (the query cache submits a request's misses one by one)."""
        items: Deque[Item] = deque()

        async def submit(query: str, k: int) -> list:
            fut = asyncio.get_running_loop().create_future()
            if not items:  # an emptied request left the rotation: it joins again at the back
                self._requests.append(items)
            items.append((query, k, fut))
            self._waiting += 1
            self._arrived.set()
            return await fut

        return submit

    def _take(self) -> List[Item]:
        """Up to `max_batch` queries, one of each waiting request in turn; a request left with
        queries goes behind the others."""
        batch: List[Item] = []
        chars = 0
        while self._requests and len(batch) < self.max_batch:
            if batch and self.max_chars and chars + len(self._requests[0][0][0]) > self.max_chars:
                break  # a batch's cost grows with its characters: long queries make short batches
            request = self._requests.popleft()
            chars += len(request[0][0])
            item = request.popleft()
            self._waiting -= 1
            if not item[2].done():  # done: its client went away
                batch.append(item)
            if request and self.round_robin:
                self._requests.append(request)
            elif request:
                self._requests.appendleft(request)
        return batch

    async def _collect(self) -> List[Item]:
        while not self._requests:
            self._arrived.clear()
            await self._arrived.wait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.window_s
        while self._waiting < self.max_batch and (left := deadline - loop.time()) > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except TimeoutError:
                break
        return self._take()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect()
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
