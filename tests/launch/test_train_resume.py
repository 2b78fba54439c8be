"""`areal-mem train` resumed: the stage times of the earlier invocation stay in the summary."""

import json
import os
import time

import pytest

from areal_mem.app.train import TrainPipeline
from areal_mem.config import load_run
from benchmarks.harness.arms import DEFAULT_CONFIG


def test_a_resumed_pipeline_keeps_the_stage_times_it_skips(tmp_path):
    cfg = load_run([DEFAULT_CONFIG], [f"run_dir={tmp_path}"])
    first = TrainPipeline(cfg)
    first.record_time("sft", time.time() - 90.0)
    assert "resumed" not in first.results
    again = TrainPipeline(cfg)  # a second invocation on the same run dir
    assert again.results["resumed"] is True
    assert again.results["stage_s"]["sft"] == pytest.approx(90.0, abs=0.5)
    again.record_time("eval-final", time.time() - 20.0)
    again.record_time("sft", time.time() - 10.0)  # a stage that ran again adds its time
    stages = TrainPipeline(cfg).results["stage_s"]
    assert set(stages) == {"sft", "eval-final"} and stages["sft"] == pytest.approx(100.0, abs=1.0)
    assert os.path.exists(tmp_path / "stage_s.json")


def test_a_stage_that_fails_keeps_its_time_apart_for_the_resumed_run(tmp_path):
    """The time a failed invocation spent in a stage is part of what the run took: kept as
    `<stage>_failed`, so a resumed run's wall time (the sum of its stage times) does not lose it
    while the stage's own entry stays the attempt that finished."""
    from benchmarks.harness.seeds import read_summary

    cfg = load_run([DEFAULT_CONFIG], [f"run_dir={tmp_path}"])
    first = TrainPipeline(cfg)
    with pytest.raises(SystemExit, match="stage sft failed"):
        first._run("sft", ["no-such-command"])
    with pytest.raises(KeyError):
        with first.timed("demos"):  # an in-process stage that raises
            raise KeyError("x")
    stages = TrainPipeline(cfg).results["stage_s"]
    assert set(stages) == {"sft_failed", "demos_failed"} and stages["sft_failed"] > 0
    again = TrainPipeline(cfg)
    again.record_time("sft", time.time() - 30.0)
    stages = TrainPipeline(cfg).results["stage_s"]
    assert stages["sft"] == pytest.approx(30.0, abs=0.5)
    (tmp_path / "train_summary.json").write_text(json.dumps({"stage_s": stages, "resumed": True, "wall_s": 31.0}))
    assert read_summary(str(tmp_path))["wall_s"] == pytest.approx(sum(stages.values()), abs=0.1)
