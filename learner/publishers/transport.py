"""The interface of one way of moving weights into the generators (like slime's weight updaters).

A transport only moves weights: pausing, verifying and healing are the publisher's (`publisher.py`
composes them around `push`). Every learner rank calls `push`, since ZeRO-3 gathers parameters
collectively; only rank 0, which holds the generator link, delivers. What every rank reads (the
gathers) is therefore decided by the config alone: `record` is None on every rank exactly when
verification is off in it; `deliver` and the link, rank 0's state, change only what rank 0 sends.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Optional, Tuple

import torch

from areal_mem.config.learner import PublishConfig

from .link import GeneratorLink, rank0

Named = Iterable[Tuple[str, torch.Tensor]]  # HF-named tensors
Record = Callable[[Named], None]  # takes the tensors a push sends (the verifier's fingerprints)


@dataclass
class PushResult:
    version: int
    seconds: float
    pause_s: float = 0.0
    transfer_s: float = 0.0
    bytes: int = 0
    probe_max_diff: Optional[float] = None
    verify_s: Optional[float] = None  # fingerprints on the learner + the generators' check; None: not verified
    extra: Dict[str, float] = field(default_factory=dict)


class Transport(ABC):
    def __init__(self, engine, link: Optional[GeneratorLink], cfg: PublishConfig):
        self.engine, self.link, self.cfg = engine, link, cfg
        self.leader = engine.rank == 0

    def rank0_link(self) -> GeneratorLink:
        """The generator link, in the parts only rank 0 runs (set-up, delivery, re-delivery)."""
        return rank0(self.link, type(self).__name__)

    @abstractmethod
    def setup(self) -> None:
        """Rank 0 with a link, once before the first push."""

    @abstractmethod
    def push(self, version: int, result: PushResult, deliver: bool, record: Optional[Record]) -> bool:
        """Move the current weights into the generators, stamped `version`; every rank calls.

        Rank 0 delivers only when `deliver` (False: a generator is known to be down, the push
        heals later) and adds the bytes moved to `result`. `record` (None on every rank alike
        when `learner.publish.verify` is off) takes the tensors sent. False where a delivery failed."""

    @abstractmethod
    def redeliver(self) -> None:
        """Rank 0: deliver the last pushed weights again (every generator answers and is paused)."""

    @abstractmethod
    def pushed(self) -> Optional[Named]:
        """Rank 0: the last pushed weights read back, for fingerprints wanted only after the push
        (None: none kept)."""

    @abstractmethod
    def close(self) -> None:
        """Release what the transport holds (a weight group)."""
