"""SFT steps over the same rows, batched two ways, timed side by side in one run.

`learner.sft.batch_rows` draws 8 rows at random, padded to the longest; `learner.sft.batch_tokens`
sorts the epoch's rows by length and cuts them at a padded-token budget (learner/sft_batches.py).
Both train the first `--rows` rows of epoch 0's shuffled order (the same rows, so the same real
tokens), repeats interleaved, medians printed with the ratio to the row-count batches.

    areal-mem data demos --config configs/debug_cpu.yaml run_dir=R --split train --out R/train.jsonl
    .venv/bin/python benchmarks/bench_sft_batches.py --model R/model --data R/train.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from tqdm import tqdm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="HF model dir the rows were tokenised for")
    ap.add_argument("--data", required=True, help="context rows (.jsonl/.arrow), e.g. oracle demonstrations")
    ap.add_argument("--rows", type=int, default=400, help="rows trained per way and repeat")
    ap.add_argument("--batch-rows", type=int, default=8)
    ap.add_argument("--batch-tokens", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from areal_mem.config.learner import LearnerConfig
    from areal_mem.learner.engine import LearnerEngine
    from areal_mem.learner.sft_batches import epoch_order, padded_tokens, row_batches, token_batches
    from areal_mem.learner.sft_data import read_all

    rows = read_all([args.data])
    chosen = epoch_order(len(rows), 0, 0)[: args.rows]
    rows = [rows[i] for i in chosen]
    lengths = [len(r) for r in rows]
    plans = {
        f"{args.batch_rows} rows at random (batch_rows)": row_batches(len(rows), args.batch_rows, 0, 0),
        f"length-sorted, {args.batch_tokens} padded tokens (batch_tokens)": token_batches(
            lengths, args.batch_tokens, 0, 0
        ),
    }
    engine = LearnerEngine(args.model, LearnerConfig(lr=1e-4, micro_batch_tokens=max(8192, args.batch_tokens)))
    times = {name: [] for name in plans}
    for _ in tqdm(range(args.repeats), desc="repeats"):
        for name, plan in plans.items():
            t0 = time.perf_counter()
            for idx in plan:
                engine.sft_step([rows[i] for i in idx])
            times[name].append(time.perf_counter() - t0)

    real = sum(lengths)
    n_params = sum(p.numel() for p in engine.engine.module.parameters())
    print(
        f"\n{len(rows)} rows of {args.data} ({real} tokens, {real / len(rows):.0f} a row), model {n_params / 1e6:.2f} M "
        f"parameters, fp32, {args.threads} torch threads; medians of {args.repeats} interleaved repeats\n"
    )
    print("| SFT batches | steps | real tokens a step | padded / real | seconds | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    base = statistics.median(next(iter(times.values())))
    for name, plan in plans.items():
        t = statistics.median(times[name])
        print(
            f"| {name} | {len(plan)} | {real / len(plan):.0f} | {padded_tokens(plan, lengths) / real:.2f} | {t:.2f} | {t / base:.2f} |"
        )


if __name__ == "__main__":
    main()
