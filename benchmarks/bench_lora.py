"""`python -m benchmarks lora`: LoRA against full-parameter training on a real model, side by side.

Each arm runs in a fresh process (its own peak memory) against its own embedded generator
(subprocess on 127.0.0.1; started with `generator.lora` for the LoRA arm) and repeats one RL step
`--repeats` times: a rollout of `--samples` sequences of up to `--new-tokens` tokens from the
generator, one decoupled-PPO learner step on them (DeepSpeed ZeRO-2, AdamW), then a push of the
result (full parameters: the distributed publisher's broadcast, the default; LoRA: the adapter
through `/load_lora_adapter`). Pushes are not verified in either arm (`learner.publish.verify=off`)
so that the push column is the transfer alone. Per arm: medians of the learner step, the push
seconds and bytes and the RL step's wall time, and the process's peak resident memory (the
learner's; the generator runs in its own process); ratios are full / LoRA.

    nice -n 10 .venv/bin/python -m benchmarks lora --model /work/models/smollm2 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

HELP = "LoRA vs full parameters on one model: learner step, peak memory, push bytes and seconds, RL step"
PROMPTS = (
    "Who wrote the novel that begins with 'Call me Ishmael'?",
    "Name the capital of the country whose flag has a red maple leaf.",
)
METRICS = ("learner_s", "push_s", "push_bytes", "rl_step_s")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="/work/models/smollm2", help="a transformers folder (SmolLM2-135M-Instruct)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--samples", type=int, default=4, help="sequences per RL step")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="torch threads of the learner and of the generator")
    p.add_argument("--out", default="", help="write the results as JSON here")
    p.add_argument("--arm", choices=("full", "lora"), default=None, help=argparse.SUPPRESS)  # one arm, in its process


def _rollout(url: str, lora: bool, prompts: List[List[int]], samples: int, new_tokens: int):
    from areal_mem.generation import SamplingParams
    from areal_mem.rollout.generator.client import GeneratorClient

    async def go():
        async with GeneratorClient([url], lora_path="policy" if lora else None) as c:
            sp = SamplingParams(max_new_tokens=new_tokens, temperature=1.0)
            jobs = [c.generate(prompts[i % len(prompts)], sp) for i in range(samples)]
            return list(await asyncio.gather(*jobs))

    return asyncio.run(go())


def _rows(prompts, results, version: int):
    from areal_mem.learner.batch import TrainRow

    rows = []
    for i, res in enumerate(results):
        prompt, n = prompts[i % len(prompts)], len(res.output_ids)
        adv = 1.0 if i % 2 else -1.0
        rows.append(
            TrainRow(prompt + res.output_ids, len(prompt), [1] * n, list(res.logprobs), [version] * n, [adv] * n)
        )
    return rows


def run_arm(args: argparse.Namespace) -> Dict:
    """One arm in this process: generator up, engine built, `repeats` RL steps measured."""
    import torch
    from transformers import AutoTokenizer

    from areal_mem.config.generator import EmbeddedConfig, GeneratorLoraConfig
    from areal_mem.config.learner import LearnerConfig, LoraConfig, PublishConfig, VerifyMode
    from areal_mem.learner.engine import LearnerEngine
    from areal_mem.learner.publishers import make_publisher
    from areal_mem.rollout.generator.client import GeneratorClient
    from areal_mem.rollout.generator.launch import start_embedded_generator

    torch.set_num_threads(args.threads)
    lora = args.arm == "lora"
    tok = AutoTokenizer.from_pretrained(args.model)
    texts = [
        tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in PROMPTS
    ]
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    run_dir = tempfile.mkdtemp(prefix=f"bench_lora_{args.arm}_")
    lcfg = LoraConfig(enabled=lora, rank=args.rank, alpha=2.0 * args.rank)
    gen_lora = GeneratorLoraConfig(enabled=True, max_rank=args.rank, target_modules=list(lcfg.target_modules))
    embedded = EmbeddedConfig(max_batch_size=8, torch_threads=args.threads, weights_dirs=[run_dir], device="cpu")
    with start_embedded_generator(args.model, embedded, lora=gen_lora if lora else None) as gen:
        base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cfg = LearnerConfig(lr=1e-5, zero_stage=2, micro_batch_tokens=4096, lora=lcfg)
        engine = LearnerEngine(args.model, cfg)
        client = GeneratorClient([gen.url], lora_path="policy" if lora else None)
        pub = make_publisher(PublishConfig(heal=False, verify=VerifyMode.off), engine, client, run_dir)
        pub.setup()
        steps = []
        for v in range(args.repeats):
            t0 = time.monotonic()
            results = _rollout(gen.url, lora, prompts, args.samples, args.new_tokens)
            t1 = time.monotonic()
            engine.train_step(_rows(prompts, results, v), version=v)
            t2 = time.monotonic()
            res = pub.publish(v + 1)
            t3 = time.monotonic()
            steps.append(
                {
                    "rollout_s": t1 - t0,
                    "learner_s": t2 - t1,
                    "push_s": res.seconds,
                    "push_bytes": res.bytes,
                    "rl_step_s": t3 - t0,
                }
            )
            print(f"[{args.arm}] step {v + 1}: " + ", ".join(f"{k} {x:.3g}" for k, x in steps[-1].items()), flush=True)
        pub.close()
    trainable = sum(p.numel() for p in engine.engine.module.parameters() if p.requires_grad)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "steps": steps,
        "trainable": trainable,
        "peak_rss_mib": peak_kib / 1024,
        "before_engine_mib": base_rss / 1024,
    }


def run(args: argparse.Namespace) -> int:
    if args.arm is not None:  # the child: one arm, its results as the last line
        print("RESULT " + json.dumps(run_arm(args)), flush=True)
        return 0
    out = {}
    for arm in ("full", "lora"):
        cmd = [sys.executable, "-m", "benchmarks", "lora", "--arm", arm, "--model", args.model]
        cmd += ["--repeats", str(args.repeats), "--samples", str(args.samples), "--new-tokens", str(args.new_tokens)]
        cmd += ["--rank", str(args.rank), "--threads", str(args.threads)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode != 0 or not lines:
            print(f"arm {arm} failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}", file=sys.stderr)
            return 1
        out[arm] = json.loads(lines[-1][len("RESULT ") :])
    print(table(out))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return 0


def table(out: Dict) -> str:
    med = {arm: {m: statistics.median(s[m] for s in r["steps"]) for m in METRICS} for arm, r in out.items()}
    for arm, r in out.items():
        med[arm]["peak_rss_mib"] = r["peak_rss_mib"]
        med[arm]["trainable"] = r["trainable"]
    lines = ["| metric | full | LoRA | full / LoRA |", "| --- | --- | --- | --- |"]
    for m in ("trainable", "learner_s", "push_s", "push_bytes", "rl_step_s", "peak_rss_mib"):
        f, lo = med["full"][m], med["lora"][m]
        lines.append(f"| {m} | {f:.4g} | {lo:.4g} | {f / lo if lo else float('inf'):.3g} |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=HELP)
    add_arguments(p)
    return run(p.parse_args())


if __name__ == "__main__":
    sys.exit(main())
