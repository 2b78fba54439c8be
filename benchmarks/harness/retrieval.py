"""`python -m benchmarks retrieval`: retrieval at wiki-18 scale, by simulation on this machine.

Search-R1's wiki-18 index holds 21M e5-base-v2 vectors (768-d, ~64 GB as Flat). Encoding a corpus
that size takes GPU-hours, so this benchmark stores random unit vectors of the same dimension at
`--rows` (default 1M and 4M) and serves each index type users meet (Flat, as `e5_Flat.index`;
HNSW64, as Search-R1's HNSW variant; IVF-PQ) through the real retrieval service
(`benchmarks/harness/vector_service.py`: every part after the encoder is the product's). Per
(rows, type) it measures over HTTP `/search`, `--concurrency` clients at a time: queries/s,
p50/p99 latency, recall@10 of the service's answers against Flat's (the exact answer), the
server's resident memory and the build time and file size. A sweep then measures, in process,
recall@10 and batch queries/s at other `hnsw_ef_search` / `ivf_nprobe` settings.

Two query kinds, half each: `uniform` (random unit vectors: every neighbour is a near-tie, the
hardest case for an approximate index) and `planted` (a stored vector mixed with noise to cosine
`--planted-cos`, as a question with one clearly relevant passage). Random vectors have no
cluster structure, so IVF and HNSW recall here is a floor for what real e5 vectors get.

Indexes are kept in `--work-dir` and reused by later runs with the same settings (`--rebuild`
to build anew): a 4M Flat file is 12.3 GB, HNSW64 at 4M about 14 GB and an hour to build on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import sys
import time
import urllib.request
from typing import Dict, Iterator, List, Sequence, Tuple

import numpy as np

from .output import command_line, markdown_table, write_report

HELP = "retrieval at wiki-18 scale by simulation: Flat / HNSW64 / IVF-PQ over random 768-d vectors, served"
NEEDS = ("faiss",)
CHUNK = 100_000  # vectors generated (and added) per step; row r is row r % CHUNK of chunk r // CHUNK
# the server runs as a script (`python -P path`): it imports only the installed areal_mem
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vector_service.py")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", default="1000000,4000000", help="comma-separated index sizes")
    parser.add_argument("--types", default="flat,ivfpq,hnsw", help="comma-separated: flat, hnsw, ivfpq")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--queries", type=int, default=1024, help="queries per cell (half uniform, half planted)")
    parser.add_argument("--concurrency", default="64,256", help="comma-separated client counts")
    parser.add_argument("--top-n", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3, help="passes over the queries per cell (medians)")
    parser.add_argument("--planted-cos", type=float, default=0.7, help="cosine of a planted query to its row")
    parser.add_argument("--hnsw-m", type=int, default=64)
    parser.add_argument("--ef-search", type=int, default=128, help="retriever.faiss.hnsw_ef_search served")
    parser.add_argument("--nlist", type=int, default=4096, help="retriever.faiss.ivf_nlist")
    parser.add_argument("--nprobe", type=int, default=16, help="retriever.faiss.ivf_nprobe served")
    parser.add_argument("--pq-m", type=int, default=96, help="retriever.faiss.pq_m")
    parser.add_argument("--train-size", type=int, default=160_000, help="IVF-PQ training vectors")
    parser.add_argument("--ef-sweep", default="16,64,128,256,512", help="hnsw_ef_search values of the sweep")
    parser.add_argument("--nprobe-sweep", default="4,16,64,256", help="ivf_nprobe values of the sweep")
    parser.add_argument("--max-batch-size", type=int, default=64, help="retriever.max_batch_size served")
    parser.add_argument("--threads", type=int, default=0, help="torch/faiss threads (0: all cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", default="runs/bench/retrieval", help="corpora and indexes (kept)")
    parser.add_argument("--rebuild", action="store_true", help="build indexes even where kept ones exist")
    parser.add_argument("--run-dir", default="runs/bench", help="where retrieval.json/.md go")
    parser.add_argument("--report-dir", default="", help="also write the report here (e.g. docs/reports)")
    parser.add_argument("--name", default="retrieval", help="report file name")


def ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def chunks(rows: int, dim: int, seed: int) -> Iterator[Tuple[int, np.ndarray]]:
    """The stored vectors, chunk by chunk, the same for every index type of a run."""
    for start in range(0, rows, CHUNK):
        rng = np.random.default_rng([seed, start // CHUNK])
        x = rng.standard_normal((min(CHUNK, rows - start), dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        yield start, x


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make_queries(rows: int, args: argparse.Namespace) -> Dict[str, np.ndarray]:
    """`uniform`: random unit vectors; `planted`: cos * row + sqrt(1 - cos^2) * noise, normalised."""
    rng = np.random.default_rng([args.seed, 10**6])
    half = args.queries // 2
    uniform = unit(rng.standard_normal((args.queries - half, args.dim), dtype=np.float32))
    planted_rows = np.sort(rng.choice(rows, size=half, replace=False))
    noise = unit(rng.standard_normal((half, args.dim), dtype=np.float32))
    base = np.empty((half, args.dim), dtype=np.float32)
    for start, x in chunks(rows, args.dim, args.seed):
        sel = (planted_rows >= start) & (planted_rows < start + len(x))
        base[sel] = x[planted_rows[sel] - start]
    c = args.planted_cos
    return {"uniform": uniform, "planted": unit(c * base + math.sqrt(1 - c * c) * noise), "planted_rows": planted_rows}


def write_corpus(folder: str, rows: int) -> None:
    """One short passage per row (`id` = row) and the offsets file the service reads it by."""
    from areal_mem.retriever.docstore import OFFSETS
    from areal_mem.retriever.importer import CORPUS_FILE, scan_corpus

    path = os.path.join(folder, CORPUS_FILE)
    if os.path.exists(os.path.join(folder, OFFSETS)):
        return
    os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, rows, CHUNK):
            f.writelines(
                json.dumps({"id": str(r), "contents": f'"Passage {r}"\nrandom vector {r}'}) + "\n"
                for r in range(start, min(rows, start + CHUNK))
            )
    scan_corpus(path, os.path.join(folder, OFFSETS))


def index_settings(kind: str, args: argparse.Namespace) -> dict:
    """What a kept index file must have been built with to be reused."""
    if kind == "hnsw":
        return {"type": kind, "hnsw_m": args.hnsw_m}
    if kind == "ivfpq":
        return {"type": kind, "nlist": args.nlist, "pq_m": args.pq_m, "train_size": args.train_size}
    return {"type": kind}


def build(folder: str, rows: int, kind: str, args: argparse.Namespace) -> dict:
    """The index file through the product's `DenseIndexBuilder`; kept and reused across runs."""
    from areal_mem.config.retriever import FaissConfig, FaissIndexType
    from areal_mem.retriever.dense import FAISS_FILE, DenseIndexBuilder

    out = os.path.join(folder, kind)
    record_path = os.path.join(out, "build.json")
    settings = {**index_settings(kind, args), "rows": rows, "dim": args.dim, "seed": args.seed}
    if not args.rebuild and os.path.exists(record_path):
        with open(record_path, encoding="utf-8") as f:
            record = json.load(f)
        if record["settings"] == settings:
            print(f"  {kind}: kept index ({record['build_s']:.0f} s to build)", flush=True)
            return record
    os.makedirs(out, exist_ok=True)
    cfg = FaissConfig(
        type=FaissIndexType(kind), hnsw_m=args.hnsw_m, ivf_nlist=args.nlist, pq_m=args.pq_m, train_size=args.train_size
    )
    t0 = time.perf_counter()
    builder = DenseIndexBuilder(args.dim, cfg)
    for start, x in chunks(rows, args.dim, args.seed):
        builder.add(x)
        done = start + len(x)
        print(f"  {kind}: {done:,} / {rows:,} vectors added, {time.perf_counter() - t0:.0f} s", flush=True)
    written = builder.write(out)
    del builder
    path = os.path.join(out, FAISS_FILE)
    record = {
        "settings": settings,
        "factory": written["factory"],
        "build_s": time.perf_counter() - t0,
        "file_bytes": os.path.getsize(path),
        "path": path,
    }
    with open(record_path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    return record


def exact_top(folder: str, rows: int, queries: np.ndarray, k: int, args: argparse.Namespace) -> np.ndarray:
    """The exact top-k rows of every query (streamed over the chunks), kept beside the corpus."""
    digest = hashlib.sha256(queries.tobytes()).hexdigest()[:16]  # whatever made them: seed, cosine, count
    path = os.path.join(folder, f"exact_top{k}_{digest}.npy")
    if os.path.exists(path):
        return np.load(path)
    import torch

    from areal_mem.retriever.dense import topk_over_blocks

    blocks = ((start, torch.from_numpy(x)) for start, x in chunks(rows, args.dim, args.seed))
    top, _ = topk_over_blocks(torch.from_numpy(queries), blocks, k)
    np.save(path, top)
    return top


def recall(found: Sequence[Sequence[int]], exact: np.ndarray) -> float:
    """Mean share of the exact top-k found among the (at most k) returned."""
    return float(np.mean([len(set(map(int, f)) & set(e.tolist())) / len(e) for f, e in zip(found, exact)]))


def memory_of(pid: int) -> Dict[str, float]:
    """The server's resident and peak memory, GB (file pages of a memory-mapped index included)."""
    out = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024 / 1e9
    return {"rss_gb": out.get("VmRSS", 0.0), "peak_rss_gb": out.get("VmHWM", 0.0)}


def batcher_counts(url: str) -> Tuple[int, int]:
    """(searches run, queries searched) so far, from the service's /health."""
    with urllib.request.urlopen(url + "/health", timeout=30) as resp:
        health = json.loads(resp.read())
    return int(health["batches"]), int(health["queries"])


async def drive(url: str, texts: List[str], concurrency: int, k: int) -> Tuple[List[float], List[List[int]]]:
    """`concurrency` clients post `/search` one query at a time until every text was asked once."""
    import aiohttp

    latencies: List[float] = [0.0] * len(texts)
    answers: List[List[int]] = [[] for _ in texts]
    todo = iter(range(len(texts)))

    async def client(session: aiohttp.ClientSession) -> None:
        for i in todo:
            t0 = time.perf_counter()
            async with session.post(url + "/search", json={"query": texts[i], "top_n": k}) as resp:
                body = await resp.json()
                if resp.status != 200:
                    raise RuntimeError(f"/search answered {resp.status}: {body}")
            latencies[i] = time.perf_counter() - t0
            answers[i] = [int(d["id"]) for d in body]

    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency), timeout=timeout) as session:
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
    return latencies, answers


