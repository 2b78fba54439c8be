"""The staleness bound holds end to end: tokens trained are at most eta versions old; eta 0 is synchronous."""

import pytest


@pytest.mark.parametrize("eta", [0, 2])
def test_trained_tokens_respect_the_staleness_bound(tiny_train, eta):
    code, out = tiny_train.run(f"buffer.max_staleness={eta}", "learner.steps=6")
    assert code == 0, out[-5000:]
    rows = tiny_train.train_steps()
    assert [r["step"] for r in rows] == list(range(1, 7))
    worst = max(r["staleness_max"] for r in rows)
    assert worst <= eta
    if eta == 0:
        assert all(r["staleness_mean"] == 0 for r in rows)  # synchronous: trained on fresh groups
    else:
        assert worst >= 1  # asynchronous: generation ran ahead of the learner
