"""Training rows (a context row plus its advantages) and their padded tensors.

Tensors are aligned to label positions: position j of a row predicts
``input_ids[j + 1]``, so response token i of a context sits at
``prompt_len - 1 + i``. Prompt positions and padding carry mask 0.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Sequence, Tuple

import torch

from areal_mem.config.learner import LossAgg
from areal_mem.trajectory import Context, Group, Trajectory

from .advantages import group_advantages, token_advantages

log = logging.getLogger(__name__)
# The buffer's value limits (areal_mem/buffer/schema.py), restated: the learner holds every
# group it trains to them whatever served it (an older buffer, a file, a bug).
LOGP_TOLERANCE = float(torch.tensor(1e-3, dtype=torch.float32))  # rows hold float32
MIN_LOGP = -1000.0
MAX_ABS_REWARD = 1e6


class BadGroupError(ValueError):
    """A group the learner cannot train on; the message names the group, trajectory, turn and field."""


def check_group(group: Group, vocab_size: int = 0) -> None:
    """Refuse (BadGroupError) a group whose values would crash a step or make its loss NaN."""
    if not group.trajectories:
        raise BadGroupError(f"group {group.group_id!r}: no trajectories")
    for t in group.trajectories:
        where = f"group {group.group_id!r}, trajectory {t.traj_id!r}"
        if not isinstance(t.reward, (int, float)) or not math.isfinite(t.reward) or abs(t.reward) > MAX_ABS_REWARD:
            raise BadGroupError(f"{where}: field 'reward' is {t.reward!r}, not finite within +-{MAX_ABS_REWARD:g}")
        if not t.contexts:
            raise BadGroupError(f"{where}: no contexts")
        for turn, c in enumerate(t.contexts):
            at = f"{where}, turn {turn}"
            n = len(c.input_ids) - c.prompt_len
            if c.prompt_len < 1 or n < 1:
                raise BadGroupError(f"{at}: field 'prompt_len' {c.prompt_len} leaves no prompt or no response token")
            if not len(c.loss_mask) == len(c.behav_logp) == len(c.versions) == n:
                raise BadGroupError(f"{at}: per-token fields do not have {n} entries")
            bad_id = next((x for x in c.input_ids if x < 0 or (vocab_size and x >= vocab_size)), None)
            if bad_id is not None:
                raise BadGroupError(f"{at}: field 'input_ids' holds {bad_id}, outside 0..{vocab_size - 1 or 'inf'}")
            if any(m not in (0, 1) for m in c.loss_mask):
                raise BadGroupError(f"{at}: field 'loss_mask' holds values other than 0 and 1")
            bad_lp = next((x for x in c.behav_logp if not (MIN_LOGP <= x <= LOGP_TOLERANCE)), None)
            if bad_lp is not None:  # NaN fails both comparisons
                raise BadGroupError(
                    f"{at}: field 'behav_logp' holds {bad_lp}, not in [{MIN_LOGP:g}, {LOGP_TOLERANCE:g}]"
                )
            if any(v < -1 for v in c.versions):
                raise BadGroupError(f"{at}: field 'versions' holds a value below -1")


def quarantine(groups: Iterable[Group], vocab_size: int = 0) -> Tuple[List[Group], List[Tuple[str, str]]]:
    """(the groups that pass `check_group`, (group id, reason) of each that does not). A refused
    group is left out of the step and acked with its batch: never trained, never served again."""
    good, bad = [], []
    for g in groups:
        try:
            check_group(g, vocab_size)
        except BadGroupError as e:
            log.warning("quarantined %s", e)
            bad.append((g.group_id, str(e)))
        else:
            good.append(g)
    return good, bad


@dataclass
class TrainRow:
    input_ids: List[int]
    prompt_len: int
    loss_mask: List[int]  # per response token
    behav_logp: List[float]
    versions: List[int]
    advantages: List[float]
    # The weight of each of this row's tokens in the mini-batch loss (learner.loss_agg): 1 pools
    # tokens; 1 / (the row's or its trajectory's model tokens) weighs contexts or trajectories alike.
    loss_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.prompt_len < 1:
            raise ValueError("prompt_len must be at least 1: the first response token needs a prefix")
        n = len(self.input_ids) - self.prompt_len
        if not (len(self.loss_mask) == len(self.behav_logp) == len(self.versions) == len(self.advantages) == n):
            raise ValueError(
                f"training row with {n} response tokens has per-token lists of lengths "
                f"{len(self.loss_mask)}, {len(self.behav_logp)}, {len(self.versions)}, "
                f"{len(self.advantages)}"
            )

    @classmethod
    def from_context(cls, ctx: Context, advantage: float, loss_weight: float = 1.0) -> TrainRow:
        return cls(
            list(ctx.input_ids),
            ctx.prompt_len,
            list(ctx.loss_mask),
            list(ctx.behav_logp),
            list(ctx.versions),
            token_advantages(ctx, advantage),
            loss_weight,
        )

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_loss_tokens(self) -> int:
        return sum(1 for m in self.loss_mask if m)

    @property
    def loss_units(self) -> float:
        """What this row adds to the loss's denominator: its tokens times their weight."""
        return self.num_loss_tokens * self.loss_weight


