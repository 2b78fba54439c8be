"""Run `areal-mem train` on the debug recipe at a tiny size, and check what it leaves behind."""

import json
import os
import subprocess
import sys

import psutil
import pytest

from benchmarks.harness.tiny import TINY_RECIPE

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = [*TINY_RECIPE, "learner.steps=2", "learner.checkpoint_interval=100", "learner.sft.warm_start=false"]


class TinyTrain:
    """`areal-mem train --no-eval` of a recipe in configs/ (default debug_cpu.yaml) at the TINY size in `run_dir`."""

    def __init__(self, run_dir, recipe: str = "debug_cpu.yaml"):
        self.run_dir, self.recipe = run_dir, recipe

    def start(self, *overrides, env=None) -> subprocess.Popen:
        """The train command, running; its output (stdout and stderr) in a pipe; `env` adds to
        this process's environment."""
        cmd = [
            sys.executable,
            "-m",
            "areal_mem.app.cli",
            "train",
            "--config",
            os.path.join(REPO, "configs", self.recipe),
            "--no-eval",
            f"run_dir={self.run_dir}",
            *TINY,
            *overrides,
        ]
        return subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )

    def run(self, *overrides, timeout_s=420, env=None):
        proc = self.start(*overrides, env=env)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
        return proc.returncode, out

    def leftover_processes(self):
        return [
            p.info["cmdline"]
            for p in psutil.process_iter(["cmdline"])
            if str(self.run_dir) in " ".join(p.info["cmdline"] or [])
        ]

    def train_steps(self):
        if not os.path.exists(self.run_dir / "metrics.jsonl"):
            return []  # before the learner's first step
        with open(self.run_dir / "metrics.jsonl", encoding="utf-8") as f:
            return [row for row in map(json.loads, f) if row["kind"] == "train"]

    def check_finished(self, steps=2, groups=2):
        """The learner trained `steps` batches of `groups` groups and exported the final model."""
        rows = self.train_steps()
        assert [r["step"] for r in rows] == list(range(1, steps + 1))
        assert all(r["groups"] == groups for r in rows)
        assert os.path.exists(self.run_dir / "final" / "config.json")
        for name in ("retriever", "generator0", "buffer", "learner", "rollout0"):
            assert os.path.exists(self.run_dir / "logs" / f"{name}.log"), name


@pytest.fixture
def tiny_train(tmp_path):
    return TinyTrain(tmp_path / "run")
