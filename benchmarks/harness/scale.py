"""`python -m benchmarks scale`: how the system scales to the production recipe, on paper, from
measured per-component costs.

Measured here (quickly, or given with `--inputs FILE`): the generator's and the learner's
tokens per second on this CPU (from the `async` bench's synchronous arm when it is in the run dir)
and what they are in FLOP/s, faiss Flat inner-product search FLOP/s on this CPU (the production
retriever is a Flat index over wiki-18 in host memory), the replay buffer's put/get MB/s and
bytes per context token of a production-shaped group through the real service. The production
step (configs/memsearcher_qwen2.5_3b.yaml: MemSearcher's released settings) is then costed per service
under the explicit assumptions in `ASSUMPTIONS` (GPU FLOP/s, utilisation, trajectory shape);
the service with the largest time per step is the bottleneck of an asynchronous run, and the
GPU count where the CPU retriever overtakes the GPU services is where scaling out stops paying.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Dict, Optional

from .output import PROG, command_line, markdown_table, read_json, require, write_json

HELP = "scale on paper: per-service time per step of the 3B / 16-GPU recipe from measured costs"

# Production recipe (configs/memsearcher_qwen2.5_3b.yaml) and explicit assumptions.
ASSUMPTIONS: Dict[str, float] = {
    "params": 3.09e9,  # Qwen2.5-3B
    "gpus": 16,  # two 8-GPU nodes, each split as in the 3B recipe: 4 generators + 4 learner ranks
    "generator_gpus": 8,
    "learner_gpus": 8,
    "gpu_bf16_flops": 989e12,  # H100/H800 SXM dense bf16 peak (assumption: the GPU type)
    "learner_mfu": 0.35,  # assumption: ZeRO-3 + gradient checkpointing on 8 GPUs
    "prefill_mfu": 0.40,  # assumption: SGLang prefill of ~2k-token contexts
    "decode_tokens_per_s_per_gpu": 8000.0,  # assumption: SGLang, 3B bf16, ~256 concurrent requests
    "trajectories_per_step": 256 * 5,  # buffer.batch_groups x rollout.group_size
    "turns_per_trajectory": 3.0,  # assumption (max_turns 5; each turn is one context row)
    "context_tokens": 1800.0,  # assumption: prompt+memory <= 695, action ~150, 5 docs ~650, memory ~300
    "generated_tokens_per_context": 450.0,  # assumption: action ~150 + memory ~300
    "searches_per_trajectory": 2.0,  # assumption: turns - 1 (the last turn answers)
    "passages": 21e6,  # wiki-18
    "embedding_dim": 768,  # e5-base-v2
    "retriever_node_cores": 64,  # assumption: one CPU node serves the Flat index (64 GB in host memory)
    "push_bandwidth_gbs": 50.0,  # assumption: NCCL broadcast across nodes (InfiniBand), GB/s
    "learner_flops_per_param_token": 10.0,  # 6 fwd+bwd, +2 recomputed (checkpointing), +2 reference (KL)
}


def measure_faiss(n: int = 50_000, dim: int = 768, queries: int = 256, batch: int = 64) -> Dict[str, float]:
    """Flat inner-product search on this CPU: queries/s and FLOP/s (2 n dim per query)."""
    import faiss
    import numpy as np

    rng = np.random.default_rng(0)
    index = faiss.IndexFlatIP(dim)
    index.add(rng.standard_normal((n, dim), dtype=np.float32))
    q = rng.standard_normal((queries, dim), dtype=np.float32)
    index.search(q[:batch], 5)  # warm-up
    t0 = time.perf_counter()
    for i in range(0, queries, batch):
        index.search(q[i : i + batch], 5)
    qps = queries / (time.perf_counter() - t0)
    return {
        "faiss_qps": qps,
        "faiss_passages": n,
        "cpu_search_flops": qps * 2 * n * dim,
        "cpu_cores": len(os.sched_getaffinity(0)),
    }


def measure_buffer(work: str, groups: int = 8) -> Dict[str, float]:
    """Put and get MB/s of production-shaped groups through the real buffer service."""
    import numpy as np

    from areal_mem.buffer import group_to_table
    from areal_mem.buffer.server.launch import BufferProcess

    from .synthetic import random_group

    a = ASSUMPTIONS
    rng = np.random.default_rng(0)
    tokens, resp = int(a["context_tokens"]), int(a["generated_tokens_per_context"])

    turns = int(a["turns_per_trajectory"])
    tables = [group_to_table(random_group(f"g{i}", rng, 5, turns, tokens, resp)) for i in range(groups)]
    nbytes = sum(t.nbytes for t in tables)
    ctx_tokens = groups * 5 * int(a["turns_per_trajectory"]) * tokens
    service = BufferProcess(work)
    try:
        client = service.client()
        t0 = time.perf_counter()
        for i, table in enumerate(tables):
            client.put_table(table, f"g{i}")
        put_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        batch = client.get_batch(groups, timeout_s=60)
        get_s = time.perf_counter() - t0
        client.ack(batch.batch_id)
        client.close()
    finally:
        service.stop()
    return {
        "buffer_put_mbs": nbytes / put_s / 1e6,
        "buffer_get_mbs": nbytes / get_s / 1e6,
        "buffer_bytes_per_token": nbytes / ctx_tokens,
    }


def from_async_arm(run_dir: str) -> Dict[str, float]:
    """Generator and learner tokens/s of the synchronous arm of the `async` bench, if it ran here."""
    result = read_json(run_dir, "async")
    if not result:
        return {}
    base = result["rows"][0]
    out = {"learner_context_tokens_per_s": base["context_tokens_per_step"] / base["t_train_s"]}
    if base.get("gen_tokens_per_busy_s"):
        out["generator_tokens_per_s"] = base["gen_tokens_per_busy_s"]
    return out


@dataclass
class ScaleModel:
    """The production step costed per service (`scale.json`'s `model`)."""

    work: Dict[str, float]  # per step: contexts, tokens, searches, FLOPs
    seconds: Dict[str, float]  # per service, per step
    bottleneck: str  # the service with the most seconds
    async_step_s: float  # every service overlapped: the slowest
    sync_step_s: float  # roll out, then train, then push
    retriever_nodes_to_keep_up: float
    # both GPU services shrink as 1/GPUs, the CPU retriever (one node) does not: beyond this many
    # GPUs (same split) the retriever is the bottleneck
    retriever_bound_at_gpus: Optional[float]


def model(measured: Dict[str, float], a: Dict[str, float] = ASSUMPTIONS) -> ScaleModel:
    """Seconds per training step per service for the production recipe, and the bottleneck."""
    contexts = a["trajectories_per_step"] * a["turns_per_trajectory"]
    ctx_tokens = contexts * a["context_tokens"]
    gen_tokens = contexts * a["generated_tokens_per_context"]
    searches = a["trajectories_per_step"] * a["searches_per_trajectory"]
    n = a["params"]
    learner_flops = a["learner_flops_per_param_token"] * n * ctx_tokens
    prefill_flops = 2 * n * ctx_tokens
    search_flops = searches * 2 * a["passages"] * a["embedding_dim"]
    node_search_flops = measured["cpu_search_flops"] / measured["cpu_cores"] * a["retriever_node_cores"]
    gpu = a["gpu_bf16_flops"]
    services = {
        "generators (SGLang)": (
            gen_tokens / (a["generator_gpus"] * a["decode_tokens_per_s_per_gpu"])
            + prefill_flops / (a["generator_gpus"] * gpu * a["prefill_mfu"])
        ),
        "learner (DeepSpeed)": learner_flops / (a["learner_gpus"] * gpu * a["learner_mfu"]),
        "retriever (Flat, CPU)": search_flops / node_search_flops,
        "replay buffer (put + get)": ctx_tokens
        * measured["buffer_bytes_per_token"]
        / 1e6
        * (1 / measured["buffer_put_mbs"] + 1 / measured["buffer_get_mbs"]),
        "weight push (bf16)": 2 * n / (a["push_bandwidth_gbs"] * 1e9),
    }
    gpu_bound = max(services["generators (SGLang)"], services["learner (DeepSpeed)"])
    retr = services["retriever (Flat, CPU)"]
    bottleneck = max(services, key=services.get)
    # Rollouts overlap generation and search across episodes; synchronous training then waits
    # for the learner and the push, asynchronous training overlaps all of it.
    rollout = max(services["generators (SGLang)"], retr, services["replay buffer (put + get)"])
    return ScaleModel(
        work={
            "contexts": contexts,
            "context_tokens": ctx_tokens,
            "generated_tokens": gen_tokens,
            "searches": searches,
            "learner_flops": learner_flops,
            "prefill_flops": prefill_flops,
            "search_flops": search_flops,
            "retriever_node_flops": node_search_flops,
        },
        seconds=services,
        bottleneck=bottleneck,
        async_step_s=max(services.values()),
        sync_step_s=rollout + services["learner (DeepSpeed)"] + services["weight push (bf16)"],
        retriever_nodes_to_keep_up=retr / gpu_bound,
        retriever_bound_at_gpus=a["gpus"] * gpu_bound / retr if retr else None,
    )


def render(result: dict) -> str:
    m, a, r = result["measured"], result["assumptions"], result["model"]
    measured_rows = [[k, v] for k, v in m.items()]
    lines = [
        "Measured on this machine:",
        "",
        markdown_table(["input", "value"], measured_rows),
        "",
        "Production step (Qwen2.5-3B, 16 GPUs: 8 generator + 8 learner, 256 x 5 trajectories):",
        "",
        markdown_table(
            ["service", "seconds per step", "share of the slowest"],
            [[k, v, f"{v / r['async_step_s']:.2f}"] for k, v in r["seconds"].items()],
        ),
        "",
        f"bottleneck: **{r['bottleneck']}**; asynchronous step ~{r['async_step_s']:.0f} s, synchronous "
        f"(roll out, then train, then push) ~{r['sync_step_s']:.0f} s "
        f"({r['sync_step_s'] / r['async_step_s']:.2f}x).",
    ]
    if r.get("retriever_bound_at_gpus"):
        lines.append(
            f"The CPU Flat retriever ({a['retriever_node_cores']:.0f} cores) becomes the bottleneck "
            f"beyond ~{r['retriever_bound_at_gpus']:.0f} GPUs at the same split; keeping up with the "
            f"GPU services takes ~{r['retriever_nodes_to_keep_up']:.1f} such nodes (index replicas) "
            f"or a GPU index."
        )
    lines += ["", "Assumptions:", "", markdown_table(["assumption", "value"], [[k, v] for k, v in a.items()])]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", default="runs/bench", help="where the table goes (and bench async's result)")
    parser.add_argument(
        "--inputs",
        default="",
        metavar="FILE",
        help="JSON of measured inputs to use instead of measuring (keys as in scale.json)",
    )


def run(args: argparse.Namespace) -> int:
    if args.inputs:
        with open(args.inputs, encoding="utf-8") as f:
            measured = json.load(f)
    else:
        require(["faiss"], f"{PROG} scale")  # or --inputs
        work = os.path.join(args.run_dir, "scale")
        os.makedirs(work, exist_ok=True)
        measured = {**from_async_arm(args.run_dir), **measure_faiss(), **measure_buffer(work)}
    result = {
        "measured": measured,
        "assumptions": dict(ASSUMPTIONS),
        "model": asdict(model(measured)),
        "command": command_line(),
    }
    write_json(args.run_dir, "scale", result)
    print("\n" + render(result), flush=True)
    return 0
