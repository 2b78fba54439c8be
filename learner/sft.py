"""Supervised warm start: the same engine, cross-entropy on the masked-in response tokens.

Rows are shuffled per epoch with the run seed (and, with `learner.sft.batch_tokens`, batched by
length: `sft_batches.py`), so a resumed run continues at the same place in the same order (the
checkpoint stores epoch and rows consumed).
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Optional

from tqdm import tqdm

from areal_mem.config import RunConfig
from areal_mem.config.learner import LRSchedule, ResumeMode, SFTConfig

from .batch import TrainRow
from .checkpoint import CheckpointManager, TrainState
from .engine import LearnerEngine
from .metrics import MetricsLogger
from .sft_batches import row_batches, token_batches


def epoch_batches(rows: List[TrainRow], scfg: SFTConfig, seed: int, epoch: int) -> List[List[int]]:
    """The row indices of each step of `epoch`: `batch_tokens` padded tokens, or `batch_rows` rows."""
    if scfg.batch_tokens:
        return token_batches([len(r) for r in rows], scfg.batch_tokens, seed, epoch)
    return row_batches(len(rows), scfg.batch_rows, seed, epoch)


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
    # every epoch has as many steps: the cuts depend only on the sorted lengths, not the shuffle
    total = len(epoch_batches(rows, scfg, cfg.seed, 0)) * scfg.epochs
    if engine is None:
        lcfg = dataclasses.replace(cfg.learner, lr=scfg.lr)
        engine = LearnerEngine(cfg.model.path, lcfg, seed=cfg.seed, scheduler=lr_scheduler(scfg, total))
    ckpt = CheckpointManager(os.path.join(cfg.run_dir, "sft"), cfg.learner.keep_checkpoints)
    state = (ckpt.load(engine) if cfg.learner.resume == ResumeMode.auto else None) or TrainState()
    log = MetricsLogger(cfg.run_dir, enabled=engine.rank == 0)
    bar = tqdm(total=total, initial=state.step, desc="sft", disable=engine.rank != 0)
    while state.epoch < scfg.epochs:
        done = 0  # rows of this epoch's batches before the next one to train
        for idx in epoch_batches(rows, scfg, cfg.seed, state.epoch):
            done += len(idx)
            if done <= state.groups_consumed:
                continue  # trained before the run was resumed
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
