"""Training metrics to TensorBoard and the console (rank 0 only), and the rollout-side numbers
computed from a batch of groups (reward, EM/F1, turns, tokens, staleness, advantages)."""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from areal_mem.trajectory import Group

from .advantages import group_advantages

CONSOLE_KEYS = (
    "reward",
    "em",
    "f1",
    "format_rate",
    "loss",
    "pg_loss",
    "entropy",
    "clip_frac",
    "behav_weight",
    "kl_ref",
    "grad_norm",
    "staleness_mean",
    "dropped_stale",
    "wait_s",
    "step_s",
    "push_s",
)


def batch_stats(groups: Sequence[Group], version: int, norm_std: bool = True) -> Dict[str, float]:
    """Per-batch means over trajectories and contexts; the workflow's `info` keys em/f1/acc,
    format_error (as a format rate) and num_turns when present."""
    trajs = [t for g in groups for t in g.trajectories]
    if not trajs:
        return {}
    out: Dict[str, float] = {"groups": len(groups), "trajectories": len(trajs)}
    out["reward"] = _mean([t.reward for t in trajs])
    for key in ("em", "f1", "acc"):
        vals = [float(t.info[key]) for t in trajs if t.info.get(key) is not None]
        if vals:
            out[key] = _mean(vals)
    formats = [t.info["format_error"] for t in trajs if t.info.get("format_error") is not None]
    if formats:
        out["format_rate"] = _mean([1.0 if not f else 0.0 for f in formats])
    out["turns"] = _mean([t.info.get("num_turns") or len(t.contexts) for t in trajs])
    out["contexts"] = _mean([len(t.contexts) for t in trajs])
    ctxs = [c for t in trajs for c in t.contexts]
    out["context_tokens"] = _mean([len(c.input_ids) for c in ctxs])
    out["context_tokens_max"] = float(max(len(c.input_ids) for c in ctxs))
    out["response_tokens"] = _mean([sum(c.loss_mask) for c in ctxs])
    advs = [a for g in groups for a in group_advantages([t.reward for t in g.trajectories], norm_std)]
    out["adv_mean"], out["adv_std"] = _mean(advs), _std(advs)
    out["adv_abs_max"] = max(abs(a) for a in advs)
    out["zero_adv_groups"] = float(sum(1 for g in groups if len({t.reward for t in g.trajectories}) == 1))
    stale = staleness(groups, version)
    if stale:
        out["staleness_mean"], out["staleness_max"] = _mean(stale), float(max(stale))
    return out


def staleness(groups: Sequence[Group], version: int) -> List[int]:
    """Per model-generated token: how many versions behind the current policy it was sampled."""
    return [
        version - v
        for g in groups
        for t in g.trajectories
        for c in t.contexts
        for v, m in zip(c.versions, c.loss_mask)
        if m and v >= 0
    ]


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else 0.0


def _std(xs) -> float:
    xs = list(xs)
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


class MetricsLogger:
    """Scalars and histograms to `<run_dir>/tensorboard`, one summary line per step to stderr."""

    def __init__(self, run_dir: str, enabled: bool = True, stream=None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.writer = None
        self.jsonl = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(os.path.join(run_dir, "tensorboard"))
            # One JSON line per step: the launcher's progress bar and scripts read it.
            self.jsonl = open(os.path.join(run_dir, "metrics.jsonl"), "a", encoding="utf-8")

    def log(
        self,
        step: int,
        metrics: Dict[str, float],
        histograms: Optional[Dict[str, list]] = None,
        prefix: str = "train",
        walltime: Optional[float] = None,
    ) -> None:
        """`walltime`: when the logged state existed (default: now); an evaluation logs the time
        its version was trained, not when its result came, so curves line up with training's."""
        if self.writer is None or self.jsonl is None:  # not rank 0, or logging off
            return
        for k, v in metrics.items():
            self.writer.add_scalar(f"{prefix}/{k}", v, step, walltime=walltime)
        for k, values in (histograms or {}).items():
            if values:
                self.writer.add_histogram(f"{prefix}/{k}", np.asarray(values), step)
        self.writer.flush()
        row = {"kind": prefix, "step": step, **({"time": walltime} if walltime is not None else {}), **metrics}
        self.jsonl.write(json.dumps(row) + "\n")
        self.jsonl.flush()
        shown = " ".join(f"{k}={metrics[k]:.4g}" for k in CONSOLE_KEYS if k in metrics)
        print(f"[{prefix} step {step}] {shown}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.jsonl is not None:
            self.jsonl.close()
