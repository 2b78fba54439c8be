"""The interface every weight transport implements: pause -> push -> continue (-> probe).

Every learner rank calls `publish` (ZeRO-3 gathers parameters collectively);
only rank 0 talks to the generators. Bumping the buffer's version is the
training loop's job, after `publish` returns.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..async_bridge import LoopThread
from ..batch import TrainRow, broadcast_rows


class ProbeMismatch(RuntimeError):
    """After a push the generator's log-probs differ from the learner's: the weights did not land."""


@dataclass
class PushResult:
    version: int
    seconds: float
    pause_s: float = 0.0
    transfer_s: float = 0.0
    bytes: int = 0
    probe_max_diff: Optional[float] = None
    extra: Dict[str, float] = field(default_factory=dict)


class WeightPublisher(ABC):
    def __init__(self, engine, client=None, pause_mode: str = "abort", probe_check: bool = False,
                 probe_tolerance: float = 1e-4, probe_ids: Optional[List[int]] = None):
        self.engine, self.client = engine, client
        self.pause_mode = pause_mode
        self.probe_check, self.probe_tolerance = probe_check, probe_tolerance
        self.probe_ids = probe_ids or list(range(3, 19))
        self.leader = engine.rank == 0
        self.io = LoopThread() if (self.leader and client is not None) else None

    def setup(self) -> None:
        """Once before the first push (e.g. join the weight group)."""

    @abstractmethod
    def _push(self, version: int, result: PushResult) -> None:
        """Move the current weights into the generators, stamped `version` (all ranks call)."""

    def publish(self, version: int) -> PushResult:
        t0 = time.monotonic()
        result = PushResult(version, 0.0)
        if self.io is not None:
            self.io.run(self.client.pause(self.pause_mode))
        result.pause_s = time.monotonic() - t0
        try:
            t1 = time.monotonic()
            self._push(version, result)
            result.transfer_s = time.monotonic() - t1
        finally:
            if self.io is not None:
                self.io.run(self.client.continue_generation())
        if self.probe_check:
            result.probe_max_diff = self.probe()
        result.seconds = time.monotonic() - t0
        return result

    def probe(self) -> float:
        """Sample a few tokens from a generator, score them here; the largest log-prob difference.

        Raises ProbeMismatch above the tolerance. Every rank scores (ZeRO-3 forwards are collective).
        """
        from rollout.generator.types import SamplingParams

        rows = None
        gen_logps: List[float] = []
        if self.io is not None:
            res = self.io.run(self.client.generate(
                list(self.probe_ids), SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0,
                                                     sampling_seed=1234)))
            n = len(res.output_ids)
            rows = [TrainRow(list(self.probe_ids) + res.output_ids, len(self.probe_ids), [1] * n,
                             res.logprobs, res.versions, [0.0] * n)]
            gen_logps = res.logprobs
        rows = broadcast_rows(rows)
        mine = self.engine.logprobs(rows)[0]
        if not self.leader:
            return 0.0
        diff = max((abs(a - b) for a, b in zip(mine, gen_logps)), default=0.0)
        if diff > self.probe_tolerance:
            raise ProbeMismatch(f"generator log-probs differ from the learner's by {diff:.3g} "
                                f"(> {self.probe_tolerance}) after the push")
        return diff

    def close(self) -> None:
        if self.io is not None:
            self.io.run(self.client.close())
            self.io.close()
            self.io = None