def serve_cells(folder: str, kind: str, record: dict, texts: List[str], args: argparse.Namespace) -> dict:
    """Start the service on one index, drive it at every concurrency, read its memory."""
    from areal_mem.process import ChildProcess, ready_file_path, wait_ready

    ready = ready_file_path("retrieval-bench")
    cmd = [sys.executable, "-P", SERVER, "--dir", folder, "--faiss", record["path"]]
    cmd += ["--type", kind, "--ready-file", ready, "--threads", str(args.threads), "--mmap"]
    cmd += ["--ef-search", str(args.ef_search), "--nprobe", str(args.nprobe)]
    cmd += ["--max-batch-size", str(args.max_batch_size)]
    child = ChildProcess(f"{kind} server", cmd, os.path.join(folder, kind, "serve.log"))
    child.start()
    cells = {}
    try:
        t0 = time.perf_counter()
        url = wait_ready(child, ready, 900)
        start_s = time.perf_counter() - t0
        for c in ints(args.concurrency):
            asyncio.run(drive(url, texts[:c], c, args.top_n))  # warm-up: pages in what the searches touch
            runs, before = [], batcher_counts(url)
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                lat, answers = asyncio.run(drive(url, texts, c, args.top_n))
                wall = time.perf_counter() - t0
                runs.append((len(texts) / wall, np.percentile(lat, 50), np.percentile(lat, 99)))
            qps, p50, p99 = (float(np.median(col)) for col in zip(*runs))
            after = batcher_counts(url)
            cells[c] = {
                "qps": qps,  # medians over the repeats
                "p50_ms": 1000 * p50,
                "p99_ms": 1000 * p99,
                "qps_runs": [r[0] for r in runs],
                # queries per search the micro-batcher ran (the service's /health counters)
                "mean_batch": (after[1] - before[1]) / max(1, after[0] - before[0]),
                "answers": answers,  # the last repeat's (the searches are deterministic)
            }
            print(
                f"  {kind} @ {c} clients: {qps:.1f} q/s, p99 {1000 * p99:.0f} ms (medians of {len(runs)})", flush=True
            )
        mem = memory_of(child.pid)
    finally:
        child.stop()
    return {"start_s": start_s, "cells": cells, **mem}


