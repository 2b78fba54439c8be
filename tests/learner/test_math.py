"""The learner's math against values computed by hand."""

import math

import pytest
import torch

from areal_mem.config.learner import CapLevel, CapMode, LossConfig
from areal_mem.learner.advantages import group_advantages, group_context_advantages
from areal_mem.learner.batch import TrainRow, collate, rows_from_groups
from areal_mem.learner.loss import (
    behaviour_weights,
    loglinear_prox_logp,
    low_var_kl,
    ppo_token_loss,
    token_logp_entropy,
)
from areal_mem.learner.packing import pack_by_tokens, split_balanced, split_contiguous
from areal_mem.trajectory import Context, Group, Trajectory


def test_advantages_equal_rewards_are_zero():
    assert group_advantages([0.7, 0.7, 0.7, 0.7, 0.7]) == [0.0] * 5
    assert group_advantages([1.0]) == [0.0]


def test_advantages_different_rewards_use_unbiased_std():
    # mean 0.5, unbiased var = 4 * 0.25 / 3, std = 0.5773503
    a = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert a == pytest.approx([0.8660241, -0.8660241, -0.8660241, 0.8660241], abs=1e-6)
    assert group_advantages([1.0, 0.0, 0.0, 1.0], norm_std=False) == [0.5, -0.5, -0.5, 0.5]
    # rewards 0.1, 0.1, 1: mean 0.4, var (0.09 + 0.09 + 0.36) / 2 = 0.27
    b = group_advantages([0.1, 0.1, 1.0])
    s = math.sqrt(0.27)
    assert b == pytest.approx([-0.3 / s, -0.3 / s, 0.6 / s], abs=1e-5)


def _ctx(n_prompt, mask):
    n = len(mask)
    return Context(
        list(range(1, n_prompt + n + 1)),
        n_prompt,
        mask,
        [-0.5 if m else 0.0 for m in mask],
        [3 if m else -1 for m in mask],
    )


def test_trajectory_advantage_on_every_model_token_of_every_context():
    g = Group(
        "q",
        [
            Trajectory("a", [_ctx(2, [1, 1]), _ctx(3, [1, 0, 0, 1])], reward=1.0),
            Trajectory("b", [_ctx(2, [1, 1, 1])], reward=0.0),
        ],
    )
    a = 1 / (math.sqrt(0.5) + 1e-6) * 0.5
    advs = group_context_advantages(g)
    assert advs == [pytest.approx([a, a]), pytest.approx([a, 0, 0, a]), pytest.approx([-a, -a, -a])]
    rows = rows_from_groups([g])
    assert [r.advantages for r in rows] == advs
    same = Group("s", [Trajectory("c", [_ctx(2, [1])], reward=0.1), Trajectory("d", [_ctx(2, [1])], reward=0.1)])
    assert len(rows_from_groups([g, same])) == 5  # kept, with zero advantages
    kept = rows_from_groups([same, g], skip_uniform=True)
    assert [r.advantages for r in kept] == advs
    assert rows_from_groups([same], skip_uniform=True) == []


def _loss(logp, prox, behav, adv, mask=None, **kw):
    def t(x):
        return torch.tensor(x, dtype=torch.float)

    mask = t(mask if mask is not None else [1.0] * len(logp))
    cfg = LossConfig(**kw)
    return ppo_token_loss(t(logp), t(prox), t(behav), t(adv), mask, cfg)


def test_clip_and_dual_clip_by_hand():
    ln = math.log
    # ratios 1.5, 0.5, 1.5, 4.0, 0.5 against the proximal policy (behaviour == proximal: w = 1)
    logp = [ln(1.5), ln(0.5), ln(1.5), ln(4.0), ln(0.5)]
    adv = [1.0, 1.0, -1.0, -1.0, -1.0]
    loss, st = _loss(logp, [0.0] * 5, [0.0] * 5, adv)
    # A>0: max(-1.5, -1.2) = -1.2 (clipped); max(-0.5, -0.8) = -0.5.
    # A<0: max(1.5, 1.2) = 1.5; max(4, 1.2) = 4 -> dual clip 3; max(0.5, 0.8) = 0.8 (clipped).
    assert loss.tolist() == pytest.approx([-1.2, -0.5, 1.5, 3.0, 0.8], abs=1e-6)
    assert st["clip_frac"].tolist() == [1, 0, 0, 0, 1]
    assert st["dual_clip_frac"].tolist() == [0, 0, 0, 1, 0]
    loss, _ = _loss(logp, [0.0] * 5, [0.0] * 5, adv, dual_clip=0.0)
    assert loss[3].item() == pytest.approx(4.0)
    loss, _ = _loss(logp, [0.0] * 5, [0.0] * 5, adv, eps_clip_low=0.1, eps_clip_high=0.3)
    assert loss.tolist() == pytest.approx([-1.3, -0.5, 1.5, 3.0, 0.9], abs=1e-6)


def test_behaviour_weight_cap_truncate_and_mask():
    ln = math.log
    prox = [ln(2.0), ln(10.0), ln(0.5)]
    behav = [0.0, 0.0, 0.0]
    logp = prox  # ratio 1 to the proximal policy: loss = -A * w
    adv = [1.0, 1.0, 1.0]
    loss, st = _loss(logp, prox, behav, adv, behav_weight_cap=5.0)
    assert loss.tolist() == pytest.approx([-2.0, -5.0, -0.5], abs=1e-5)
    loss, _ = _loss(logp, prox, behav, adv, behav_weight_cap=5.0, behav_weight_cap_mode=CapMode.mask)
    assert loss.tolist() == pytest.approx([-2.0, 0.0, -0.5], abs=1e-5)
    # Not decoupled: the behaviour policy is the proximal one, no weight at all.
    loss, _ = _loss(logp, prox, behav, adv, decoupled=False)
    assert loss.tolist() == pytest.approx([-1.2, -1.2, -0.5], abs=1e-5)  # ratios 2, 10 clipped; 0.5 not


