"""Weight publishers: `WeightPublisher.publish(version)` (the push template, `publisher.py`) over
one transport per way of moving weights (`disk.py`, `distributed.py`), with a verifier, a healer
and the probe as their own parts."""

from __future__ import annotations

import os
from typing import Optional

from areal_mem.config.learner import PublishConfig, PublisherKind

from ..generator_admin import GeneratorAdmin
from .disk import DiskPublisher
from .distributed import DistributedPublisher
from .lora import LoraPublisher
from .probe import ProbeMismatch
from .publisher import WeightPublisher
from .transport import PushResult
from .verifier import WeightMismatch

__all__ = [
    "DiskPublisher",
    "DistributedPublisher",
    "LoraPublisher",
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
    if engine.cfg.lora.enabled:  # the adapter alone, through the LoRA routes (whatever the kind)
        return LoraPublisher(engine, client, os.path.join(run_dir, "weights"), cfg)
    if cfg.kind == PublisherKind.disk:
        return DiskPublisher(engine, client, os.path.join(run_dir, "weights"), cfg)
    return DistributedPublisher(engine, client, cfg)
