"""Embedded generator throughput against sequential `model.generate`, and weight-push times.

Throughput: the tiny debug model (`areal-mem init-model` defaults) answers 32 concurrent
requests (prompts of 48 tokens, 128 sampled tokens each, eos ignored) through the real
server (a subprocess on 127.0.0.1, continuous batching); the same model answers the same
prompts one after another with `model.generate` in this process, in the same run, with the
same number of torch threads (--threads, default 1). Server and sequential runs alternate
for --rounds rounds; the ratio is the median over rounds of server tokens/s over
sequential tokens/s (target >= 4).

Weight push: the learner's side of a distributed push (rank 0 of a gloo group: announce
each bucket with /update_weights_from_distributed, broadcast it, wait for the answer) of
every parameter, in 512 MiB buckets, into a running server; and the disk path (save an HF
safetensors checkpoint + /update_weights_from_disk) for comparison. For the tiny model and
a ~100M-parameter Qwen2 built locally (random weights, no tokenizer needed). Median of 3.

Verified pushes (`learner.publish.verify`): next to each push, what verifying it costs: the
learner's fingerprints (per bucket after its broadcast, as the distributed publisher takes them;
of the model's weights after a disk push), the server's `/weights_checker` answer (its own
fingerprints, HTTP, JSON) and the comparison, which must find them equal; and the ratio to the
push (median of the repeats' ratios).

    .venv/bin/python benchmarks/bench_generator.py [--requests 32] [--new-tokens 128] [--rounds 3]
        [--threads 1] [--skip-100m] [--push-only] [--push-repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Dict, List, Tuple

import torch
from tqdm import tqdm

from areal_mem.config.generator import EmbeddedConfig
from areal_mem.generation import SamplingParams
from areal_mem.net import free_port
from areal_mem.weight_fingerprint import fingerprints
from areal_mem.weight_transport import BucketMeta, WeightGroup, iter_buckets
from rollout.generator.client import GeneratorClient
from rollout.generator.launch import start_embedded_generator

BUCKET_BYTES = 512 << 20


def build_tiny(root: str) -> str:
    from areal_mem.app.tiny_model import init_model
    from areal_mem.app.world import build_world

    build_world(os.path.join(root, "world"), seed=0, passages=600, questions=600)
    return init_model(os.path.join(root, "world"), os.path.join(root, "tiny"), seed=0)


def build_100m(root: str) -> str:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    path = os.path.join(root, "qwen2-100m")
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    return path


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def server_throughput(url: str, prompts: List[List[int]], new_tokens: int) -> float:
    sp = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, ignore_eos=True)

    async def go():
        async with GeneratorClient([url]) as c:
            await c.generate(prompts[0], SamplingParams(max_new_tokens=4))  # warm-up
            t0 = time.perf_counter()
            res = await asyncio.gather(*(c.generate(p, sp) for p in prompts))
            return sum(len(r.output_ids) for r in res) / (time.perf_counter() - t0)

    return asyncio.run(go())


def sequential_throughput(model, prompts: List[List[int]], new_tokens: int) -> float:
    model.generate(torch.tensor([prompts[0]]), max_new_tokens=4, do_sample=True)  # warm-up
    tokens, t0 = 0, time.perf_counter()
    for p in tqdm(prompts, desc="sequential model.generate", leave=False):
        out = model.generate(
            torch.tensor([p]),
            attention_mask=torch.ones(1, len(p), dtype=torch.long),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=0,
        )
        tokens += out.shape[1] - len(p)
    return tokens / (time.perf_counter() - t0)


@dataclass
class PushTimes:
    """Seconds of each repeat."""

    distributed: List[float]
    distributed_verify: List[float]
    disk: List[float]
    disk_verify: List[float]


async def verify_s(c: GeneratorClient, url: str, expected: Dict[str, str], learner_s: float) -> float:
    """What `learner.publish.verify` adds to a push: the learner's fingerprints (`learner_s`, taken
    per bucket), the generator's `/weights_checker` (its fingerprints + HTTP) and the comparison."""
    t0 = time.perf_counter()
    served = (await c.weight_checksums())[url]
    if served != expected:
        raise RuntimeError("the generator's fingerprints differ from the pushed weights")
    return learner_s + time.perf_counter() - t0