def test_sequence_level_weight_is_geometric_mean():
    ln = math.log
    prox = torch.tensor([[ln(2.0), ln(8.0), 5.0], [ln(1.5), 0.0, 0.0]])
    behav = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    w = behaviour_weights(prox, behav, mask, 3.0, CapMode.truncate, CapLevel.sequence)
    assert w.flatten().tolist() == pytest.approx([3.0, 3.0, 0.0, 1.5, 0.0, 0.0], abs=1e-6)
    w = behaviour_weights(prox, behav, mask, 3.0, CapMode.mask, CapLevel.sequence)
    assert w.flatten().tolist() == pytest.approx([0.0, 0.0, 0.0, 1.5, 0.0, 0.0], abs=1e-6)
    w = behaviour_weights(prox, behav, mask, 0.0, CapMode.mask, CapLevel.sequence)
    assert w.flatten().tolist() == pytest.approx([4.0, 4.0, 0.0, 1.5, 0.0, 0.0], abs=1e-5)


def test_low_var_kl_and_clamp():
    logp, ref = torch.tensor([0.0, -1.0, -30.0]), torch.tensor([0.0, -0.5, 0.0])
    kl = low_var_kl(logp, ref)
    d = 0.5
    assert kl.tolist() == pytest.approx([0.0, math.exp(d) - d - 1, 10.0], abs=1e-6)


def test_entropy_and_logp_by_hand():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]]))
    logp, ent = token_logp_entropy(logits, torch.tensor([[1]]))
    assert logp.item() == pytest.approx(math.log(0.25), abs=1e-6)
    assert ent.item() == pytest.approx(-(0.5 * math.log(0.5) + 0.5 * math.log(0.25)), abs=1e-6)


def test_loglinear_prox_interpolates_by_version():
    behav = torch.tensor([-1.0, -1.0, -1.0, 0.0])
    now = torch.tensor([-3.0, -3.0, -3.0, -3.0])
    ver = torch.tensor([2, 4, 3, -1])
    # proximal version 4, current 5: alpha = (4-2)/(5-2), (4-4)/1, (4-3)/2, injected 0
    p = loglinear_prox_logp(behav, now, ver, 4.0, 5.0)
    assert p.tolist() == pytest.approx([-1 - 2 * 2 / 3, -1.0, -2.0, 0.0], abs=1e-6)
    # First mini-batch: the current policy is the proximal one.
    assert loglinear_prox_logp(behav, now, ver, 4.0, 4.0)[:3].tolist() == [-3.0, -3.0, -3.0]


def test_masked_tokens_contribute_zero_gradient_and_token_mean_over_contexts():
    torch.manual_seed(0)
    rows = [
        TrainRow([5, 6, 7, 8, 9], 2, [1, 0, 1], [-1.0, -2.0, -1.5], [0, -1, 0], [1.0, 0.0, 1.0]),
        TrainRow([1, 2, 3], 1, [1, 1], [-0.5, -0.7], [0, 0], [-0.5, -0.5]),
    ]
    b = collate(rows)
    assert b["loss_mask"].tolist() == [[0, 1, 0, 1], [1, 1, 0, 0]]
    logits = torch.randn(2, 4, 12, requires_grad=True)
    logp, ent = token_logp_entropy(logits, b["labels"])
    cfg = LossConfig(entropy_coef=0.01)
    per_tok, _ = ppo_token_loss(logp, logp.detach(), b["behav_logp"], b["advantages"], b["loss_mask"], cfg, entropy=ent)
    loss = per_tok.sum() / b["loss_mask"].sum()
    loss.backward()
    g = logits.grad.abs().sum(-1)
    assert (g[b["loss_mask"] == 0] == 0).all()
    assert (g[b["loss_mask"] == 1] > 0).all()
    # Token mean over 4 tokens of unequal-length contexts, not a mean of per-context means.
    w = torch.exp(logp.detach() - b["behav_logp"]).clamp(max=5.0)
    per = -b["advantages"] * w - 0.01 * ent.detach()
    expected = (per * b["loss_mask"]).sum() / 4
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)


def test_row_validation_names_the_problem():
    with pytest.raises(ValueError, match="prompt_len"):
        TrainRow([1, 2], 0, [1, 1], [0, 0], [0, 0], [0, 0])
    with pytest.raises(ValueError, match="per-token"):
        TrainRow([1, 2, 3], 1, [1], [0, 0], [0, 0], [0, 0])


def test_pack_by_token_budget():
    lengths = [10, 4, 6, 3, 9, 2]
    bins = pack_by_tokens(lengths, 20)
    assert sorted(i for b in bins for i in b) == list(range(6))
    for b in bins:
        assert len(b) * max(lengths[i] for i in b) <= 20
    assert bins == [[0, 4], [1, 2, 3], [5]]
    assert pack_by_tokens([50, 1], 20) == [[0], [1]]  # too long: alone
    with pytest.raises(ValueError):
        pack_by_tokens([1], 0)


def test_balanced_and_contiguous_splits():
    parts = split_balanced([10, 1, 9, 2, 5, 5], 2)
    sums = [sum([10, 1, 9, 2, 5, 5][i] for i in p) for p in parts]
    assert sums == [16, 16]
    assert split_balanced([3], 2) == [[0], []]
    assert [list(r) for r in split_contiguous(5, 2)] == [[0, 1, 2], [3, 4]]
