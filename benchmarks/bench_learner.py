"""Learner-side costs measured side by side in one run: weight pushes and micro-batch packing.

1. Weight push into a real embedded generator (subprocess on 127.0.0.1), pause -> push ->
   continue, for: distributed broadcast in 512 MiB buckets, distributed with one tensor per
   bucket (the per-parameter pattern users complain about), and an HF safetensors checkpoint
   on disk + /update_weights_from_disk. Ratio = time / bucketed-distributed time.
2. One optimiser step on the same rows (contexts of mixed length, as MemSearcher produces):
   micro-batches packed by a token budget vs a fixed row count in arrival order. Ratio =
   time / token-budget time; the padding column is padded tokens / real tokens.
3. Forward + backward of MemSearcher-shaped contexts (a masked tool response between the
   action and the memory: about a fifth of the tokens trained) with the output head computed
   only at the trained positions, against at every position (what a plain HF forward does).
4. Forward + backward of right-padded mixed-length micro-batches with the causal mask only
   (the learner: no real token follows a pad) against the padding mask a plain HF forward
   takes; repeats interleaved, medians; the largest log-prob difference is printed as well.
5. Forward + backward of an output head alone (`--hidden` x `--head-vocab`, the debug recipe's by
   default) at `--head-positions` trained positions, log-probs and entropies both carrying
   gradient as in the recipe's loss: a chunk of positions at a time (learner/head.py, what the
   learner runs) against one logits tensor through autograd; repeats interleaved, medians, and
   the largest differences of the two.

    .venv/bin/python benchmarks/bench_learner.py [--hidden 256 --layers 4 --rows 64 --repeats 3]
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_learner.py --hidden 128 --layers 2 --repeats 5  # the recipe's shapes, one core
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

import torch
from tqdm import tqdm


def build_model(out: str, hidden: int, layers: int) -> str:
    from areal_mem.app.tiny_model import init_model
    from areal_mem.app.world import build_world
    from areal_mem.config.model import TinyModelConfig

    world = os.path.join(out, "world")
    build_world(world, seed=0, passages=300, questions=100)
    model = os.path.join(out, "model")
    init_model(
        world,
        model,
        TinyModelConfig(
            hidden_size=hidden,
            intermediate_size=3 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
        ),
        seed=0,
    )
    return model


def mixed_rows(vocab: int, n: int, seed: int = 0):
    from areal_mem.learner.batch import TrainRow

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        plen, rlen = rng.randint(32, 400), rng.choice([rng.randint(8, 64), rng.randint(200, 500)])
        ids = [rng.randrange(3, vocab) for _ in range(plen + rlen)]
        rows.append(TrainRow(ids, plen, [1] * rlen, [-3.0] * rlen, [0] * rlen, [rng.choice([-1.0, 1.0])] * rlen))
    return rows


def bench_push(engine, url: str, run_dir: str, repeats: int):
    from dataclasses import replace

    from areal_mem.config.learner import PublishConfig
    from areal_mem.learner.publishers import DiskPublisher, DistributedPublisher
    from areal_mem.rollout.generator.client import GeneratorClient

    plain = PublishConfig(bucket_mb=512, heal=False)  # no watcher thread beside the timing
    pubs = {
        "distributed, 512 MiB buckets": DistributedPublisher(engine, GeneratorClient([url]), plain),
        "distributed, one tensor per bucket": DistributedPublisher(
            engine, GeneratorClient([url]), replace(plain, bucket_mb=1e-6)
        ),
        "disk (safetensors + /update_weights_from_disk)": DiskPublisher(
            engine, GeneratorClient([url]), os.path.join(run_dir, "weights"), replace(plain, keep_weights=1)
        ),
    }
    times, version = {}, 0
    for name, pub in pubs.items():
        pub.setup()
        best = float("inf")
        for _ in tqdm(range(repeats), desc=name, leave=False):
            version += 1
            best = min(best, pub.publish(version).seconds)
        times[name] = best
        pub.close()
    return times


def bench_packing(engine, rows, repeats: int, budget: int, fixed_rows: int):
    from areal_mem.learner.loss import ppo_token_loss
    from areal_mem.learner.packing import pack_by_tokens

    def loss_fn(b, logp, ent, e):
        m = b["loss_mask"].to(logp.device)
        return ppo_token_loss(logp, logp.detach(), b["behav_logp"], b["advantages"], m, engine.cfg.loss)

    plans = {
        f"token budget ({budget} padded tokens)": [
            [rows[i] for i in b] for b in pack_by_tokens([len(r) for r in rows], budget)
        ],
        f"fixed {fixed_rows} rows per micro-batch": [rows[i : i + fixed_rows] for i in range(0, len(rows), fixed_rows)],
    }
    real = sum(len(r) for r in rows)
    out = {}
    for name, micro in plans.items():
        padded = sum(len(mb) * max(len(r) for r in mb) for mb in micro)
        best = float("inf")
        for _ in tqdm(range(repeats), desc=name, leave=False):
            t0 = time.perf_counter()
            engine._optimizer_step(micro, loss_fn, [{}] * len(micro))
            best = min(best, time.perf_counter() - t0)
        out[name] = (best, padded / real, len(micro))
    return out


def memsearcher_rows(vocab: int, n: int, seed: int = 0):
    """Contexts shaped like MemSearcher's: prompt, action (trained), tool response (masked), memory (trained)."""
    from areal_mem.learner.batch import TrainRow

    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        plen, action, tool, memory = rng.randint(80, 300), rng.randint(20, 60), rng.randint(150, 400), 30
        mask = [1] * action + [0] * tool + [1] * memory
        ids = [rng.randrange(3, vocab) for _ in range(plen + len(mask))]
        rows.append(TrainRow(ids, plen, mask, [-3.0] * len(mask), [0] * len(mask), [1.0] * len(mask)))
    return rows


