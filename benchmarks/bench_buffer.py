"""Replay buffer throughput against raw Arrow IPC files on local disk, side by side.

Groups of 5 trajectories x 4 contexts x 2,000 tokens (half prompt) go through
the real service (a subprocess on 127.0.0.1, durable puts) with 1 and 8
concurrent writers, and are read back in batches of 8 groups; the same tables
are written to and read from local IPC files with plain pyarrow in the same run.
Raw writes use the same number of threads as the service's writers; raw reads
are timed twice, from the page cache and after evicting the files from it
(posix_fadvise DONTNEED, the files only). The last column is service time /
raw time for the same bytes (target: <= 2).

    .venv/bin/python benchmarks/bench_buffer.py [--groups 256] [--no-fsync]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from typing import Callable, List, Tuple

import numpy as np
import pyarrow as pa
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout: `benchmarks`

from areal_mem.buffer import group_to_table  # noqa: E402
from areal_mem.buffer.server.launch import BufferProcess  # noqa: E402
from benchmarks.harness.synthetic import random_group  # noqa: E402


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def in_threads(items: list, workers: int, fn: Callable[[list], None]) -> None:
    """Split `items` over `workers` threads running `fn(part)`; re-raise the first failure."""
    errors: List[BaseException] = []

    def work(part):
        try:
            fn(part)
        except BaseException as e:  # reported below, the run is void
            errors.append(e)

    threads = [threading.Thread(target=work, args=(items[w::workers],)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} worker(s) failed") from errors[0]


def raw_write(part: List[Tuple[str, pa.Table]], folder: str, fsync: bool) -> None:
    for gid, table in part:
        path = os.path.join(folder, f"{gid}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        if fsync:
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)


def evict(gids: List[str], folder: str) -> None:
    """Drop these (fsynced, clean) files from the page cache so the next read hits the disk."""
    for gid in gids:
        fd = os.open(os.path.join(folder, f"{gid}.arrow"), os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def raw_read(gids: List[str], folder: str, batch: int) -> None:
    for start in range(0, len(gids), batch):
        tables = []
        for gid in gids[start : start + batch]:
            with pa.OSFile(os.path.join(folder, f"{gid}.arrow")) as source:
                tables.append(pa.ipc.open_file(source).read_all())
        pa.concat_tables(tables)


def service_put(buf: BufferProcess, part: List[Tuple[str, pa.Table]]) -> None:
    with buf.client() as client:
        for gid, table in part:
            client.put_table(table, gid)


def service_get(buf: BufferProcess, n: int, batch: int) -> Tuple[float, float]:
    """Seconds spent in get_batch and in ack (a durable ledger record) for `n` groups."""
    get = ack = 0.0
    with buf.client() as client:
        for _ in range(n // batch):
            start = time.perf_counter()
            batch_id = client.get_batch(batch, timeout_s=60).batch_id
            mid = time.perf_counter()
            client.ack(batch_id)
            get, ack = get + mid - start, ack + time.perf_counter() - mid
    return get, ack


def measure(named: List[Tuple[str, pa.Table]], writers: int, rounds: int, batch: int, fsync: bool, tmp: str) -> dict:
    """Seconds of each operation, service and raw alternating round by round so that
    the load of a shared machine hits both sides alike."""
    t = dict.fromkeys(("put", "get", "ack", "raw_write", "raw_read", "raw_read_disk"), 0.0)
    raw_dir = os.path.join(tmp, f"raw{writers}")
    os.makedirs(raw_dir)
    overrides = [
        f"buffer.fsync={str(fsync).lower()}",
        "buffer.max_staleness=1000000",
        f"buffer.max_memory_groups={len(named)}",
    ]
    size = len(named) // rounds
    chunks = [named[i * size : (i + 1) * size] for i in range(rounds)]
    with BufferProcess(os.path.join(tmp, f"svc{writers}"), overrides=overrides) as buf:
        for r, chunk in enumerate(tqdm(chunks, desc=f"{writers} writer(s)")):
            service_first = r % 2 == 1
            for side in ("service", "raw") if service_first else ("raw", "service"):
                if side == "raw":
                    t["raw_write"] += timed(
                        lambda: in_threads(chunk, writers, lambda part: raw_write(part, raw_dir, fsync))
                    )
                else:
                    t["put"] += timed(lambda: in_threads(chunk, writers, lambda part: service_put(buf, part)))
            gids = [gid for gid, _ in chunk]
            for side in ("service", "raw") if service_first else ("raw", "service"):
                if side == "raw":
                    t["raw_read"] += timed(lambda: raw_read(gids, raw_dir, batch))
                else:
                    get, ack = service_get(buf, len(chunk), batch)
                    t["get"], t["ack"] = t["get"] + get, t["ack"] + ack
            evict(gids, raw_dir)
            t["raw_read_disk"] += timed(lambda: raw_read(gids, raw_dir, batch))
    return t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=256, help="groups per measurement")
    parser.add_argument("--rounds", type=int, default=4, help="alternations of service and raw")
    parser.add_argument("--batch", type=int, default=8, help="groups per get")
    parser.add_argument("--no-fsync", action="store_true", help="buffer.fsync=false and raw writes without fsync")
    args = parser.parse_args()
    if args.groups % (args.rounds * args.batch):
        parser.error("--groups must be a multiple of --rounds x --batch")
    fsync = not args.no_fsync
    rng = np.random.default_rng(0)
    named = [
        (f"g{i}", group_to_table(random_group(f"g{i}", rng))) for i in tqdm(range(args.groups), desc="building groups")
    ]
    mb = sum(t.nbytes for _, t in named) / 1e6
    rows = []  # (operation, service seconds, raw seconds)
    with tempfile.TemporaryDirectory() as tmp:
        for writers in (1, 8):
            t = measure(named, writers, args.rounds, args.batch, fsync, tmp)
            rows.append(
                (
                    f"put, {writers} writer{'s' if writers > 1 else ''} (raw: write"
                    f"{'+fsync' if fsync else ''}, {writers} thread{'s' if writers > 1 else ''})",
                    t["put"],
                    t["raw_write"],
                )
            )
            if writers == 1:
                rows.append(("get, 1 reader (raw: read from page cache)", t["get"], t["raw_read"]))
                rows.append(("get, 1 reader (raw: read from disk)", t["get"], t["raw_read_disk"]))
                rows.append(("get + ack (raw: read from page cache)", t["get"] + t["ack"], t["raw_read"]))
    print(
        f"\n{args.groups} groups of 5 x 4 x 2000 tokens, {mb / args.groups:.2f} MB each, "
        f"get batches of {args.batch}, fsync={fsync}, {args.rounds} alternating rounds, "
        f"{os.cpu_count()} CPUs"
    )
    print("| operation | service MB/s | service groups/s | raw IPC MB/s | raw IPC groups/s | service time / raw time |")
    print("| --- | --- | --- | --- | --- | --- |")
    for op, sec, raw in rows:
        print(
            f"| {op} | {mb / sec:.0f} | {args.groups / sec:.0f} | {mb / raw:.0f} | "
            f"{args.groups / raw:.0f} | {sec / raw:.2f}x |"
        )


if __name__ == "__main__":
    main()
