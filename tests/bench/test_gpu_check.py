"""scripts/gpu_check.sh --smoke on CPU: every measurement of the GPU acceptance run at tiny sizes,
so that the script a lent GPU runs once cannot rot. About two minutes (five stages, two of them
whole training runs), so `slow`: run it before a GPU session, `pytest -m slow tests/bench/test_gpu_check.py`."""

import json
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_the_gpu_check_runs_every_measurement_at_tiny_sizes(tmp_path):
    res = subprocess.run(
        ["bash", os.path.join(REPO, "scripts", "gpu_check.sh"), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    with open(tmp_path / "gpu_check.json", encoding="utf-8") as f:
        report = json.load(f)
    assert report["smoke"] is True and report["device"] == "cpu"
    learner = report["learner"]
    assert sorted(learner) == ["tiny-a", "tiny-b"]
    for r in learner.values():
        assert r["step_s"] > 0 and r["tokens_per_s"] == r["tokens_per_step"] / r["step_s"]
        assert abs(r["mfu"] - 6 * r["params"] * r["tokens_per_s"] / 1e11) < 1e-12
    assert learner["tiny-b"]["params"] > learner["tiny-a"]["params"]
    assert sorted(map(int, report["generator_tokens_per_s"])) == [1, 2, 4]
    assert all(v > 0 for v in report["generator_tokens_per_s"].values())
    assert report["push_s"]["shape"] == "tiny-b" and report["push_s"]["disk"] > 0 and report["push_s"]["ipc"] is None
    assert [r["step"] for r in report["end_to_end"]] == [1, 2]  # --smoke: 2 steps
    assert all(0.0 <= r["reward"] <= 1.0 for r in report["end_to_end"])
    real = report["real_model"]  # the real-model run's path, with section 4's tiny model as its source
    assert real["source"] == str(tmp_path / "e2e" / "model") and real["steps"] == 2
    assert sorted(real["em"]) == ["final", "start", "zero_shot"] and all(0 <= v <= 100 for v in real["em"].values())
    assert {"sft", "rl", "eval-zero_shot", "eval-start", "eval-final"} <= set(real["stage_s"])
    headings = ("| shape | parameters |", "| concurrent requests |", "| push of tiny-b |", "| step | reward |")
    for heading in (*headings, "| zero-shot | after SFT | after RL |"):
        assert heading in res.stdout
