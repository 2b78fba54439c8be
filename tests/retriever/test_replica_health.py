"""Two real retriever replicas, one of them stopped (SIGSTOP) under load: the client's health
check takes it out of the rotation within its deadline, the requests that were waiting on it
move to the other one, `index_checksum()` is answered by the one that answers, and the stopped
replica is put back once it answers again (SIGCONT)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from areal_mem.retriever.client import RetrieverClient
from areal_mem.retriever.launch import start_retriever


def _served(handle) -> int:
    return handle.health()["queries"]


def test_a_stopped_replica_leaves_the_rotation_and_comes_back(bm25_dir):
    with (
        start_retriever(bm25_dir, overrides=["retriever.threads=1"]) as a,
        start_retriever(bm25_dir, overrides=["retriever.threads=1"]) as b,
    ):

        async def main():
            client = RetrieverClient([a.url, b.url], timeout_s=30, health_interval_s=0.2, health_timeout_s=0.5)
            async with client:
                checksum = await client.index_checksum()
                assert len(await client.search("capital city", 2)) == 2
                os.kill(b.child.proc.pid, signal.SIGSTOP)
                try:
                    t0 = time.monotonic()
                    answers = await asyncio.gather(*(client.search(f"capital city {i}", 2) for i in range(40)))
                    took = time.monotonic() - t0
                    assert all(len(d) == 2 for d in answers)
                    assert client.health.healthy() == [a.url]
                    assert await client.index_checksum() == checksum  # b does not answer: a does
                finally:
                    os.kill(b.child.proc.pid, signal.SIGCONT)
                deadline = time.monotonic() + 10
                while client.health.healthy() != [a.url, b.url]:
                    assert time.monotonic() < deadline, "b never came back"
                    await asyncio.sleep(0.1)
                before = _served(b)
                await asyncio.gather(*(client.search(f"river {i}", 2) for i in range(20)))
                return took, _served(b) - before

        took, on_b = asyncio.run(main())
    print(f"40 searches with one of two replicas stopped: {took:.2f} s (timeout_s 30); after SIGCONT b served {on_b}")
    assert took < 10  # none waited its 30 s timeout on the stopped replica
    assert on_b >= 5  # back in rotation
