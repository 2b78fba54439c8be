"""Plain PPO (`learner.loss.decoupled: false`, the staleness bench's baseline) against values by hand."""

import math

import pytest
import torch

from areal_mem.config import load_run
from areal_mem.config.learner import LossConfig
from areal_mem.learner.loss import ppo_token_loss

LOGP = [math.log(1.5), math.log(0.5), math.log(4.0)]
PROX = [math.log(2.0)] * 3
BEHAV = [0.0] * 3
ADV = [1.0, 1.0, -1.0]


def _loss(decoupled):
    t = lambda xs: torch.tensor([xs])  # noqa: E731
    cfg = LossConfig(decoupled=decoupled, eps_clip_low=0.2, eps_clip_high=0.2, dual_clip=3.0, behav_weight_cap=5.0)
    loss, stats = ppo_token_loss(t(LOGP), t(PROX), t(BEHAV), t(ADV), torch.ones(1, 3), cfg)
    return loss[0].tolist(), {k: v[0].tolist() for k, v in stats.items()}


def test_plain_ppo_takes_the_ratio_to_the_behaviour_policy_without_weights():
    # ratios to behaviour 1.5, 0.5, 4.0: A=1 -> max(-1.5, -1.2) = -1.2; max(-0.5, -0.8) = -0.5;
    # A=-1 -> max(4.0, 1.2) = 4.0, dual clip at 3.
    loss, stats = _loss(decoupled=False)
    assert loss == pytest.approx([-1.2, -0.5, 3.0], abs=1e-6)
    assert stats["behav_weight"] == [1.0, 1.0, 1.0]
    assert stats["dual_clip_frac"] == [0.0, 0.0, 1.0]


def test_decoupled_takes_the_ratio_to_the_proximal_policy_times_the_behaviour_weight():
    # ratios to prox 0.75, 0.25, 2.0 -> -0.75, -0.25, 2.0 (no dual clip); weight exp(prox - behav) = 2
    loss, stats = _loss(decoupled=True)
    assert loss == pytest.approx([-1.5, -0.5, 4.0], abs=1e-5)
    assert stats["behav_weight"] == pytest.approx([2.0, 2.0, 2.0], abs=1e-6)


def test_the_switch_reaches_the_loss_from_the_config():
    cfg = load_run([], ["model.path=m", "learner.loss.decoupled=false"])
    assert cfg.learner.loss.decoupled is False
    assert load_run([], ["model.path=m"]).learner.loss.decoupled is True