def sweep(
    record: dict, kind: str, queries: np.ndarray, split: int, exact: np.ndarray, args: argparse.Namespace
) -> List[dict]:
    """In process: recall@k and batch queries/s (64 a batch, median of the repeats) at other search-breadth settings."""
    import faiss

    if kind == "flat":
        return []
    index = faiss.read_index(record["path"], faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
    out = []
    values = ints(args.ef_sweep) if kind == "hnsw" else ints(args.nprobe_sweep)
    for v in values:
        if kind == "hnsw":
            index.hnsw.efSearch = v
        else:
            faiss.extract_index_ivf(index).nprobe = v
        index.search(queries[:64], args.top_n)  # warm-up
        rates = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            found = np.concatenate(
                [index.search(queries[i : i + 64], args.top_n)[1] for i in range(0, len(queries), 64)]
            )
            rates.append(len(queries) / (time.perf_counter() - t0))
        qps = float(np.median(rates))
        out.append(
            {
                "setting": ("ef_search" if kind == "hnsw" else "nprobe"),
                "value": v,
                "batch_qps": qps,
                "recall_uniform": recall(found[:split], exact[:split]),
                "recall_planted": recall(found[split:], exact[split:]),
            }
        )
        print(
            f"  {kind} sweep {out[-1]['setting']}={v}: {qps:.0f} q/s, recall {out[-1]['recall_uniform']:.3f} / "
            f"{out[-1]['recall_planted']:.3f}",
            flush=True,
        )
    return out


def run(args: argparse.Namespace) -> int:
    from areal_mem.retriever.encoder import set_threads

    from .vector_service import encode_vector

    set_threads(args.threads)
    results: List[dict] = []
    text = ""
    for rows in ints(args.rows):
        folder = os.path.join(args.work_dir, f"r{rows}_d{args.dim}_s{args.seed}")
        print(f"{rows:,} rows of dimension {args.dim} in {folder}", flush=True)
        write_corpus(folder, rows)
        q = make_queries(rows, args)
        # as the service sees them: a query travels as float16 (`encode_vector`)
        queries = np.concatenate([q["uniform"], q["planted"]]).astype(np.float16).astype(np.float32)
        exact = exact_top(folder, rows, queries, args.top_n, args)
        texts = [encode_vector(v) for v in queries]
        half = len(q["uniform"])
        planted_rows = q["planted_rows"]
        for kind in [t for t in args.types.split(",") if t]:
            record = build(folder, rows, kind, args)
            served = serve_cells(folder, kind, record, texts, args)
            for cell in served["cells"].values():
                found = cell.pop("answers")  # lists: an approximate index may return fewer than top_n
                cell["recall_uniform"] = recall(found[:half], exact[:half])
                cell["recall_planted"] = recall(found[half:], exact[half:])
                cell["planted_row_found"] = float(np.mean([r in f for r, f in zip(planted_rows, found[half:])]))
            results.append(
                {
                    "rows": rows,
                    "type": kind,
                    "factory": record["factory"],
                    "build_s": record["build_s"],
                    "file_gb": record["file_bytes"] / 1e9,
                    **served,
                    "sweep": sweep(record, kind, queries, half, exact, args),
                }
            )
            text = save(results, args)  # after every index: an hour-long build later may still fail
    print("\n" + text, flush=True)
    return 0


def save(results: List[dict], args: argparse.Namespace) -> str:
    data = {
        "command": command_line(),
        "cores": len(os.sched_getaffinity(0)),
        "settings": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "results": results,
    }
    text = markdown(data)
    write_report([args.run_dir, args.report_dir], args.name, data, text)
    return text


def markdown(data: dict) -> str:
    s = data["settings"]
    conc = ints(s["concurrency"])
    head = ["rows", "index", "build s", "file GB", "server RSS GB"]
    for c in conc:
        head += [f"q/s @{c}", f"p50 ms @{c}", f"p99 ms @{c}", f"batch @{c}"]
    head += ["recall@10 uniform", "recall@10 planted", "planted row found"]
    rows = []
    for r in data["results"]:
        row = [f"{r['rows']:,}", r["factory"], r["build_s"], r["file_gb"], r["rss_gb"]]
        for c in conc:
            cell = r["cells"].get(c) or r["cells"].get(str(c))
            row += [cell["qps"], cell["p50_ms"], cell["p99_ms"], cell["mean_batch"]]
        last = r["cells"].get(conc[-1]) or r["cells"].get(str(conc[-1]))
        row += [last["recall_uniform"], last["recall_planted"], last["planted_row_found"]]
        rows.append(row)
    sweep_rows = [
        [
            f"{r['rows']:,}",
            r["factory"],
            f"{p['setting']}={p['value']}",
            p["batch_qps"],
            p["recall_uniform"],
            p["recall_planted"],
        ]
        for r in data["results"]
        for p in r["sweep"]
    ]
    lines = [
        f"Served through the retrieval service (`/search`, top_n {s['top_n']}, max_batch_size "
        f"{s['max_batch_size']}, HNSW ef_search {s['ef_search']}, IVF nprobe {s['nprobe']}), "
        f"{s['queries']} queries a cell (half uniform, half planted at cosine {s['planted_cos']}), "
        f"{data['cores']} cores, vectors memory-mapped, medians of {s['repeats']} passes (batch: queries per "
        f"search the service ran); recall against the exact top {s['top_n']}:",
        "",
        markdown_table(head, rows),
        "",
        "Search breadth against recall, in process (faiss, batches of 64):",
        "",
        markdown_table(["rows", "index", "setting", "batch q/s", "recall@10 uniform", "recall@10 planted"], sweep_rows),
        "",
        f"Reproduce: `{data['command']}`",
    ]
    return "\n".join(lines) + "\n"