def bench_head(engine, rows, repeats: int):
    from areal_mem.learner.batch import collate

    b = collate(rows)
    keeps = {
        "head at trained positions (the learner)": b["loss_mask"] > 0,
        "head at every position (plain forward)": b["attention_mask"][:, 1:] > 0,
    }
    out = {}
    for name, keep in keeps.items():
        best = float("inf")
        for _ in tqdm(range(repeats), desc=name, leave=False):
            t0 = time.perf_counter()
            logp, _ = engine._forward(b, keep=keep)
            (logp * b["loss_mask"]).sum().backward()
            best = min(best, time.perf_counter() - t0)
        engine.engine.zero_grad()
        out[name] = (best, int(keep.sum()))
    return out


def bench_head_chunks(hidden_size: int, vocab: int, positions: int, repeats: int):
    """(median seconds by way, largest log-prob and d-hidden differences) of a fresh linear head."""
    import statistics

    from areal_mem.learner import head
    from areal_mem.learner.loss import token_logp_entropy

    torch.manual_seed(0)
    lm_head = torch.nn.Linear(hidden_size, vocab, bias=False)
    head.install(lm_head)
    hidden = torch.randn(positions, hidden_size)
    labels = torch.randint(0, vocab, (positions,))
    adv = torch.randn(positions)
    ways = {
        "a chunk of positions at a time (the learner)": lambda h: lm_head(h, labels),
        "one logits tensor through autograd": lambda h: token_logp_entropy(
            torch.nn.functional.linear(h, lm_head.weight), labels
        ),
    }

    def run(fn):
        lm_head.zero_grad()
        h = hidden.clone().requires_grad_()
        logp, ent = fn(h)
        (-(logp * adv).sum() - 1e-3 * ent.sum()).backward()
        return logp.detach(), h.grad

    times = {name: [] for name in ways}
    for _ in tqdm(range(repeats), desc="output head", leave=False):
        for name, fn in ways.items():
            t0 = time.perf_counter()
            run(fn)
            times[name].append(time.perf_counter() - t0)
    (lp1, g1), (lp2, g2) = (run(fn) for fn in ways.values())
    diffs = float((lp1 - lp2).abs().max()), float((g1 - g2).abs().max())
    return {name: statistics.median(t) for name, t in times.items()}, diffs


