"""Evaluation beside asynchronous training (`eval.interval`), through the real launcher: the learner
hands versions over, the evaluator's own generator loads each one and evaluates it while RL runs."""

import json
import os

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from areal_mem.app.cli import main

EVAL = ["eval.interval=1", "eval.dev_questions=6", "eval.train_questions=3", "eval.max_turns=2", "eval.concurrency=6"]


def test_versions_are_evaluated_beside_training_and_pinned_to_their_weights(tiny_train, tmp_path):
    code, out = tiny_train.run("learner.steps=3", *EVAL)
    assert code == 0, out[-5000:]
    assert not tiny_train.leftover_processes()
    tiny_train.check_finished(steps=3)
    run = tiny_train.run_dir
    curve = [json.loads(line) for line in (run / "eval_during" / "curve.jsonl").read_text().splitlines()]
    versions = [r["version"] for r in curve]
    # the baseline (RL's start) and the last version are never skipped; the ones between may be
    assert versions[0] == 0 and versions[-1] == 3 and versions == sorted(set(versions)), versions
    for r in curve:
        assert r["questions"] == 6 and r["pinned_fraction"] == 1.0 and r["step"] == r["version"]
        records = [json.loads(x) for x in (run / "eval_during" / "results" / f"v{r['version']:06d}.jsonl").open()]
        assert len(records) == 6
        assert all(set(x["token_versions"]) == {str(r["version"])} for x in records)  # every token: that version
        assert r["em"] == round(100 * sum(x["em"] for x in records) / 6, 2)
        assert r["search_rate"] == round(100 * sum(x["tool_calls"] > 0 for x in records) / 6, 2)
        train = [json.loads(x) for x in (run / "eval_during" / "results" / f"train_v{r['version']:06d}.jsonl").open()]
        assert [x["id"] for x in train] == ["train_0", "train_1", "train_2"]  # the training questions' sample
        assert r["train_em"] == round(100 * sum(x["em"] for x in train) / 3, 2)
    # logged by version and wall time: metrics.jsonl and TensorBoard
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    dev = [x for x in rows if x["kind"] == "eval_dev"]
    assert [x["step"] for x in dev] == versions and [x["time"] for x in dev] == [r["time"] for r in curve]
    tb = EventAccumulator(str(run / "tensorboard"))
    tb.Reload()
    assert [e.step for e in tb.Scalars("eval_dev/em")] == versions
    assert [e.step for e in tb.Scalars("eval_train/em")] == versions
    assert [e.wall_time for e in tb.Scalars("eval_dev/em")] == pytest.approx([r["time"] for r in curve])
    # handed-over weights are removed once evaluated; the summary has the curve
    assert not [d for d in os.listdir(run / "eval_during") if d.startswith("v")]
    assert "dev evaluation beside training" in out
    # the last version's weights are the final model's: a separate greedy eval answers the same
    assert (
        main(
            [
                "eval",
                "--config",
                str(run / "train_config.yaml"),
                "--quiet",
                "--data",
                str(run / "world" / "dev.jsonl"),
                "--limit",
                "6",
                f"model.path={run / 'final'}",
                f"eval.out_dir={tmp_path / 'final_eval'}",
                "eval.max_turns=2",
            ]
        )
        == 0
    )
    final = [json.loads(x) for x in (tmp_path / "final_eval" / "results.jsonl").open()]
    beside = [json.loads(x) for x in (run / "eval_during" / "results" / "v000003.jsonl").open()]
    assert [x["final_response"] for x in final] == [x["final_response"] for x in beside]
