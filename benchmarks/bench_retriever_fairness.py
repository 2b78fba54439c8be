"""Small queries beside large legal batches: the retriever's round-robin micro-batches against
arrival order, measured side by side in one run (issue 57's probe).

    nice -n 10 .venv/bin/python benchmarks/bench_retriever_fairness.py            # BM25, 20k passages
    nice -n 10 .venv/bin/python benchmarks/bench_retriever_fairness.py --seconds 30 --repeats 3

Two clients send `/batch_search` bodies of 230 queries of 4,000 characters (legal: under
`retriever.max_queries` and `max_query_chars`) back to back; a third sends one small `/search`
at a time. Each arm is a real `retriever serve` subprocess: `round_robin` is the service as it
is (`round_robin+chars`: with its `max_batch_chars` budget), `round_robin` without the
character budget, `arrival` sets `retriever.batch_order=arrival` too. The table gives the small query's latency
percentiles (median over repeats) and the large batches completed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from typing import Dict, List

import aiohttp

from areal_mem.app.world import build_world
from areal_mem.retriever.build import build_index
from areal_mem.retriever.launch import start_retriever


def words_of(corpus: str, n: int = 20000) -> List[str]:
    out: List[str] = []
    with open(corpus) as f:
        for line in f:
            out.extend(line.split()[:20])
            if len(out) > n:
                break
    return [w.strip('",{}:') for w in out if w.strip('",{}:').isalpha()]


def long_query(rng: random.Random, words: List[str], chars: int) -> str:
    text = ""
    while len(text) < chars:
        text += rng.choice(words) + " "
    return text[:chars].strip()


async def arm(url: str, words: List[str], args: argparse.Namespace) -> Dict[str, float]:
    rng = random.Random(0)
    batches = [[long_query(rng, words, args.chars) for _ in range(args.batch)] for _ in range(4)]
    stop, done, lat = asyncio.Event(), [0], []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as s:

        async def large(i: int) -> None:
            while not stop.is_set():
                async with s.post(url + "/batch_search", json={"query": batches[i % 4], "top_n": 5}) as r:
                    assert r.status == 200, await r.text()
                    await r.read()
                done[0] += 1

        async def small() -> None:
            await asyncio.sleep(1.0)
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                t0 = time.monotonic()
                async with s.post(url + "/search", json={"query": rng.choice(words), "top_n": 3}) as r:
                    assert r.status == 200
                    await r.read()
                lat.append(time.monotonic() - t0)
                await asyncio.sleep(0.02)
            stop.set()

        await asyncio.gather(small(), *(large(i) for i in range(args.clients)))
    lat.sort()
    return {
        "p50_ms": 1e3 * lat[len(lat) // 2],
        "p99_ms": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "max_ms": 1e3 * lat[-1],
        "small": len(lat),
        "large_batches": done[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--passages", type=int, default=20000)
    p.add_argument("--seconds", type=float, default=20.0, help="small-query time per arm and repeat")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--batch", type=int, default=230)
    p.add_argument("--chars", type=int, default=4000)
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="fairness-")
    build_world(work, seed=0, passages=args.passages, questions=10)
    corpus = os.path.join(work, "corpus.jsonl")
    index = os.path.join(work, "bm25")
    build_index(corpus, index, "bm25", show_progress=False)
    words = words_of(corpus)
    arms = {
        "arrival": ["retriever.batch_order=arrival", "retriever.max_batch_chars=0"],
        "round_robin": ["retriever.batch_order=round_robin", "retriever.max_batch_chars=0"],
        "round_robin+chars": ["retriever.batch_order=round_robin"],
    }
    rows: Dict[str, List[Dict[str, float]]] = {name: [] for name in arms}
    for _ in range(args.repeats):
        for name in rows:
            overrides = ["retriever.threads=1", *arms[name]]
            with start_retriever(index, overrides=overrides) as h:
                rows[name].append(asyncio.run(arm(h.url, words, args)))
    keys = ["p50_ms", "p99_ms", "max_ms", "small", "large_batches"]
    print(f"\n{args.clients} clients x {args.batch} queries x {args.chars} chars, BM25 over {args.passages} passages")
    print("| order | " + " | ".join(keys) + " |")
    print("| --- |" + " --- |" * len(keys))
    med = {n: {k: statistics.median(r[k] for r in rs) for k in keys} for n, rs in rows.items()}
    for name, m in med.items():
        print(f"| {name} | " + " | ".join(f"{m[k]:.0f}" for k in keys) + " |")
    for name in ("round_robin", "round_robin+chars"):
        print(f"p99 ratio arrival / {name}: {med['arrival']['p99_ms'] / med[name]['p99_ms']:.1f}x")


if __name__ == "__main__":
    main()
