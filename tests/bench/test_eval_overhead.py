"""`python -m benchmarks eval`: ratios and medians from given arm measurements (the arms themselves are
the launcher's real runs, exercised in tests/launch/test_eval_during_training.py)."""

from benchmarks.harness.eval_overhead import analyze, render


def _arm(groups_per_s, step_s, curve=()):
    return {
        "summary": {"groups_per_s": groups_per_s, "step_wall_s": step_s, "gen_idle_frac": 0.1},
        "curve": list(curve),
    }


def _point(eval_s, lag_s, pinned=1.0):
    return {"eval_s": eval_s, "lag_s": lag_s, "pinned_fraction": pinned}


def test_throughput_ratios_are_medians_of_each_repeats_own_ratio():
    repeats = [
        {"off": _arm(4.0, 2.0), "own": _arm(3.0, 2.6, [_point(10, 12), _point(12, 14)])},
        {"off": _arm(2.0, 4.0), "own": _arm(1.8, 4.4, [_point(11, 30)])},  # a slow repeat: its own ratio counts
        {"off": _arm(4.0, 2.0), "own": _arm(3.6, 2.2, [_point(9, 10, 0.5), _point(13, 16)])},
    ]
    result = analyze(repeats)
    off, own = result["rows"]
    assert off["throughput_vs_off"] == 1.0 and off["versions_evaluated"] == 0 and off["eval_s"] is None
    assert own["throughput_vs_off_each"] == [0.75, 0.9, 0.9]
    assert own["throughput_vs_off"] == 0.9  # not 2.8 / 3.33: each repeat against the arm beside it
    assert own["groups_per_s"] == 3.0 and own["step_wall_s"] == 2.6
    assert (
        own["versions_evaluated"] == 2 and own["eval_s"] == 11 and own["lag_s"] == 14 and own["pinned_fraction"] == 1.0
    )
    table = render(result)
    assert "| own | 2.6 | 0.90 | 0.75 / 0.90 / 0.90 | 10% | 2 | 11.0 | 14.0 | 1.00 |" in table
