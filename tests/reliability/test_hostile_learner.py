"""The learner's side of a hostile group: whatever a buffer serves, a step either trains to a
finite loss or quarantines the group by name (acked, counted, never served again)."""

from __future__ import annotations

import math

import pytest
import torch

from areal_mem.buffer.client import BufferClient
from areal_mem.buffer.server.service import BufferService
from areal_mem.config import RunConfig
from areal_mem.config.buffer import BufferConfig
from areal_mem.config.learner import CapMode, LossConfig
from areal_mem.learner.batch import BadGroupError, check_group, collate, rows_from_groups
from areal_mem.learner.loss import ppo_token_loss
from areal_mem.learner.trainer import Trainer
from areal_mem.trajectory import Context, Group, Trajectory
from tests.buffer.conftest import unchecked_table

VOCAB = 64


def _group(gid: str, reward=(0.0, 1.0), **ctx) -> Group:
    base = dict(
        input_ids=[1, 2, 3, 4, 5, 6],
        prompt_len=3,
        loss_mask=[1, 1, 0],
        behav_logp=[-0.5, -1.0, 0.0],
        versions=[0, 0, -1],
    )
    return Group(
        gid,
        [
            Trajectory(f"{gid}/{t}", [Context(**{**base, **(ctx if t == 0 else {})})], reward=r, start_version=0)
            for t, r in enumerate(reward)
        ],
    )


# Groups at the edges of what the buffer accepts (tests/buffer/test_hostile.py: what it refuses).
EDGES = {
    "lowest log-prob": _group("e1", behav_logp=[-1000.0, -1000.0, 0.0]),
    "rounded-up log-prob": _group("e2", behav_logp=[1e-3, 1e-3, 0.0]),
    "largest rewards": _group("e3", reward=(1e6, -1e6)),
    "top token id": _group("e4", input_ids=[VOCAB - 1] * 6),
    "one response token": _group("e5", input_ids=[1, 2], prompt_len=1, loss_mask=[1], behav_logp=[-3.0], versions=[0]),
    "versions ahead": _group("e6", versions=[3, 3, -1]),
}
BAD = {
    "nan log-prob": (_group("b1", behav_logp=[float("nan"), -1.0, 0.0]), "field 'behav_logp'"),
    "positive log-prob": (_group("b2", behav_logp=[0.7, -1.0, 0.0]), "field 'behav_logp'"),
    "inf reward": (_group("b3", reward=(float("inf"), 0.0)), "field 'reward'"),
    "prompt_len 0": (
        _group("b4", prompt_len=0, loss_mask=[1] * 6, behav_logp=[-1.0] * 6, versions=[0] * 6),
        "'prompt_len'",
    ),
    "negative id": (_group("b5", input_ids=[1, 2, -5, 4, 5, 6]), "field 'input_ids'"),
    "id past the vocabulary": (_group("b6", input_ids=[1, 2, 3, 4, 5, VOCAB]), "field 'input_ids'"),
}


@pytest.mark.parametrize("name", sorted(EDGES))
@pytest.mark.parametrize("norm_std", [True, False])
@pytest.mark.parametrize("cap_mode", list(CapMode))
def test_every_group_the_buffer_accepts_trains_a_finite_step(tmp_path, name, norm_std, cap_mode):
    group = EDGES[name]
    svc = BufferService(str(tmp_path), BufferConfig(vocab_size=VOCAB, max_running_groups=4, fsync=False))
    client = BufferClient(svc.url)
    try:
        assert client.put_group(group) is True  # the buffer takes it ...
        served = client.get_batch(1, timeout_s=5).groups
    finally:
        client.close()
        svc.shutdown()
    check_group(served[0], VOCAB)  # ... and so does the learner
    b = collate(rows_from_groups(served, norm_std=norm_std))
    torch.manual_seed(0)
    logp = torch.log_softmax(torch.randn(*b["labels"].shape, VOCAB), -1).gather(-1, b["labels"][..., None])[..., 0]
    logp.requires_grad_(True)
    cfg = LossConfig(behav_weight_cap_mode=cap_mode)
    loss, _ = ppo_token_loss(logp, logp.detach(), b["behav_logp"], b["advantages"], b["loss_mask"], cfg)
    total = loss.sum() / b["loss_mask"].sum()
    total.backward()
    assert math.isfinite(total.item()) and torch.isfinite(logp.grad).all()


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_group_the_learner_cannot_train_is_refused_by_name(name):
    group, needle = BAD[name]
    with pytest.raises(BadGroupError, match=needle) as e:
        check_group(group, VOCAB)
    assert repr(group.group_id) in str(e.value)


class _Engine:
    rank = 0


def test_the_trainer_quarantines_a_bad_group_and_never_sees_it_again(tmp_path, monkeypatch, capsys):
    """A buffer that let bad groups through (its check switched off) serves them: the learner's
    batch reader leaves them out by name, acks them with the batch, and counts them."""
    import areal_mem.buffer.server.service as service

    monkeypatch.setattr(service, "validate_group", lambda table, group_id="", **kw: group_id)
    svc = BufferService(str(tmp_path / "buf"), BufferConfig(batch_groups=2, max_running_groups=4, fsync=False))
    client = BufferClient(svc.url)
    try:
        for g in (BAD["nan log-prob"][0], BAD["inf reward"][0], _group("good-a"), _group("good-b")):
            client.put_table(unchecked_table(g), g.group_id)
        trainer = Trainer(RunConfig(run_dir=str(tmp_path / "run")), _Engine(), buffer=client, batch_groups=2)
        groups, batch_id, _, _, quarantined = trainer._next_batch()  # the first batch is all bad
        assert [g.group_id for g in groups] == ["good-a", "good-b"] and quarantined == 2
        out = capsys.readouterr().out
        assert "quarantined group 'b1'" in out and "field 'behav_logp'" in out and "quarantined group 'b3'" in out
        client.ack(batch_id)
        stats = client.stats()
        assert (stats.groups_acked, stats.pending_groups, stats.outstanding_groups) == (4, 0, 0)
    finally:
        client.close()
        svc.shutdown()
