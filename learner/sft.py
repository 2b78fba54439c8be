"""Supervised warm start: the same engine, cross-entropy on the masked-in response tokens.

Rows are shuffled per epoch with the run seed, so a resumed run continues at the
same place in the same order (the checkpoint stores epoch and rows consumed).
"""

from __future__ import annotations

import dataclasses
import os
import random
from typing import List, Optional

from tqdm import tqdm

from areal_mem.config import RunConfig
from areal_mem.config.learner import LRSchedule, ResumeMode, SFTConfig

from .batch import TrainRow
from .checkpoint import CheckpointManager, TrainState
from .engine import LearnerEngine
from .metrics import MetricsLogger


def epoch_order(n: int, seed: int, epoch: int) -> List[int]:
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def lr_scheduler(scfg: SFTConfig, total_steps: int) -> Optional[dict]:
    """DeepSpeed's `scheduler` section for `learner.sft.lr_schedule`; None for a constant rate.

    DeepSpeed's scheduler steps with the engine and is saved in its checkpoints, so a resumed
    SFT continues on the same curve."""
    if scfg.lr_schedule == LRSchedule.constant:
        return None
    params = {
        "total_num_steps": total_steps,
        "warmup_num_steps": max(scfg.warmup_steps, 1),
        # no warm-up asked: start at the full rate (DeepSpeed always has a warm-up of >= 2 steps)
        "warmup_min_ratio": 0.0 if scfg.warmup_steps else 1.0,
        "warmup_type": "linear",
        "cos_min_ratio": scfg.min_lr_ratio,
    }
    return {"type": "WarmupCosineLR", "params": params}


def run_sft(cfg: RunConfig, rows: List[TrainRow], engine: Optional[LearnerEngine] = None) -> TrainState:
    """Train `rows` for `learner.sft.epochs`; export to `learner.sft.out_dir` (default <run_dir>/sft/model)."""
    scfg = cfg.learner.sft
    per_epoch = -(-len(rows) // scfg.batch_rows)
    total = per_epoch * scfg.epochs
    if engine is None:
        lcfg = dataclasses.replace(cfg.learner, lr=scfg.lr)
        engine = LearnerEngine(cfg.model.path, lcfg, seed=cfg.seed, scheduler=lr_scheduler(scfg, total))
    ckpt = CheckpointManager(os.path.join(cfg.run_dir, "sft"), cfg.learner.keep_checkpoints)
    state = (ckpt.load(engine) if cfg.learner.resume == ResumeMode.auto else None) or TrainState()
    log = MetricsLogger(cfg.run_dir, enabled=engine.rank == 0)
    bar = tqdm(total=total, initial=state.step, desc="sft", disable=engine.rank != 0)
    while state.epoch < scfg.epochs:
        order = epoch_order(len(rows), cfg.seed, state.epoch)
        while state.groups_consumed < len(rows):
            idx = order[state.groups_consumed : state.groups_consumed + scfg.batch_rows]
            lr = engine.lr()  # the rate of this step (the scheduler moves on inside it)
            m = engine.sft_step([rows[i] for i in idx])
            state.groups_consumed += len(idx)
            state.step += 1
            m["epoch"] = float(state.epoch)
            m["lr"] = lr
            if engine.rank == 0 and state.step % cfg.learner.log_interval == 0:
                log.log(state.step, m, prefix="sft")
            bar.update(1)
            if state.step % cfg.learner.checkpoint_interval == 0:
                ckpt.save(engine, state)
        state.epoch, state.groups_consumed = state.epoch + 1, 0
    bar.close()
    log.close()
    ckpt.save(engine, state)
    engine.export_hf(scfg.out_dir or os.path.join(cfg.run_dir, "sft", "model"))
    return state
