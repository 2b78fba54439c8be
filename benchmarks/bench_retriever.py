"""Retrieval service: micro-batched against one-query-at-a-time, measured side by side in one run;
with `--cache-size`, the query cache on against off on a rollout-shaped query stream.

    .venv/bin/python benchmarks/bench_retriever.py                      # 100k-passage world
    .venv/bin/python benchmarks/bench_retriever.py --dense-passages 5000  # smaller dense index
    .venv/bin/python benchmarks/bench_retriever.py --cache-size 10000 --skip-batching --replay

Builds a synthetic world, a BM25 index of the whole corpus and a dense (MiniLM, faiss Flat)
index of its first `--dense-passages` passages (timing both builds), then serves each index
from two real subprocesses on 127.0.0.1: `max_batch_size=64` (micro-batched) and
`max_batch_size=1` (one query at a time, the global-lock design). At every concurrency level
both are driven back to back over HTTP `/search` with the world's question texts; the table
gives queries/s, p50/p99 latency and the micro-batched/one-at-a-time QPS ratio.

The cache table drives both servers (`retriever.cache_size` 0 and N) with the same stream of
episodes shaped like a MemSearcher rollout: G episodes per training question (a group), each
searching the titles of its question's supporting passages in order, a wrong title instead with
`--mistake-rate`, `--epochs` passes over the questions; `--concurrency` episodes in flight, a
group's episodes side by side. It gives the hit rate the service reports and the per-query
latency the clients see. `--replay` times the same searches one at a time through the
rollout's search backends: live (the retriever client, cache off), live while recording a tape
(`rollout.record_tools`), and replayed from that tape (`rollout.replay_tools`, no service).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from typing import Dict, List

import aiohttp
import numpy as np

from areal_mem.app.world import build_world
from areal_mem.config.retriever import Dtype, RetrieverConfig
from areal_mem.data import read_tasks
from areal_mem.retriever.build import build_index
from areal_mem.retriever.encoder import set_threads
from areal_mem.retriever.index import load_index
from areal_mem.retriever.launch import start_retriever
from areal_mem.retriever.manifest import Manifest
from areal_mem.rollout.oracle import corpus_titles


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--passages", type=int, default=100_000, help="world corpus size (BM25 indexes all of it)")
    p.add_argument("--dense-passages", type=int, default=100_000, help="passages in the dense index (corpus head)")
    p.add_argument("--requests", type=int, default=384, help="requests per (index, mode, concurrency) cell")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--window-ms", type=float, default=0.0, help="micro-batch window")
    p.add_argument("--threads", type=int, default=1, help="torch/faiss threads of builds and servers")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="dense encoder dtype")
    p.add_argument("--kinds", nargs="+", default=["bm25", "dense"], choices=["bm25", "dense"])
    p.add_argument("--workdir", default="", help="reuse worlds/indexes here (default: a temp folder)")
    p.add_argument("--reuse-indexes", action="store_true", help="keep indexes already in --workdir")
    p.add_argument("--json", default="", help="also write the results here")
    p.add_argument("--skip-batching", action="store_true", help="no micro-batched vs one-at-a-time table")
    p.add_argument("--cache-size", type=int, default=0, help="measure the query cache at this size (0: not)")
    p.add_argument("--stream-questions", type=int, default=200, help="training questions in the cache stream")
    p.add_argument("--group-size", type=int, default=5, help="episodes per question in the cache stream")
    p.add_argument("--epochs", type=int, default=2, help="passes over the questions in the cache stream")
    p.add_argument("--mistake-rate", type=float, default=0.3, help="share of searches for a wrong title")
    p.add_argument("--replay", action="store_true", help="time the stream's searches live, recorded, replayed")
    return p.parse_args()


def head(src: str, dst: str, n: int) -> str:
    with open(src) as f, open(dst, "w") as g:
        for _, line in zip(range(n), f):
            g.write(line)
    return dst


async def drive(url: str, queries: List[str], n: int, concurrency: int) -> Dict[str, float]:
    """`n` /search requests from `concurrency` concurrent clients; QPS and latency percentiles."""
    latencies: List[float] = []
    todo = iter(range(min(n, 4 * concurrency)))  # warm-up: connections, pages, allocator

    async def worker(session: aiohttp.ClientSession) -> None:
        for i in todo:
            start = time.perf_counter()
            async with session.post(url + "/search", json={"query": queries[i % len(queries)], "top_n": 5}) as r:
                body = await r.json()
                assert r.status == 200 and len(body) == 5, body
            latencies.append(time.perf_counter() - start)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        latencies.clear()
        todo = iter(range(n))
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    ms = np.array(latencies) * 1000
    return {"qps": n / wall, "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def rollout_stream(world: str, args: argparse.Namespace) -> List[List[str]]:
    """The query lists of the episodes of a rollout, in the order their groups start."""
    titles = corpus_titles(os.path.join(world, "corpus.jsonl"))
    every = sorted(set(titles.values()))
    tasks = read_tasks(os.path.join(world, "train.jsonl"))[: args.stream_questions]
    rng = random.Random(0)
    episodes = []
    for _ in range(args.epochs):
        for task in rng.sample(tasks, len(tasks)):
            plan = [titles[pid] for pid in task.metadata["supporting_ids"]]
            for _ in range(args.group_size):
                episodes.append([rng.choice(every) if rng.random() < args.mistake_rate else t for t in plan])
    return episodes


async def drive_episodes(url: str, episodes: List[List[str]], concurrency: int) -> Dict[str, float]:
    """`concurrency` episodes in flight, each sending its searches one after another."""
    latencies: List[float] = []
    todo = iter(episodes)

    async def worker(session: aiohttp.ClientSession) -> None:
        for queries in todo:
            for q in queries:
                start = time.perf_counter()
                async with session.post(url + "/search", json={"query": q, "top_n": 5}) as r:
                    assert r.status == 200, await r.text()
                    await r.read()
                latencies.append(time.perf_counter() - start)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    ms = np.array(latencies) * 1000
    return {
        "queries": len(latencies),
        "qps": len(latencies) / wall,
        "mean_ms": float(ms.mean()),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


def bench_cache(kind: str, index_dir: str, episodes: List[List[str]], args: argparse.Namespace) -> List[dict]:
    """The same stream through the service with the cache off and on, at each concurrency."""
    rows = []
    for c in args.concurrency:
        for size in (0, args.cache_size):  # a fresh server per cell: every cell starts cold
            overrides = [f"retriever.cache_size={size}", f"retriever.threads={args.threads}"]
            with start_retriever(index_dir, overrides=overrides + [f"retriever.encoder.dtype={args.dtype}"]) as server:
                cell = asyncio.run(drive_episodes(server.url, episodes, c))
                health = server.health()
            cache = health["cache"] or {"hit_rate": 0.0}
            rows.append({"kind": kind, "concurrency": c, "cache_size": size, **cell, "hit_rate": cache["hit_rate"]})
            rows[-1]["searched"] = health["queries"]
            print(f"{kind} cache={size} c={c}: {cell['qps']:.1f} q/s, hit rate {cache['hit_rate']:.3f}", flush=True)
    return rows


def bench_replay(kind: str, index_dir: str, stream: List[List[str]], args: argparse.Namespace) -> dict:
    from areal_mem.retriever.client import RetrieverClient
    from areal_mem.rollout.tools.recorder import RecordingBackend
    from areal_mem.rollout.tools.replayer import ReplayBackend

    queries = [q for episode in stream for q in episode]
    tape = os.path.join(tempfile.mkdtemp(prefix="bench-tape-"), "bench.jsonl")

    async def per_search(backend) -> float:
        start = time.perf_counter()
        for q in queries:
            await backend.search(q, 5)
        return (time.perf_counter() - start) / len(queries) * 1000

    async def live_and_recorded(url: str):
        async with RetrieverClient(url) as client, RecordingBackend(RetrieverClient(url), tape) as recorder:
            return await per_search(client), await per_search(recorder)

    with start_retriever(index_dir, overrides=[f"retriever.threads={args.threads}"]) as server:
        live, recorded = asyncio.run(live_and_recorded(server.url))
    replayed = asyncio.run(per_search(ReplayBackend([tape])))
    row = {"kind": kind, "searches": len(queries), "live_ms": live, "recording_ms": recorded, "replay_ms": replayed}
    row["tape_bytes_per_search"] = os.path.getsize(tape) / len(queries)
    print(f"{kind} replay: live {live:.3f} ms, recording {recorded:.3f} ms, replay {replayed:.4f} ms", flush=True)
    return row


def search_cost(index_dir: str, queries: List[str], dtype: str) -> Dict[str, float]:
    """In-process ms per query of `Index.search`, alone and in one batch: the ceiling of the ratio."""
    index = load_index(index_dir, dtype=dtype)
    index.search(queries[:4], 5)
    start = time.perf_counter()
    for q in queries:
        index.search([q], 5)
    alone = (time.perf_counter() - start) / len(queries) * 1000
    start = time.perf_counter()
    index.search(queries, 5)
    batched = (time.perf_counter() - start) / len(queries) * 1000
    return {"alone_ms": alone, "batched_ms": batched}


def main() -> None:
    args = parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="bench-retriever-")
    os.makedirs(work, exist_ok=True)
    set_threads(args.threads)

    world = os.path.join(work, f"world{args.passages}")
    if not os.path.exists(os.path.join(world, "manifest.json")):
        build_world(world, seed=0, passages=args.passages, questions=2000)
    corpus = os.path.join(world, "corpus.jsonl")
    queries = []
    for split in ("dev", "test", "train"):
        with open(os.path.join(world, f"{split}.jsonl")) as f:
            queries += [json.loads(line)["question"] for line in f]

    builds, serving, compute, cached = [], [], [], []
    replays: List[dict] = []
    stream = rollout_stream(world, args) if args.cache_size or args.replay else []
    cfg = RetrieverConfig()
    cfg.encoder.dtype = Dtype(args.dtype)
    for kind in args.kinds:
        src = corpus if kind == "bm25" else head(corpus, os.path.join(work, "dense_corpus.jsonl"), args.dense_passages)
        index_dir = os.path.join(
            work, "index_bm25" if kind == "bm25" else f"index_dense{args.dense_passages}_{args.dtype}"
        )
        if args.reuse_indexes and os.path.exists(os.path.join(index_dir, "manifest.json")):
            m = Manifest.load(index_dir)  # its build_seconds were measured when it was built
        else:
            m = build_index(src, index_dir, kind, cfg)
        builds.append(
            {"kind": kind, "passages": m.count, "seconds": m.build_seconds, "passages_per_s": m.count / m.build_seconds}
        )

        if args.cache_size:
            cached += bench_cache(kind, index_dir, stream, args)
        if args.replay:
            replays.append(bench_replay(kind, index_dir, stream, args))
        if args.skip_batching:
            continue
        modes = {"micro-batched": args.max_batch_size, "one-at-a-time": 1}
        servers = {}
        try:
            for mode, batch in modes.items():
                servers[mode] = start_retriever(
                    index_dir,
                    overrides=[
                        f"retriever.max_batch_size={batch}",
                        f"retriever.batch_window_ms={args.window_ms}",
                        f"retriever.threads={args.threads}",
                        f"retriever.encoder.dtype={args.dtype}",
                    ],
                )
            for c in args.concurrency:  # the two modes back to back per level: same machine load
                for mode, server in servers.items():
                    cell = asyncio.run(drive(server.url, queries, args.requests, c))
                    serving.append({"kind": kind, "docs": m.count, "mode": mode, "concurrency": c, **cell})
                    print(f"{kind} {mode} c={c}: {cell['qps']:.1f} q/s", flush=True)
        finally:
            for server in servers.values():
                server.stop()
        compute.append({"kind": kind, "docs": m.count, **search_cost(index_dir, queries[:64], args.dtype)})

    print(f"\nIndex build (one pass over the corpus; threads={args.threads}, dense encoder {args.dtype})\n")
    print("| index | passages | seconds | passages/s |\n| --- | ---: | ---: | ---: |")
    for b in builds:
        print(f"| {b['kind']} | {b['passages']} | {b['seconds']:.1f} | {b['passages_per_s']:.0f} |")
    if cached:
        print_cache_table(cached, stream, args)
    if replays:
        print("\nOne search at a time through the rollout's search backend, top_n=5 (ms per search)\n")
        print("| index | searches | live | live, recording | replayed | live/replayed | tape bytes/search |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in replays:
            print(
                f"| {r['kind']} | {r['searches']} | {r['live_ms']:.3f} | {r['recording_ms']:.3f} | "
                f"{r['replay_ms']:.4f} | {r['live_ms'] / r['replay_ms']:.0f}x | {r['tape_bytes_per_search']:.0f} |"
            )
    if args.skip_batching:
        return write_json(args, builds=builds, cache=cached, replay=replays)
    print(
        f"\nServing /search top_n=5 over HTTP, {args.requests} requests per cell "
        f"(max_batch_size {args.max_batch_size}, window {args.window_ms} ms)\n"
    )
    print("| index | docs | concurrency | mode | QPS | p50 ms | p99 ms | batched/one QPS |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for row in serving:
        base = next(
            r
            for r in serving
            if r["kind"] == row["kind"] and r["concurrency"] == row["concurrency"] and r["mode"] == "one-at-a-time"
        )
        ratio = f"{row['qps'] / base['qps']:.2f}x" if row["mode"] == "micro-batched" else ""
        print(
            f"| {row['kind']} | {row['docs']} | {row['concurrency']} | {row['mode']} | {row['qps']:.1f} | "
            f"{row['p50_ms']:.1f} | {row['p99_ms']:.1f} | {ratio} |"
        )
    print(f"\nIn-process search cost (no HTTP), ms per query: alone vs in one batch of {len(queries[:64])}\n")
    print("| index | docs | alone ms/query | batched ms/query | ratio |\n| --- | ---: | ---: | ---: | ---: |")
    for c in compute:
        print(
            f"| {c['kind']} | {c['docs']} | {c['alone_ms']:.2f} | {c['batched_ms']:.2f} | "
            f"{c['alone_ms'] / c['batched_ms']:.2f}x |"
        )
    write_json(args, builds=builds, serving=serving, compute=compute, cache=cached, replay=replays)


def print_cache_table(rows: List[dict], stream: List[List[str]], args: argparse.Namespace) -> None:
    print(
        f"\nQuery cache (retriever.cache_size {args.cache_size}) on a rollout-shaped stream: "
        f"{args.stream_questions} questions x {args.group_size} episodes x {args.epochs} epochs, "
        f"{sum(map(len, stream))} searches ({len({q for e in stream for q in e})} distinct), "
        f"mistake rate {args.mistake_rate}\n"
    )
    print("| index | concurrency | cache | hit rate | searched | QPS | mean ms | p50 ms | p99 ms | speed-up |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        off = next(
            x for x in rows if (x["kind"], x["concurrency"], x["cache_size"]) == (r["kind"], r["concurrency"], 0)
        )
        print(
            f"| {r['kind']} | {r['concurrency']} | {r['cache_size'] or 'off'} | {r['hit_rate']:.3f} | {r['searched']} | "
            f"{r['qps']:.1f} | {r['mean_ms']:.2f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['qps'] / off['qps']:.2f}x |"
        )


def write_json(args: argparse.Namespace, **results) -> None:
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**results, "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