def bench_mask(engine, rows, repeats: int, fixed_rows: int):
    import statistics

    from areal_mem.learner.batch import collate

    model = engine.engine.module
    batches = [collate(rows[i : i + fixed_rows]) for i in range(0, len(rows), fixed_rows)]

    def padding_mask(b):
        keep = b["loss_mask"] > 0
        hidden = model.base_model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
        logp, _ = model.get_output_embeddings()(hidden[:, :-1][keep], b["labels"][keep])
        return logp

    ways = {
        "causal mask only (the learner)": lambda b: engine._forward(b)[0][b["loss_mask"] > 0],
        "padding mask (plain forward)": padding_mask,
    }
    times = {name: [] for name in ways}
    for _ in tqdm(range(repeats), desc="padding mask", leave=False):
        for name, fn in ways.items():
            t0 = time.perf_counter()
            for b in batches:
                fn(b).sum().backward()
            times[name].append(time.perf_counter() - t0)
    engine.engine.zero_grad()
    learner, plain = ways.values()
    with torch.no_grad():
        diff = max(float((learner(b) - plain(b)).abs().max()) for b in batches)
    return {name: statistics.median(t) for name, t in times.items()}, diff


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=int, default=4096)
    ap.add_argument("--fixed-rows", type=int, default=8)
    ap.add_argument("--head-rows", type=int, default=16)
    ap.add_argument("--head-positions", type=int, default=3000, help="trained positions of the output head alone")
    ap.add_argument("--head-vocab", type=int, default=6144, help="the output head's vocabulary (the debug recipe's)")
    args = ap.parse_args()

    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.config.learner import LearnerConfig
    from areal_mem.learner.engine import LearnerEngine
    from areal_mem.rollout.generator.launch import start_embedded_generator

    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(tmp, args.hidden, args.layers)
        engine = LearnerEngine(model, LearnerConfig(lr=1e-5, micro_batch_tokens=args.budget))
        n_params = sum(p.numel() for p in engine.engine.module.parameters())
        with start_embedded_generator(model, EmbeddedConfig(max_batch_size=4, weights_dirs=[tmp], device="cpu")) as gen:
            push = bench_push(engine, gen.url, tmp, args.repeats)
        rows = mixed_rows(engine.engine.module.config.vocab_size, args.rows)
        pack = bench_packing(engine, rows, args.repeats, args.budget, args.fixed_rows)
        head = bench_head(
            engine, memsearcher_rows(engine.engine.module.config.vocab_size, args.head_rows), args.repeats
        )
        masks, mask_diff = bench_mask(engine, rows, args.repeats, args.fixed_rows)
    chunks, chunk_diffs = bench_head_chunks(args.hidden, args.head_vocab, args.head_positions, args.repeats)

    print(
        f"\nmodel: {n_params / 1e6:.2f} M parameters (hidden {args.hidden}, {args.layers} layers), "
        f"fp32; best of {args.repeats}; torch threads {torch.get_num_threads()}\n"
    )
    base = push["distributed, 512 MiB buckets"]
    print("| weight push (pause -> push -> continue) | seconds | ratio |\n| --- | --- | --- |")
    for name, t in push.items():
        print(f"| {name} | {t:.3f} | {t / base:.2f} |")
    base = next(iter(pack.values()))[0]
    print(
        f"\n| one optimiser step, {args.rows} mixed-length contexts | micro-batches | padding | "
        f"seconds | ratio |\n| --- | --- | --- | --- | --- |"
    )
    for name, (t, pad, n) in pack.items():
        print(f"| {name} | {n} | {pad:.2f} | {t:.3f} | {t / base:.2f} |")
    base = next(iter(head.values()))[0]
    print(
        f"\n| forward + backward, {args.head_rows} MemSearcher-shaped contexts | head positions | seconds | "
        f"ratio |\n| --- | --- | --- | --- |"
    )
    for name, (t, n) in head.items():
        print(f"| {name} | {n} | {t:.3f} | {t / base:.2f} |")

    print_ratios(
        f"forward + backward, {args.rows} mixed-length contexts in micro-batches of {args.fixed_rows} rows", masks
    )
    print(f"\nlargest log-prob difference between the two: {mask_diff:.2e}")
    print_ratios(
        f"output head alone, forward + backward, {args.head_positions} positions x {args.hidden} x "
        f"{args.head_vocab} words",
        chunks,
    )
    print(f"\nlargest differences between the two: log-prob {chunk_diffs[0]:.2e}, gradient {chunk_diffs[1]:.2e}")


def print_ratios(title: str, seconds: dict) -> None:
    """A table of median seconds by way and their ratio to the first way."""
    base = next(iter(seconds.values()))
    print(f"\n| {title} | seconds (median) | ratio |\n| --- | --- | --- |")
    for name, t in seconds.items():
        print(f"| {name} | {t:.3f} | {t / base:.2f} |")


if __name__ == "__main__":
    main()
