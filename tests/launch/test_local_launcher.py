"""The local launcher runs the whole asynchronous loop as real processes and leaves none behind."""
import json
import os
import subprocess
import sys

import psutil
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_overrides(run_dir):
    return [
        f"run_dir={run_dir}", "world.passages=200", "world.questions=120",
        "model.init.hidden_size=32", "model.init.intermediate_size=64",
        "model.init.num_hidden_layers=1", "model.init.num_attention_heads=2",
        "model.init.num_key_value_heads=1", "model.init.vocab_size=800",
        "rollout.group_size=2", "rollout.max_turns=2", "rollout.max_new_tokens=24",
        "rollout.max_concurrent_groups=4", "buffer.batch_groups=2", "learner.steps=2",
        "learner.checkpoint_interval=100", "learner.sft.warm_start=false",
    ]


def test_debug_recipe_runs_two_steps_and_cleans_up(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "areal_mem.cli", "train", "--config",
           os.path.join(REPO, "configs", "debug_cpu.yaml"), "--no-eval", *tiny_overrides(run_dir)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=420)
    finally:
        if proc.poll() is None:
            proc.kill()
    descendants = [p for p in psutil.process_iter(["cmdline"])
                   if str(run_dir) in " ".join(p.info["cmdline"] or [])]
    assert proc.returncode == 0, out[-5000:]
    assert not descendants, [p.info["cmdline"] for p in descendants]
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as f:
        steps = [row for row in map(json.loads, f) if row["kind"] == "train"]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(s["groups"] == 2 for s in steps)
    assert os.path.exists(run_dir / "final" / "config.json")
    for name in ("retriever", "generator0", "buffer", "learner", "rollout0"):
        assert os.path.exists(run_dir / "logs" / f"{name}.log"), name
