"""The staleness-aware decoupled PPO loss (AReaL), per token, on padded [rows, positions] tensors.

Three policies meet here: the behaviour policy that sampled each token (its
log-prob travels in the context row), the proximal policy (the weights before
this step's update, recomputed or approximated) and the policy being trained.
The PPO ratio is taken to the proximal policy so that the trust region does not
depend on how stale the sample is; the staleness is corrected by the behaviour
weight ``exp(prox - behav)``, capped. Every function returns per-token values;
the caller divides the masked sum by the token count of the global mini-batch.
"""

from __future__ import annotations

from typing import Dict, Optional

import torch

from areal_mem.config.learner import CapLevel, CapMode, LossConfig


def token_logp_entropy(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0):
    """Log-prob of each label and the entropy of each position's distribution (float32).

    The plain definition over a whole logits tensor: the learner computes the same a chunk at a
    time (`learner/head.py`); this is the reference its tests and benchmarks compare with."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    logp = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - logz
    probs = torch.softmax(logits, dim=-1)
    entropy = logz - (probs * logits).sum(-1)
    return logp, entropy


def behaviour_weights(prox_logp, behav_logp, mask, cap: float, mode: CapMode, level: CapLevel):
    """The importance weight of the proximal policy over the behaviour one, capped; 0 where masked.

    Sequence level uses the geometric mean over one row's masked-in tokens, so a
    long context is not dropped for one unlucky token.
    """
    log_w = (prox_logp - behav_logp) * mask
    if level == CapLevel.sequence:
        n = mask.sum(-1, keepdim=True).clamp(min=1)
        log_w = (log_w.sum(-1, keepdim=True) / n).expand_as(mask)
    w = torch.exp(log_w)
    if cap > 0:
        if mode == CapMode.truncate:
            w = w.clamp(max=cap)
        else:
            w = torch.where(w <= cap, w, torch.zeros_like(w))
    return w * mask


def low_var_kl(logp, ref_logp, clamp: float = 10.0):
    """k3 estimator of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1, clamped."""
    log_ratio = (ref_logp - logp).clamp(-20, 20)
    return (torch.exp(log_ratio) - log_ratio - 1).clamp(-clamp, clamp)


def ppo_token_loss(
    logp: torch.Tensor,
    prox_logp: torch.Tensor,
    behav_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: LossConfig,
    entropy: Optional[torch.Tensor] = None,
    ref_logp: Optional[torch.Tensor] = None,
):
    """Per-token loss (zero where `mask` is 0) and per-token statistics to sum for the metrics.

    With `decoupled` off the behaviour policy doubles as the proximal one (plain PPO).
    """
    mask = mask.float()
    if not cfg.decoupled:
        prox_logp = behav_logp
    prox_logp, behav_logp = prox_logp.detach(), behav_logp.detach()
    ratio = torch.exp((logp - prox_logp) * mask)
    clipped = ratio.clamp(1 - cfg.eps_clip_low, 1 + cfg.eps_clip_high)
    pg1, pg2 = -advantages * ratio, -advantages * clipped
    pg = torch.maximum(pg1, pg2)
    clip_hit = (pg2 > pg1).float()
    dual_hit = torch.zeros_like(pg)
    if cfg.dual_clip > 0:
        pg3 = -advantages * cfg.dual_clip
        dual = (advantages < 0) & (pg > pg3)
        pg = torch.where(dual, pg3, pg)
        dual_hit = dual.float()
    if cfg.decoupled:
        w = behaviour_weights(
            prox_logp, behav_logp, mask, cfg.behav_weight_cap, cfg.behav_weight_cap_mode, cfg.behav_weight_cap_level
        )
    else:
        w = mask
    loss = pg * w
    stats: Dict[str, torch.Tensor] = {
        "pg_loss": loss * mask,
        "clip_frac": clip_hit * mask,
        "dual_clip_frac": dual_hit * mask,
        "ratio": ratio * mask,
        "behav_weight": w * mask,
        "behav_weight_capped": ((w == 0) | (w >= cfg.behav_weight_cap)).float() * mask
        if cfg.decoupled and cfg.behav_weight_cap > 0
        else torch.zeros_like(mask),
        "approx_kl_behav": (prox_logp - behav_logp) * mask,
    }
    if entropy is not None:
        stats["entropy"] = entropy.detach() * mask
        if cfg.entropy_coef:
            loss = loss - cfg.entropy_coef * entropy
    if ref_logp is not None:
        kl = low_var_kl(logp, ref_logp.detach(), cfg.kl_clamp)
        stats["kl_ref"] = kl.detach() * mask
        if cfg.kl_coef:
            loss = loss + cfg.kl_coef * kl
    return loss * mask, {k: v.detach() for k, v in stats.items()}


MISMATCH_SUMS = ("mismatch_tokens", "mismatch_abs", "mismatch_log_ratio", "mismatch_capped", "mismatch_rows")


def mismatch_sums(logp, behav_logp, mask, versions, version: int, cap: float) -> Dict[str, torch.Tensor]:
    """How far the generator's log-probs lie from the learner's, on the tokens that the learner's
    current weights (`version`) sampled, before this step changes them: there the two engines ran
    the same weights, so any gap is the inference engine's (kernels, precision, a bad push), not
    staleness. Sums to reduce over the mini-batch; `mismatch_metrics` turns them into means."""
    fresh = mask * (versions == version).to(mask.dtype)
    gap = (logp.detach() - behav_logp) * fresh
    capped = (torch.exp(gap) > cap) & (fresh > 0) if cap > 0 else torch.zeros_like(fresh, dtype=torch.bool)
    return {
        "mismatch_tokens": fresh,
        "mismatch_abs": gap.abs(),
        "mismatch_log_ratio": -gap,  # log behav - log learner, summed per sequence below
        "mismatch_capped": capped.float(),
        "mismatch_rows": (fresh.sum(-1) > 0).float(),
    }


def mismatch_metrics(sums: Dict[str, float]) -> Dict[str, float]:
    """From the reduced sums: the share of tokens the current version sampled, their mean
    |behav_logp - learner logp|, the sequence-level KL(behav || learner) estimate (the k1
    estimator: the mean over those sequences of the summed log-ratio), and the share of those
    tokens whose behaviour weight exceeds the cap."""
    tokens = sums["mismatch_tokens"]
    out = {"mismatch_token_frac": tokens / max(sums["n_tokens"], 1.0)}
    if tokens > 0:
        out["mismatch_logp_abs"] = sums["mismatch_abs"] / tokens
        out["mismatch_kl_seq"] = sums["mismatch_log_ratio"] / max(sums["mismatch_rows"], 1.0)
        out["mismatch_capped_frac"] = sums["mismatch_capped"] / tokens
    return out


def loglinear_prox_logp(behav_logp, logp_now, behav_versions, prox_version: float, now_version: float):
    """Approximate proximal log-probs without a forward pass (AReaL's log-linear rule).

    The log-prob of the proximal policy is interpolated between the behaviour
    policy (version v_b, per token) and the current one by where the proximal
    version lies between them: alpha = (v_prox - v_b) / (v_now - v_b). At the
    first mini-batch (v_now == v_prox) this is the current log-prob exactly.
    """
    vb = behav_versions.float()
    span = now_version - vb
    alpha = torch.where(span > 0, (prox_version - vb) / span.clamp(min=1e-8), torch.ones_like(vb))
    alpha = torch.where(behav_versions < 0, torch.zeros_like(alpha), alpha.clamp(0, 1))
    return (behav_logp + alpha * (logp_now.detach() - behav_logp)).detach()