def rows_from_groups(
    groups: Iterable[Group], norm_std: bool = True, skip_uniform: bool = False, agg: LossAgg = LossAgg.token_mean
) -> List[TrainRow]:
    """Every context of every trajectory, with its trajectory's group-normalised advantage and
    the loss weight that `agg` gives its tokens.

    skip_uniform: leave out groups whose rewards are all equal. Their advantages are 0, so they
    add nothing to the policy gradient (only to the entropy and KL terms and to the token-mean's
    denominator) but cost a forward and backward each (DAPO's dynamic sampling, on the learner).
    """
    rows: List[TrainRow] = []
    for g in groups:
        rewards = [t.reward for t in g.trajectories]
        if skip_uniform and len(set(rewards)) == 1:
            continue
        advs = group_advantages(rewards, norm_std)
        for t, a in zip(g.trajectories, advs):
            rows.extend(
                TrainRow.from_context(c, a, w) for c, w in zip(t.contexts, _context_weights(t, agg), strict=True)
            )
    return rows


def _context_weights(traj: Trajectory, agg: LossAgg) -> List[float]:
    """The loss weight of each context's tokens. The loss divides by the sum of weight x tokens
    over the mini-batch, so that sum counts tokens, contexts or trajectories."""
    tokens = [sum(1 for m in c.loss_mask if m) for c in traj.contexts]
    if agg == LossAgg.token_mean:
        return [1.0] * len(tokens)
    if agg == LossAgg.context_mean:
        return [1.0 / n if n else 0.0 for n in tokens]
    total = sum(tokens)
    return [1.0 / total if total else 0.0] * len(tokens)


def collate(rows: Sequence[TrainRow], pad_id: int = 0) -> Dict[str, torch.Tensor]:
    """Right-padded tensors: `input_ids`/`attention_mask` [B, L]; label-aligned [B, L-1] the rest.

    An empty list gives one dummy row with nothing to learn, so that a rank with
    no rows still runs its forward/backward in step with the others.
    """
    if not rows:
        rows = [TrainRow([pad_id, pad_id], 1, [0], [0.0], [-1], [0.0])]
    B, L = len(rows), max(len(r) for r in rows)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    attn = torch.zeros((B, L), dtype=torch.long)
    mask = torch.zeros((B, L - 1))
    behav = torch.zeros((B, L - 1))
    adv = torch.zeros((B, L - 1))
    ver = torch.full((B, L - 1), -1, dtype=torch.long)
    resp = torch.zeros((B, L - 1), dtype=torch.bool)
    weight = torch.tensor([[r.loss_weight] for r in rows], dtype=torch.float)
    for b, r in enumerate(rows):
        n, s = len(r), r.prompt_len - 1
        ids[b, :n] = torch.tensor(r.input_ids)
        attn[b, :n] = 1
        e = s + len(r.loss_mask)
        mask[b, s:e] = torch.tensor(r.loss_mask, dtype=torch.float)
        behav[b, s:e] = torch.tensor(r.behav_logp, dtype=torch.float)
        adv[b, s:e] = torch.tensor(r.advantages, dtype=torch.float)
        ver[b, s:e] = torch.tensor(r.versions, dtype=torch.long)
        resp[b, s:e] = True
    return {
        "input_ids": ids,
        "attention_mask": attn,
        "labels": ids[:, 1:],
        "loss_mask": mask,
        "response_mask": resp,
        "behav_logp": behav * mask,
        "advantages": adv * mask,
        "versions": ver,
        "loss_weight": weight,  # [B, 1]
    }


def broadcast_rows(rows: Sequence[TrainRow] | None, src: int = 0) -> List[TrainRow]:
    """Every rank gets rank `src`'s rows, as plain tensors (no pickling between processes)."""
    import torch.distributed as dist

    from .distributed import device, rank, world_size

    mine = rank() == src
    if mine and rows is None:
        raise ValueError(f"broadcast_rows: rank {src} sends the rows and must have them")
    sent: Sequence[TrainRow] = rows or ()
    if world_size() == 1:
        return list(sent)
    dev = device()
    head = torch.zeros(2, dtype=torch.long, device=dev)
    if mine:
        head[0], head[1] = len(sent), sum(len(r) for r in sent)
    dist.broadcast(head, src)
    n, total = int(head[0]), int(head[1])
    shape = torch.zeros((n, 2), dtype=torch.long, device=dev)
    weights = torch.zeros(n, dtype=torch.float64, device=dev)
    ints = torch.zeros((3, total), dtype=torch.long, device=dev)  # ids, mask, versions (padded to total)
    floats = torch.zeros((2, total), dtype=torch.float64, device=dev)  # behav_logp, advantages
    if mine:
        shape[:, 0] = torch.tensor([len(r) for r in sent])
        shape[:, 1] = torch.tensor([r.prompt_len for r in sent])
        weights[:] = torch.tensor([r.loss_weight for r in sent], dtype=torch.float64)
        ints[0] = torch.tensor([t for r in sent for t in r.input_ids])
        resp = [(r.loss_mask, r.versions, r.behav_logp, r.advantages) for r in sent]
        k = sum(len(r[0]) for r in resp)
        ints[1, :k] = torch.tensor([m for r in resp for m in r[0]])
        ints[2, :k] = torch.tensor([v for r in resp for v in r[1]])
        floats[0, :k] = torch.tensor([x for r in resp for x in r[2]], dtype=torch.float64)
        floats[1, :k] = torch.tensor([x for r in resp for x in r[3]], dtype=torch.float64)
    for t in (shape, weights, ints, floats):
        dist.broadcast(t, src)
    if mine:
        return list(sent)
    out, a, b = [], 0, 0
    ids, lm, vs = (ints[i].tolist() for i in range(3))
    bl, ad = floats[0].tolist(), floats[1].tolist()
    for (length, plen), w in zip(shape.tolist(), weights.tolist()):
        m = length - plen
        out.append(TrainRow(ids[a : a + length], plen, lm[b : b + m], bl[b : b + m], vs[b : b + m], ad[b : b + m], w))
        a, b = a + length, b + m
    return out
