"""What a prefill costs beside a running batch, against the same prefill alone, in one run.

A request joins the embedded engine's running batch after its prefill. The batch's KV cache
lives in buffers with spare rows (`rollout/generator/embedded/kv_cache.py`): a joiner no longer than the
batch is written into them, and only a wider one copies every running row. This times
`Engine._prefill` of one joiner (`--joiner` tokens) into running batches of several sizes
(rows x columns, random tokens), alternating with the same prefill into an empty engine, and
prints the median milliseconds of each and their ratio. The engine's own counters say whether
the batch was copied. Model: the debug recipe's shape (0.66M, vocabulary 6,144), random.

    .venv/bin/python benchmarks/bench_engine_join.py [--joiner 150 400] [--repeats 30] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import List

import torch
from bench_prefix_cache import build

from areal_mem.rollout.generator.embedded.engine import Engine, Request
from areal_mem.rollout.generator.embedded.sampling import SamplingSpec

DEBUG_SHAPE = (128, 384, 2, 4, 2, 6144)  # hidden, intermediate, layers, heads, kv heads, vocab
BATCHES = [(14, 800), (30, 800), (30, 1500)]  # running rows x columns (eta 0 / eta 2 of the recipe)


def request(g: torch.Generator, n: int, rid: str) -> Request:
    ids = torch.randint(3, DEBUG_SHAPE[-1], (n,), generator=g).tolist()
    return Request(rid, ids, SamplingSpec(max_new_tokens=1 << 20, ignore_eos=True), lambda r: None)


def prefill_ms(engine: Engine, g: torch.Generator, joiner: int, running: int, repeats: int) -> List[float]:
    """Milliseconds of each of `repeats` prefills of one joiner; the joiner leaves after each."""
    out = []
    for k in range(repeats):
        r = request(g, joiner, f"j{k}")
        t = time.perf_counter()
        engine._prefill([r])
        out.append(1e3 * (time.perf_counter() - t))
        engine._keep_rows(list(range(running)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--joiner", type=int, nargs="+", default=[150, 400], help="joiner prompt lengths")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = build(DEBUG_SHAPE)
    g = torch.Generator().manual_seed(0)
    rows = []
    with torch.no_grad():
        for running, width in BATCHES:
            busy = Engine(model, eos_ids=[], max_batch_size=1024, max_context_len=1 << 20)
            busy._prefill([request(g, width, f"r{i}") for i in range(running)])
            alone = Engine(model, eos_ids=[], max_batch_size=1024, max_context_len=1 << 20)
            for joiner in args.joiner:
                before = busy.join_copies
                a, b = [], []
                for _ in range(3):  # alternate, so drift hits both sides
                    a += prefill_ms(alone, g, joiner, 0, args.repeats // 3)
                    b += prefill_ms(busy, g, joiner, running, args.repeats // 3)
                copied = busy.join_copies - before
                ma, mb = statistics.median(a), statistics.median(b)
                rows.append((f"{running} x {width}", joiner, ma, mb, mb / ma, f"{copied} of {len(b)}"))
    print(f"\nprefill of one joiner, median of {args.repeats} (ms), {args.threads} thread(s)\n")
    print(
        "| running batch (rows x columns) | joiner tokens | alone | beside the batch | ratio | joins that copied the batch |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for batch, joiner, ma, mb, ratio, copied in rows:
        print(f"| {batch} | {joiner} | {ma:.2f} | {mb:.2f} | {ratio:.2f}x | {copied} |")


if __name__ == "__main__":
    main()
