"""The service's query cache through real HTTP: exact hit and miss counts, the LRU bound, answers
equal to the uncached service's, and the index checksum in /health (#20 item 5)."""

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from areal_mem.retriever.launch import start_retriever
from areal_mem.retriever.manifest import Manifest


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, json.loads(resp.read())


@pytest.fixture(scope="module")
def cached_server(bm25_dir):
    with start_retriever(bm25_dir, overrides=["retriever.threads=1", "retriever.cache_size=3"]) as handle:
        yield handle


def test_hits_misses_lru_bound_and_same_answers(cached_server, bm25_server, title_queries):
    (a, _), (b, _), (c, _) = title_queries[:3]
    steps = [  # (route, body, hits, misses, size) after the request
        ("/search", {"query": a, "top_n": 3}, 0, 1, 1),
        ("/search", {"query": a, "top_n": 3}, 1, 1, 1),
        ("/search", {"query": a, "top_n": 5}, 1, 2, 2),  # another top_n is another entry
        ("/batch_search", {"query": [b, a, b], "top_n": 3}, 3, 3, 3),  # the second b shares the first's search
        ("/retrieve", {"queries": [c], "topk": 3}, 3, 4, 3),  # full: evicts the least recent, (a, 5)
        ("/search", {"query": a, "top_n": 5}, 3, 5, 3),  # so this is a miss again; evicts (a, 3)
        ("/search", {"query": c, "top_n": 3}, 4, 5, 3),  # the /retrieve answer serves /search too
    ]
    searched_before = cached_server.health()["queries"]
    for route, body, hits, misses, size in steps:
        got = post(cached_server.url + route, body)
        assert got == post(bm25_server.url + route, body)  # the uncached service's answer
        assert got[0] == 200
        cache = cached_server.health()["cache"]
        assert (cache["hits"], cache["misses"], cache["size"]) == (hits, misses, size), (route, body)
    counts = {k: cache[k] for k in ("size", "capacity", "hits", "misses", "hit_rate")}
    assert counts == {"size": 3, "capacity": 3, "hits": 4, "misses": 5, "hit_rate": round(4 / 9, 4)}
    assert 0 < cache["bytes"] <= cache["max_bytes"] == 64 * 2**20  # retriever.cache_mb
    assert cached_server.health()["queries"] - searched_before == 5  # only misses reach the index
    assert bm25_server.health()["cache"] is None  # off by default


def test_concurrent_identical_queries_share_one_search(cached_server, title_queries):
    before = cached_server.health()
    body = {"query": title_queries[10][0], "top_n": 2}
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: post(cached_server.url + "/search", body), range(8)))
    assert all(a == answers[0] for a in answers) and answers[0][0] == 200
    after = cached_server.health()
    assert after["cache"]["misses"] - before["cache"]["misses"] == 1
    assert after["cache"]["hits"] - before["cache"]["hits"] == 7
    assert after["queries"] - before["queries"] == 1


def test_health_names_the_index_by_its_manifest_checksum(cached_server, bm25_server, bm25_dir):
    checksum = Manifest.load(bm25_dir).checksum()
    assert checksum.startswith("sha256:") and len(checksum) == 7 + 64
    assert cached_server.health()["index_checksum"] == bm25_server.health()["index_checksum"] == checksum
    moved = Manifest.load(bm25_dir)
    moved.corpus_path, moved.build_seconds = "/elsewhere/corpus.jsonl", 123.0  # not what it answers
    assert moved.checksum() == checksum
    moved.count += 1
    assert moved.checksum() != checksum


def test_the_cache_is_bounded_by_bytes_as_well_as_entries():
    """1,000 entries of long answers could hold a gigabyte: `retriever.cache_mb` bounds the bytes."""
    import asyncio

    from areal_mem.retriever.cache import HIT_OVERHEAD, QueryCache, entry_bytes

    async def search(query, top_n):
        return [({"id": str(i), "contents": "x" * 1000}, 1.0) for i in range(top_n)]

    one = entry_bytes("q0", asyncio.run(search("q0", 2)))
    assert one == 2 + 2 * (HIT_OVERHEAD + 1 + 1000)

    async def go():
        cache = QueryCache(capacity=100, max_bytes=3 * one)
        for i in range(5):
            await cache.get(f"q{i}", 2, search)
        assert (len(cache), cache.bytes) == (3, 3 * one)  # the two oldest left for the bytes
        assert [k[0] for k in cache._entries] == ["q2", "q3", "q4"]
        big = await cache.get("big", 7, search)  # larger than the whole budget: answered, not kept
        assert len(big) == 7 and ("big", 7) not in cache._entries and cache.bytes == 3 * one
        assert cache.stats()["max_bytes"] == 3 * one

    asyncio.run(go())
