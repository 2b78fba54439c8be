"""`python -m benchmarks seeds`: per-seed and pooled SFT -> RL comparisons, and the exact sign test."""

import json
import math

import pytest

from benchmarks.harness.command import main
from benchmarks.harness.paired import fixed_broken, pooled, sign_test_p


def test_sign_test_matches_the_binomial_tails():
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(8, 2) == pytest.approx(2 * (1 + 10 + 45) / 1024)  # 0.109375
    assert sign_test_p(2, 8) == sign_test_p(8, 2)
    assert sign_test_p(5, 5) == 1.0  # capped: both tails overlap at the middle
    assert sign_test_p(60, 8) == pytest.approx(2 * sum(math.comb(68, i) for i in range(9)) / 2**68)
    assert pooled([(3, 1), (5, 1)]) == (8, 2, pytest.approx(0.109375))


def test_fixed_broken_needs_the_same_questions():
    assert fixed_broken({"a": 0, "b": 1, "c": 1}, {"a": 1, "b": 0, "c": 1}) == (1, 1)
    with pytest.raises(ValueError, match="different questions"):
        fixed_broken({"a": 0}, {"b": 1})


def _seed_run(root, seed, start, final, wall_s):
    run = root / f"s{seed}"
    for tag, ems in (("start", start), ("final", final)):
        (run / "eval" / tag).mkdir(parents=True)
        lines = [json.dumps({"id": f"q{i}", "em": em}) for i, em in enumerate(ems)]
        (run / "eval" / tag / "results.jsonl").write_text("\n".join(lines) + "\n")
    summary = {
        "stage_s": {"sft": 300.0, "rl": 400.0},
        "eval_start": {"em": 100.0 * sum(start) / len(start), "mean_turns": 2.0},
        "eval_final": {"em": 100.0 * sum(final) / len(final), "mean_turns": 1.9},
        "eval_during": [{"version": 0, "em": 25.0, "train_em": 50.0}, {"version": 9, "em": 31.25}],
        "wall_s": wall_s,
    }
    (run / "train_summary.json").write_text(json.dumps(summary))


def test_collect_reports_every_seed_and_pools_them(tmp_path, capsys):
    _seed_run(tmp_path, 0, [0, 0, 1, 1], [1, 1, 1, 0], 600.0)  # fixed 2, broken 1
    _seed_run(tmp_path, 3, [1, 0, 0, 0], [1, 0, 0, 0], 840.0)  # unchanged
    out = tmp_path / "reports"
    argv = ["seeds", "--run-dir", str(tmp_path), "--seeds", "0,3,7", "--collect-only"]
    assert main(argv + ["--report-dir", str(out)]) == 0
    rep = json.loads((out / "seeds_debug_cpu.json").read_text())
    s0, s3 = rep["seeds"]
    assert (s0["seed"], s0["sft_em"], s0["rl_em"], s0["fixed"], s0["broken"]) == (0, 50.0, 75.0, 2, 1)
    assert s0["p"] == 1.0 and s0["dev_em"] == [25.0, 31.25] and s0["train_em"] == [50.0]
    assert (s3["fixed"], s3["broken"], s3["rl_em"]) == (0, 0, 25.0)
    assert rep["pooled"] == {"fixed": 2, "broken": 1, "p": 1.0}
    assert rep["rl_above_sft"] == 1 and rep["mean"] == {"sft_em": 37.5, "rl_em": 50.0}
    assert rep["median_wall_s"] == 720.0
    text = (out / "seeds_debug_cpu.md").read_text()
    assert "| 0 | 50.00% | **75.00%** | +25.00 | 2 / 1 | 1 | 25 / 31 | 300 / 400 | 10.0 |" in text
    assert "RL above SFT on 1 of 2 seeds" in text
    assert "RL above SFT on 1 of 2 seeds" in capsys.readouterr().out


def test_collect_without_finished_seeds_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no finished seed"):
        main(["seeds", "--run-dir", str(tmp_path), "--collect-only"])
