"""`learner.skip_zero_adv_groups` end to end: an untrained model's groups mostly have equal
rewards, so whole batches leave no rows; those steps make no update and the run goes on."""


def test_batches_without_a_signal_are_skipped_and_training_continues(tiny_train):
    code, out = tiny_train.run("learner.skip_zero_adv_groups=true", "learner.steps=3")
    assert code == 0, out[-5000:]
    tiny_train.check_finished(steps=3)
    rows = tiny_train.train_steps()
    for r in rows:  # trained tokens only where some group had unequal rewards
        assert (r["n_tokens"] == 0) == (r["zero_adv_groups"] == r["groups"]), r
    assert any(r["n_tokens"] == 0 for r in rows)
    assert [r["version"] for r in rows] == [1.0, 2.0, 3.0]  # pushed and acked as usual
