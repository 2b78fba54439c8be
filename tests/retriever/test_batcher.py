"""The micro-batcher's schedule: round-robin over waiting requests, a character budget per batch,
each request's answers its own and in order (a plain search function records the batches)."""

from __future__ import annotations

import asyncio
import threading
from typing import List

from areal_mem.retriever.batcher import MicroBatcher


class Recorder:
    """A search that records each batch; the first one waits until released."""

    def __init__(self):
        self.batches: List[List[str]] = []
        self.release = threading.Event()

    def __call__(self, queries: List[str], k: int) -> list:
        if not self.batches:
            self.release.wait(10)
        self.batches.append(list(queries))
        return [[(q, float(i))] * k for i, q in enumerate(queries)]


async def _schedule(round_robin: bool, max_chars: int = 0, large: int = 10, width: int = 1):
    rec = Recorder()
    b = MicroBatcher(rec, max_batch=4, window_s=0.0, round_robin=round_robin, max_chars=max_chars)
    b.start()
    try:
        first = asyncio.ensure_future(b.submit("first", 1))  # holds the search thread
        while not b._task or b._waiting:
            await asyncio.sleep(0.01)
        a = asyncio.ensure_future(b.submit_many([f"a{i}" * width for i in range(large)], 1))
        c = asyncio.ensure_future(b.submit_many([f"c{i}" * width for i in range(large)], 1))
        await asyncio.sleep(0.05)
        small = asyncio.ensure_future(b.submit("small", 2))
        await asyncio.sleep(0.05)
        rec.release.set()
        out = await asyncio.gather(first, a, c, small)
    finally:
        await b.close()
    return rec.batches, out


def test_a_small_request_waits_behind_one_batch_not_the_whole_queue():
    batches, (first, a, c, small) = asyncio.run(_schedule(round_robin=True))
    assert batches[0] == ["first"]
    assert batches[1] == ["a0", "c0", "small", "a1"]  # one of each waiting request in turn
    assert batches[2] == ["c1", "a2", "c2", "a3"]
    assert [h[0][0] for h in a] == [f"a{i}" for i in range(10)]  # each its own answers, in order
    assert [h[0][0] for h in c] == [f"c{i}" for i in range(10)]
    assert small == [("small", 2.0)] * 2  # its own k


def test_arrival_order_queues_it_behind_every_query_before_it():
    batches, (_, a, _, small) = asyncio.run(_schedule(round_robin=False))
    assert batches[1] == ["a0", "a1", "a2", "a3"]
    where = next(i for i, batch in enumerate(batches) if "small" in batch)
    assert where == 6 and batches[where][-1] == "small"  # behind 20 queries: 5 batches of 4
    assert [h[0][0] for h in a] == [f"a{i}" for i in range(10)]


def test_a_batch_holds_at_most_max_chars_of_queries():
    batches, _ = asyncio.run(_schedule(round_robin=True, max_chars=250, large=4, width=50))
    assert batches[1] == ["a0" * 50, "c0" * 50, "small"]  # 205 characters; a1 would make 305
    assert all(sum(len(q) for q in b) <= 250 for b in batches)
    assert [len(b) for b in batches[2:]] == [2, 2, 2]  # 100-character queries: two a batch, not four
    assert sum(len(b) for b in batches) == 1 + 8 + 1


def test_one_requests_submits_share_its_turn():
    async def main():
        rec = Recorder()
        rec.release.set()
        b = MicroBatcher(rec, max_batch=2, window_s=0.0)
        b.start()
        try:
            one, two = b.request(), b.request()
            results = await asyncio.gather(*(one(f"x{i}", 1) for i in range(3)), two("y", 1))
        finally:
            await b.close()
        return rec.batches, results

    batches, results = asyncio.run(main())
    assert batches[0] == ["x0", "y"] and batches[1:] == [["x1", "x2"]]
    assert [r[0][0] for r in results] == ["x0", "x1", "x2", "y"]