def push_times(url: str, model, tmp: str, repeats: int = 3) -> PushTimes:
    named = [(n, p.detach()) for n, p in model.named_parameters()]
    port = free_port()

    async def go():
        async with GeneratorClient([url], timeout_s=1800) as c:
            _, group = await asyncio.gather(
                c.init_weights_update_group("127.0.0.1", port, group_name="bench"),
                asyncio.to_thread(WeightGroup.join, "127.0.0.1", port, 2, 0, "bench", "gloo", 600.0),
            )
            dist_s, dist_v, disk_s, disk_v = [], [], [], []
            for v in range(1, repeats + 1):
                t0 = time.perf_counter()
                expected, learner_s = {}, 0.0
                for bucket in iter_buckets(named, BUCKET_BYTES):
                    meta = BucketMeta.of(bucket)
                    announce = asyncio.create_task(
                        c.update_weights_from_distributed(meta.names, meta.dtypes, meta.shapes, "bench", version=v)
                    )
                    await asyncio.to_thread(group.broadcast_bucket, bucket)
                    t1 = time.perf_counter()  # as the publisher does: each bucket fingerprinted after its broadcast
                    expected.update(fingerprints(bucket))
                    learner_s += time.perf_counter() - t1
                    await announce
                dist_s.append(time.perf_counter() - t0 - learner_s)
                dist_v.append(await verify_s(c, url, expected, learner_s))
                t0 = time.perf_counter()
                path = os.path.join(tmp, f"ckpt-{v}")
                await asyncio.to_thread(model.save_pretrained, path)
                await c.update_weights_from_disk(path, 100 + v)
                disk_s.append(time.perf_counter() - t0)
                t1 = time.perf_counter()
                expected = fingerprints(named)  # the disk publisher fingerprints the learner's weights
                disk_v.append(await verify_s(c, url, expected, time.perf_counter() - t1))
            group.close()
            return PushTimes(dist_s, dist_v, disk_s, disk_v)

    return asyncio.run(go())


def push_rows(label: str, t: PushTimes) -> List[Tuple[str, str]]:
    """Medians of the repeats; a ratio is the median of the repeats' ratios (each repeat's push
    and verify ran back to back, under the same load)."""
    m = statistics.median

    def ratio(verify: List[float], push: List[float]) -> str:
        ratios = [v / p for v, p in zip(verify, push)]
        return f"{m(ratios):.2f} (repeats: {', '.join(f'{r:.2f}' for r in ratios)})"

    return [
        (f"distributed push, {label} (s)", f"{m(t.distributed):.3f}"),
        ("  verify after it: learner + generator fingerprints, /weights_checker (s)", f"{m(t.distributed_verify):.3f}"),
        ("  verify / distributed push", ratio(t.distributed_verify, t.distributed)),
        ("disk push (save + /update_weights_from_disk), same model (s)", f"{m(t.disk):.3f}"),
        ("  verify after it (s)", f"{m(t.disk_verify):.3f}"),
        ("  verify / disk push", ratio(t.disk_verify, t.disk)),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=48)
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="alternate server and sequential runs this often (a shared CPU's load varies)",
    )
    ap.add_argument("--skip-100m", action="store_true", help="only the tiny model's push")
    ap.add_argument("--push-only", action="store_true", help="only the weight pushes (no throughput rounds)")
    ap.add_argument("--push-repeats", type=int, default=3, help="pushes per model (medians)")
    ap.add_argument(
        "--threads", type=int, default=1, help="torch threads on both sides (1 avoids oversubscribing a shared CPU)"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    rows: List[Tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        tiny = build_tiny(tmp)
        model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32).eval()
        g = torch.Generator().manual_seed(0)
        prompts = torch.randint(3, model.config.vocab_size, (args.requests, args.prompt_tokens), generator=g).tolist()
        threads = args.threads
        served, seq = [], []
        with start_embedded_generator(
            tiny, EmbeddedConfig(max_batch_size=args.requests, torch_threads=threads, weights_dirs=[tmp], device="cpu")
        ) as h:
            for _ in tqdm(range(0 if args.push_only else args.rounds), desc="rounds (server, then sequential)"):
                served.append(server_throughput(h.url, prompts, args.new_tokens))
                seq.append(sequential_throughput(model, prompts, args.new_tokens))
            push_tiny = push_times(h.url, model, tmp, args.push_repeats)
        if not args.push_only:
            ratios = [a / b for a, b in zip(served, seq)]
            rows += [
                (
                    f"embedded server, {args.requests} concurrent requests (tokens/s)",
                    f"{statistics.median(served):,.0f}",
                ),
                ("sequential model.generate, same prompts (tokens/s)", f"{statistics.median(seq):,.0f}"),
                (
                    "server / sequential, median of the rounds (target >= 4)",
                    f"{statistics.median(ratios):.1f}x (rounds: {', '.join(f'{r:.1f}' for r in ratios)})",
                ),
            ]
        rows += push_rows(f"tiny model ({n_params(model) / 1e6:.1f}M params)", push_tiny)
        if not args.skip_100m:
            big_path = build_100m(tmp)
            big = AutoModelForCausalLM.from_pretrained(big_path, dtype=torch.float32).eval()
            mb = sum(p.numel() * p.element_size() for p in big.parameters()) / 2**20
            with start_embedded_generator(
                big_path, EmbeddedConfig(torch_threads=threads, weights_dirs=[tmp], device="cpu"), startup_timeout_s=600
            ) as h:
                push_big = push_times(h.url, big, tmp, args.push_repeats)
            rows += push_rows(f"Qwen2 {n_params(big) / 1e6:.0f}M params, {mb:.0f} MiB fp32", push_big)
    print(
        f"\n{args.requests} requests x {args.new_tokens} new tokens, prompts of {args.prompt_tokens} "
        f"tokens, torch threads {threads}\n"
    )
    width = max(len(r[0]) for r in rows)
    print(f"| {'measurement'.ljust(width)} | value |")
    print(f"| {'-' * width} | ----- |")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")


if __name__ == "__main__":
    main()
