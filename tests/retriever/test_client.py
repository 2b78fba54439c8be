"""RetrieverClient against real aiohttp servers on 127.0.0.1: retries, failover, 4xx, rate limit."""

import asyncio
import time

import pytest
from aiohttp import web

from areal_mem.net import free_port
from areal_mem.retriever.client import RetrieverClient, RetrieverError

DOC = {"id": "7", "contents": '"T"\nx'}


async def _serve(fail_first: int = 0, status: int = 503):
    """A stand-in service answering /search: `fail_first` answers of `status`, then documents."""
    calls = []

    async def search(request):
        body = await request.json()
        calls.append((body, request.headers.get("Authorization")))
        if len(calls) <= fail_first:
            return web.json_response({"error": "nope", "field": "query"}, status=status)
        return web.json_response([DOC] * body["top_n"])

    async def batch_search(request):
        body = await request.json()
        calls.append((body, None))
        return web.json_response([[DOC] * body["top_n"] for _ in body["query"]])

    app = web.Application()
    app.router.add_post("/search", search)
    app.router.add_post("/batch_search", batch_search)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return f"http://127.0.0.1:{port}", calls, runner


def test_5xx_is_retried_with_backoff_then_succeeds():
    async def main():
        url, calls, runner = await _serve(fail_first=2)
        try:
            async with RetrieverClient(url, token="tok", max_retries=3, backoff_s=0.05) as c:
                start = time.monotonic()
                docs = await c.search("q", 2)
                elapsed = time.monotonic() - start
        finally:
            await runner.cleanup()
        assert docs == [DOC, DOC] and len(calls) == 3
        assert calls[0] == ({"query": "q", "top_n": 2}, "Bearer tok")
        assert elapsed >= 0.05 + 0.1  # two backoffs: 0.05 s then 0.1 s

    asyncio.run(main())


def test_retries_are_bounded_and_4xx_is_not_retried():
    async def main():
        url, calls, runner = await _serve(fail_first=100)
        try:
            async with RetrieverClient(url, max_retries=2, backoff_s=0.01) as c:
                with pytest.raises(RetrieverError, match="gave up after 3 attempts.*HTTP 503"):
                    await c.search("q", 1)
                assert len(calls) == 3
        finally:
            await runner.cleanup()
        url, calls, runner = await _serve(fail_first=100, status=400)
        try:
            async with RetrieverClient(url, max_retries=5, backoff_s=0.01) as c:
                with pytest.raises(RetrieverError, match="HTTP 400") as e:
                    await c.search("q", 1)
                assert e.value.status == 400 and len(calls) == 1
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_a_dead_replica_fails_over_to_a_live_one_and_batch_search():
    async def main():
        url, calls, runner = await _serve()
        dead = f"http://127.0.0.1:{free_port()}"
        try:
            async with RetrieverClient([dead, url], max_retries=1, backoff_s=0.01, timeout_s=5) as c:
                results = [await c.search("q", 1) for _ in range(4)]
                batch = await c.batch_search(["a", "b", "c"], 2)
        finally:
            await runner.cleanup()
        assert results == [[DOC]] * 4 and len(calls) == 5
        assert batch == [[DOC, DOC]] * 3 and calls[-1][0] == {"query": ["a", "b", "c"], "top_n": 2}

    asyncio.run(main())


def test_rate_limit_spaces_requests():
    async def main():
        url, calls, runner = await _serve()
        try:
            async with RetrieverClient(url, rate_limit_per_s=4) as c:
                start = time.monotonic()
                await asyncio.gather(*(c.search("q", 1) for _ in range(6)))
                elapsed = time.monotonic() - start
        finally:
            await runner.cleanup()
        assert len(calls) == 6 and elapsed >= 1.0  # 4 in the first second, the rest after it

    asyncio.run(main())


def test_needs_a_url():
    with pytest.raises(ValueError, match="at least one"):
        RetrieverClient([])


async def _health_service(checksum: str):
    async def health(request):
        return web.json_response({"status": "ok", "index_checksum": checksum})

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return f"http://127.0.0.1:{port}", runner


def test_index_checksum_needs_one_answer_and_refuses_two_indexes():
    async def main():
        (a, ra), (b, rb) = await _health_service("sha-1"), await _health_service("sha-2")
        dead = f"http://127.0.0.1:{free_port()}"  # nothing listens
        try:
            async with RetrieverClient([dead, a], health_timeout_s=0.5) as c:
                assert await c.index_checksum() == "sha-1"
            async with RetrieverClient([a, b]) as c:
                with pytest.raises(RetrieverError, match="serve different indexes"):
                    await c.index_checksum()
            async with RetrieverClient([dead], health_timeout_s=0.5) as c:
                with pytest.raises(RetrieverError, match="no retriever replica answered /health"):
                    await c.index_checksum()
        finally:
            await ra.cleanup()
            await rb.cleanup()

    asyncio.run(main())
