"""Weight publishers: one class per transport behind `WeightPublisher.publish(version)`."""

from __future__ import annotations

import os

from areal_mem.config.learner import LearnerConfig, PublisherKind

from .base import ProbeMismatch, PushResult, WeightPublisher
from .disk import DiskPublisher
from .distributed import DistributedPublisher

__all__ = ["DiskPublisher", "DistributedPublisher", "ProbeMismatch", "PushResult", "WeightPublisher", "make_publisher"]


def make_publisher(cfg: LearnerConfig, engine, client, run_dir: str):
    """The configured publisher, or None when there are no generators to update."""
    if cfg.publisher == PublisherKind.none:
        return None
    common = dict(
        pause_mode=cfg.pause_mode,
        probe_check=cfg.probe_check,
        probe_tolerance=cfg.probe_tolerance,
        heal=cfg.heal_generators,
        heal_interval_s=cfg.heal_interval_s,
        restart_timeout_s=cfg.generator_restart_timeout_s,
    )
    if cfg.publisher == PublisherKind.disk:
        return DiskPublisher(engine, client, os.path.join(run_dir, "weights"), cfg.keep_weights, **common)
    return DistributedPublisher(
        engine, client, cfg.bucket_mb, cfg.weight_master_address, cfg.ranks_per_server, **common
    )
