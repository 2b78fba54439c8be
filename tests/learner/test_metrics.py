"""Batch metrics from groups: rewards, workflow info, staleness and advantage stats by hand."""

import pytest

from areal_mem.learner.metrics import MetricsLogger, batch_stats, staleness
from areal_mem.trajectory import Context, Group, Trajectory


def _traj(tid, reward, versions, info):
    n = len(versions)
    ctx = Context([1, 2] + [3] * n, 2, [1 if v >= 0 else 0 for v in versions], [0.0] * n, versions)
    return Trajectory(tid, [ctx], reward=reward, info=info)


def test_batch_stats_by_hand(tmp_path):
    g1 = Group(
        "a",
        [
            _traj("a/0", 1.0, [3, 3, -1], {"em": 1.0, "f1": 1.0, "format_error": "", "num_turns": 2}),
            _traj("a/1", 0.0, [4], {"em": 0.0, "f1": 0.5, "format_error": "no boxed", "num_turns": 1}),
        ],
    )
    g2 = Group("b", [_traj("b/0", 0.5, [5, 5], {}), _traj("b/1", 0.5, [5], {})])
    s = batch_stats([g1, g2], version=5)
    assert s["reward"] == pytest.approx(0.5)
    assert s["em"] == pytest.approx(0.5) and s["f1"] == pytest.approx(0.75)
    assert s["format_rate"] == pytest.approx(0.5)
    assert s["turns"] == pytest.approx((2 + 1 + 1 + 1) / 4)
    assert s["zero_adv_groups"] == 1.0
    assert staleness([g1, g2], 5) == [2, 2, 1, 0, 0, 0]
    assert s["staleness_mean"] == pytest.approx(5 / 6) and s["staleness_max"] == 2.0
    assert s["adv_abs_max"] == pytest.approx(0.7071061, abs=1e-5)  # 0.5 / (std 0.7071 + 1e-6)
    log = MetricsLogger(str(tmp_path))
    log.log(1, s, {"token_staleness": staleness([g1, g2], 5)})
    log.close()
    assert any(f.name.startswith("events.out.tfevents") for f in (tmp_path / "tensorboard").iterdir())
