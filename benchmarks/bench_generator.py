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

Verified pushes (`learner.publish.verify`): each repeat pushes once plainly and once verified,
as the publishers do: the learner's fingerprints (per bucket while it is broadcast; of the
model's weights after a disk push), the server's `/weights_checker` answer (its fingerprints,
HTTP, JSON) and the comparison, which must find them equal. What verifying adds is the
difference, and the ratio its median over the repeats, relative to the plain push.

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
from areal_mem.rollout.generator.client import GeneratorClient
from areal_mem.rollout.generator.launch import start_embedded_generator
from areal_mem.weight_fingerprint import fingerprints
from areal_mem.weight_transport import BucketMeta, WeightGroup, iter_buckets

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
    """Seconds of each repeat: a plain push and, right after it, a verified one."""

    distributed: List[float]
    distributed_verified: List[float]
    disk: List[float]
    disk_verified: List[float]


async def check(c: GeneratorClient, url: str, expected: Dict[str, str]) -> None:
    """The publisher's check: the server's `/weights_checker` fingerprints equal the pushed ones."""
    if (await c.weight_checksums())[url] != expected:
        raise RuntimeError("the generator's fingerprints differ from the pushed weights")


def push_times(url: str, model, tmp: str, repeats: int = 3) -> PushTimes:
    named = [(n, p.detach()) for n, p in model.named_parameters()]
    port = free_port()

    async def distributed(c: GeneratorClient, group: WeightGroup, v: int, verify: bool) -> float:
        t0 = time.perf_counter()
        expected: Dict[str, str] = {}
        for bucket in iter_buckets(named, BUCKET_BYTES):
            meta = BucketMeta.of(bucket)
            announce = asyncio.create_task(
                c.update_weights_from_distributed(meta.names, meta.dtypes, meta.shapes, "bench", version=v)
            )
            # as the publisher does: the bucket is fingerprinted while it is on the wire
            meanwhile = (lambda b=bucket: expected.update(fingerprints(b))) if verify else None
            await asyncio.to_thread(group.broadcast_bucket, bucket, meanwhile)
            await announce
        if verify:
            await check(c, url, expected)
        return time.perf_counter() - t0

    async def disk(c: GeneratorClient, v: int, verify: bool) -> float:
        t0 = time.perf_counter()
        path = os.path.join(tmp, f"ckpt-{v}")
        await asyncio.to_thread(model.save_pretrained, path)
        await c.update_weights_from_disk(path, v)
        if verify:  # as the disk publisher does: the learner's weights after the export
            await check(c, url, await asyncio.to_thread(fingerprints, named))
        return time.perf_counter() - t0

    async def go():
        async with GeneratorClient([url], timeout_s=1800) as c:
            _, group = await asyncio.gather(
                c.init_weights_update_group("127.0.0.1", port, group_name="bench"),
                asyncio.to_thread(WeightGroup.join, "127.0.0.1", port, 2, 0, "bench", "gloo", 600.0),
            )
            t = PushTimes([], [], [], [])
            for v in range(1, repeats + 1):
                t.distributed.append(await distributed(c, group, 4 * v, False))
                t.distributed_verified.append(await distributed(c, group, 4 * v + 1, True))
                t.disk.append(await disk(c, 4 * v + 2, False))
                t.disk_verified.append(await disk(c, 4 * v + 3, True))
            group.close()
            return t

    return asyncio.run(go())


def push_rows(label: str, t: PushTimes) -> List[Tuple[str, str]]:
    """Medians of the repeats. What verifying costs is each repeat's verified push minus its plain
    one (back to back, under the same load); the ratio is the median of those over the plain push."""
    m = statistics.median

    def cost(verified: List[float], plain: List[float]) -> Tuple[str, str]:
        ratios = [(v - p) / p for v, p in zip(verified, plain)]
        added = m([v - p for v, p in zip(verified, plain)])
        return f"{added:.3f}", f"{m(ratios):.2f} (repeats: {', '.join(f'{r:.2f}' for r in ratios)})"

    dist_added, dist_ratio = cost(t.distributed_verified, t.distributed)
    disk_added, disk_ratio = cost(t.disk_verified, t.disk)
    return [
        (f"distributed push, {label} (s)", f"{m(t.distributed):.3f}"),
        ("  verified: + fingerprints during the broadcast, /weights_checker (s)", f"{m(t.distributed_verified):.3f}"),
        ("  verify adds (s)", dist_added),
        ("  verify adds / push", dist_ratio),
        ("disk push (save + /update_weights_from_disk), same model (s)", f"{m(t.disk):.3f}"),
        ("  verified: + learner's fingerprints, /weights_checker (s)", f"{m(t.disk_verified):.3f}"),
        ("  verify adds (s)", disk_added),
        ("  verify adds / push", disk_ratio),
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
