"""Weight publishers: one class per transport behind `WeightPublisher.publish(version)`."""

from __future__ import annotations

import os
from typing import Optional

from areal_mem.config.learner import PublishConfig, PublisherKind

from ..generator_admin import GeneratorAdmin
from .base import ProbeMismatch, PushResult, WeightMismatch, WeightPublisher
from .disk import DiskPublisher
from .distributed import DistributedPublisher

__all__ = [
    "DiskPublisher",
    "DistributedPublisher",
    "ProbeMismatch",
    "PushResult",
    "WeightMismatch",
    "WeightPublisher",
    "make_publisher",
]


def make_publisher(cfg: PublishConfig, engine, client: Optional[GeneratorAdmin], run_dir: str):
    """The configured publisher, or None when there are no generators to update."""
    if cfg.kind == PublisherKind.none:
        return None
    if cfg.kind == PublisherKind.disk:
        return DiskPublisher(engine, client, os.path.join(run_dir, "weights"), cfg)
    return DistributedPublisher(engine, client, cfg)
