"""Multi-context GRPO advantages (MemSearcher as released).

Each trajectory's reward is normalised within its group (all G trajectories of
one question): ``A_j = (r_j - mean) / (std + eps)`` with the unbiased std, or
just ``r_j - mean`` when std normalisation is off. The trajectory's A is put on
every model-generated token of every one of its contexts: no discount and no
per-turn credit, because a memory rewrite earns only the final answer's reward.
"""

from __future__ import annotations

import math
from typing import List, Sequence

from areal_mem.trajectory import Context, Group


def group_advantages(rewards: Sequence[float], norm_std: bool = True, eps: float = 1e-6) -> List[float]:
    """Normalised rewards of one group; a group of one (or equal rewards) gets zero advantages."""
    n = len(rewards)
    if n == 0:
        return []
    mean = sum(rewards) / n
    centred = [r - mean for r in rewards]
    if not norm_std:
        return centred
    std = math.sqrt(sum(c * c for c in centred) / (n - 1)) if n > 1 else 0.0
    return [c / (std + eps) for c in centred]


def token_advantages(ctx: Context, advantage: float) -> List[float]:
    """The trajectory advantage on each model-generated response token, 0 on injected ones."""
    return [advantage if m else 0.0 for m in ctx.loss_mask]


def group_context_advantages(group: Group, norm_std: bool = True, eps: float = 1e-6) -> List[List[float]]:
    """Per context of the group (trajectory order, then turn order): per-response-token advantages."""
    advs = group_advantages([t.reward for t in group.trajectories], norm_std, eps)
    return [token_advantages(c, a) for t, a in zip(group.trajectories, advs) for c in t.contexts]
