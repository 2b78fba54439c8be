"""SFT batches: by row count as before, or length-sorted under a padded-token budget; resumable."""

import random

import pytest
import torch

from areal_mem.config import ConfigError, load_run
from areal_mem.learner.batch import TrainRow
from areal_mem.learner.sft_batches import epoch_order, padded_tokens, row_batches, token_batches


def _bimodal(n=200, seed=0):
    """Lengths like MemSearcher's contexts: first turns ~190 tokens, memory turns ~470."""
    rng = random.Random(seed)
    return [rng.randint(172, 210) if rng.random() < 0.3 else rng.randint(420, 647) for _ in range(n)]


def test_row_batches_are_slices_of_the_epoch_order():
    order = epoch_order(21, seed=3, epoch=1)
    assert row_batches(21, 8, seed=3, epoch=1) == [order[:8], order[8:16], order[16:]]


def test_token_batches_cover_every_row_once_within_the_budget():
    lengths = _bimodal()
    batches = token_batches(lengths, 3000, seed=0, epoch=0)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(len(b) * max(lengths[i] for i in b) <= 3000 for b in batches)
    # random 8-row batches of the same rows pad to ~1.4x; sorted ones to a few percent
    assert padded_tokens(batches, lengths) / sum(lengths) < 1.05
    rand = row_batches(len(lengths), 8, seed=0, epoch=0)
    assert padded_tokens(rand, lengths) / sum(lengths) > 1.2
    assert padded_tokens([[0, 1], [2]], [3, 5, 7]) == 17
    # short rows share a step with more rows than long ones
    sizes = {len(b) for b in batches}
    assert max(sizes) >= 14 and min(sizes) <= 5


def test_token_batches_are_a_function_of_seed_and_epoch():
    lengths = _bimodal()
    a = token_batches(lengths, 3000, seed=0, epoch=0)
    assert a == token_batches(lengths, 3000, seed=0, epoch=0)
    assert a != token_batches(lengths, 3000, seed=0, epoch=1)
    assert a != token_batches(lengths, 3000, seed=1, epoch=0)
    # the cuts depend only on the sorted lengths: every epoch has as many steps (run_sft counts on it)
    assert {len(token_batches(lengths, 3000, seed=s, epoch=e)) for s in (0, 1) for e in range(4)} == {len(a)}
    # equal lengths: which rows share a batch follows the epoch's shuffle, not the row index
    same = token_batches([100] * 40, 1000, seed=0, epoch=0)
    assert [len(b) for b in same] == [10] * 4
    assert sorted(same[0]) != list(range(10)) or sorted(same[1]) != list(range(10, 20))


def test_a_row_longer_than_the_budget_is_a_batch_of_its_own():
    assert sorted(map(sorted, token_batches([50, 900, 60, 40], 300, seed=0, epoch=0))) == [[0, 2, 3], [1]]
    with pytest.raises(ValueError, match="learner.sft.batch_tokens must be positive"):
        token_batches([10], 0, seed=0, epoch=0)


def test_batch_keys_are_checked():
    with pytest.raises(ConfigError, match="key 'learner.sft.batch_tokens' is -1; allowed: >= 0"):
        load_run(overrides=["model.path=m", "learner.sft.batch_tokens=-1"])
    with pytest.raises(ConfigError, match="key 'learner.sft.batch_rows' is 0; allowed: >= 1"):
        load_run(overrides=["model.path=m", "learner.sft.batch_rows=0"])


def _rows(n=24, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        plen, rlen = rng.randint(4, 12), rng.choice([rng.randint(3, 6), rng.randint(20, 30)])
        ids = [rng.randrange(3, 200) for _ in range(plen + rlen)]
        out.append(TrainRow(ids, plen, [1] * rlen, [0.0] * rlen, [0] * rlen, [0.0] * rlen))
    return out


def _weights(model_dir):
    from safetensors.torch import load_file

    return load_file(f"{model_dir}/model.safetensors")


def test_token_batched_sft_resumes_mid_epoch_to_the_same_weights(tiny_model_dir, tmp_path, monkeypatch):
    """A run stopped after 5 steps of epoch 1 and started again ends bit-identical to one that ran through."""
    from areal_mem.learner.engine import LearnerEngine
    from areal_mem.learner.sft import run_sft

    rows = _rows()
    overrides = [f"model.path={tiny_model_dir}", "learner.sft.epochs=2", "learner.sft.batch_tokens=120"]
    overrides += ["learner.sft.lr=1e-2", "learner.checkpoint_interval=1", "learner.micro_batch_tokens=256"]
    whole = load_run(overrides=overrides + [f"run_dir={tmp_path / 'whole'}"])
    state = run_sft(whole, rows)
    per_epoch = [len(token_batches([len(r) for r in rows], 120, 0, e)) for e in range(2)]
    assert state.step == sum(per_epoch) and min(per_epoch) > 6  # several steps an epoch

    cut = load_run(overrides=overrides + [f"run_dir={tmp_path / 'cut'}"])
    real_step, calls = LearnerEngine.sft_step, []

    def stop_after(engine, batch):
        if len(calls) == per_epoch[0] + 5:
            raise KeyboardInterrupt
        calls.append(len(batch))
        return real_step(engine, batch)

    monkeypatch.setattr(LearnerEngine, "sft_step", stop_after)
    with pytest.raises(KeyboardInterrupt):
        run_sft(cut, rows)
    monkeypatch.setattr(LearnerEngine, "sft_step", real_step)
    resumed = run_sft(cut, rows)
    assert resumed.step == state.step
    a, b = _weights(tmp_path / "whole" / "sft" / "model"), _weights(tmp_path / "cut" / "sft" / "model")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
