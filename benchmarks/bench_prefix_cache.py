"""The embedded engine's prefix cache on MemSearcher-shaped traffic, on against off in one run.

Each episode turn asks twice on one context, as MemSearcher does: the action (system prompt +
question + memory, `--new-tokens` sampled), then the memory, whose prompt is the action's prompt
and output plus a tool response (`--tool-tokens`). `--episodes` turns run concurrently, sharing
one system prompt. The same requests (same sampling seeds) go to an engine with
`prefix_cache_tokens=0` and to one with the cache, alternating for `--rounds`; the table gives
prefilled tokens, seconds, and the ratios (medians over rounds); the sampled tokens must be the
same. Models: the debug recipe's tiny model (0.66M) and a ~30M Qwen2, both random, built here.

    .venv/bin/python benchmarks/bench_prefix_cache.py [--episodes 16] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import List, Tuple

import torch

from areal_mem.rollout.generator.embedded.engine import Engine, Request
from areal_mem.rollout.generator.embedded.sampling import SamplingSpec

SIZES = {  # name: (hidden, intermediate, layers, heads, kv heads, vocab)
    "debug 0.66M": (128, 384, 2, 4, 2, 2048),
    "qwen2 ~30M": (512, 1408, 8, 8, 2, 8192),
}


def build(size) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, inter, layers, heads, kv, vocab = size
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=4096,
        eos_token_id=2,
    )
    return Qwen2ForCausalLM(cfg).eval()


def generate(engine: Engine, prompts: List[List[int]], new_tokens: int, seed: int) -> List[List[int]]:
    done, event = {}, threading.Event()

    def finish(req):
        done[req.rid] = req
        if len(done) == len(prompts):
            event.set()

    for i, p in enumerate(prompts):
        g = torch.Generator()
        g.manual_seed(seed + i)
        spec = SamplingSpec(max_new_tokens=new_tokens, ignore_eos=True)
        engine.submit(Request(f"{seed}-{i}", p, spec, finish, generator=g))
    assert event.wait(600)
    return [done[f"{seed}-{i}"].output_ids for i in range(len(prompts))]


def turn(engine: Engine, args, vocab: int, seed: int) -> Tuple[List[List[int]], float]:
    """One MemSearcher turn for every episode: actions, then memories on the same contexts."""
    g = torch.Generator().manual_seed(seed)
    system = torch.randint(3, vocab, (args.system_tokens,), generator=g).tolist()
    contexts = [
        system + torch.randint(3, vocab, (args.user_tokens,), generator=g).tolist() for _ in range(args.episodes)
    ]
    tools = [torch.randint(3, vocab, (args.tool_tokens,), generator=g).tolist() for _ in range(args.episodes)]
    t0 = time.perf_counter()
    actions = generate(engine, contexts, args.new_tokens, seed)
    memories = generate(engine, [c + a + t for c, a, t in zip(contexts, actions, tools)], args.new_tokens, seed + 1000)
    return actions + memories, time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=16)
    p.add_argument("--system-tokens", type=int, default=400)
    p.add_argument("--user-tokens", type=int, default=120)
    p.add_argument("--tool-tokens", type=int, default=300)
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name, size in SIZES.items():
        model = build(size)
        engines = {
            "off": Engine(model, [2], 64, 4096).start(),
            "on": Engine(model, [2], 64, 4096, prefix_cache_tokens=1 << 20).start(),
        }
        seconds = {k: [] for k in engines}
        prefilled = {k: [] for k in engines}
        hits = []
        try:
            for r in range(args.rounds):
                outs = {}
                for k, e in engines.items():
                    e.flush_prefix_cache()  # every round starts cold, as after a weight push
                    before = e.stats()
                    outs[k], s = turn(e, args, size[5], seed=100 * r)
                    after = e.stats()
                    seconds[k].append(s)
                    prefilled[k].append(after["prefill_tokens"] - before["prefill_tokens"])
                    if k == "on":
                        hits.append(after["prefix_hit_tokens"] - before["prefix_hit_tokens"])
                same = sum(a == b for a, b in zip(outs["off"], outs["on"]))
                print(f"[{name}] round {r + 1}: {same}/{len(outs['off'])} sequences sampled the same", flush=True)
        finally:
            for e in engines.values():
                e.stop()
        ratio = statistics.median(a / b for a, b in zip(seconds["off"], seconds["on"]))
        rows.append(
            (
                name,
                statistics.median(prefilled["off"]),
                statistics.median(prefilled["on"]),
                statistics.median(hits),
                statistics.median(seconds["off"]),
                statistics.median(seconds["on"]),
                ratio,
            )
        )
    print("\n| model | prefilled tokens, off | prefilled tokens, on | from the cache | s, off | s, on | speed-up |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, p_off, p_on, hit, s_off, s_on, ratio in rows:
        print(f"| {name} | {p_off:,.0f} | {p_on:,.0f} | {hit:,.0f} | {s_off:.2f} | {s_on:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
