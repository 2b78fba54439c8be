"""The push template: pause -> push -> (verify) -> continue (-> heal) (-> probe).

`WeightPublisher` composes one transport (how the weights move: `disk.py`, `distributed.py`)
with a `Verifier` (are they what the generators now serve), a `Healer` (a generator that failed
or restarted gets them again) and the probe. Every learner rank calls `publish` (ZeRO-3 gathers
parameters collectively); only rank 0, which holds the generator link, talks to the generators.
Bumping the buffer's version is the training loop's job, after `publish` returns.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from areal_mem.config.learner import PublishConfig
from areal_mem.generation import GeneratorError

from .healer import Healer
from .link import GeneratorLink, rank0
from .probe import probe
from .transport import PushResult, Transport
from .verifier import Verifier

log = logging.getLogger(__name__)


class WeightPublisher:
    def __init__(self, engine, link: Optional[GeneratorLink], cfg: PublishConfig, transport: Transport):
        """`link`: rank 0's line to the generators (None on the other ranks, and without generators)."""
        self.engine, self.link, self.cfg, self.transport = engine, link, cfg, transport
        self.verifier = Verifier(link, cfg.verify)
        self.lock = threading.RLock()  # a push and the healer's watcher never overlap
        # rank 0's, with the link: it alone talks to the generators and heals them
        self.healer = Healer(link, cfg, self.redeliver, self.lock) if link is not None else None

    @property
    def verify(self) -> bool:
        """Whether this rank verifies pushes (rank 0 until `auto` meets incomparable fingerprints)."""
        return self.verifier.active

    @property
    def verified(self) -> int:
        return self.verifier.verified

    @property
    def heals(self) -> int:
        return self.healer.heals if self.healer is not None else 0

    @property
    def pushed_version(self) -> Optional[int]:
        return self.healer.pushed_version if self.healer is not None else None

    def setup(self) -> None:
        """Once before the first push: the transport's set-up, continue generators that a dead
        learner left paused mid-push, and start the watcher."""
        if self.link is None or self.healer is None:
            return
        self.transport.setup()
        self.link.attempt(self.link.client.continue_generation(), "continue")
        self.healer.start()

    def publish(self, version: int) -> PushResult:
        with self.lock:
            t0 = time.monotonic()
            result = PushResult(version, 0.0)
            if self.link is None or self.healer is None:  # another rank, or no generators: the collective part
                self._push(version, result)
            else:
                self.healer.raise_failure()
                self._deliver(self.link, self.healer, version, result)
                if self.healer.settle(version):
                    result.extra["healed"] = 1.0
                self.healer.delivered(version)
                result.verify_s = self.verifier.seconds
        if self.cfg.probe_check:
            result.probe_max_diff = self.probe()
        result.seconds = time.monotonic() - t0
        return result

    def _push(self, version: int, result: PushResult) -> None:
        t0 = time.monotonic()
        record = self.verifier.start_push()
        healer = self.healer
        if not self.transport.push(version, result, healer is None or not healer.broken, record) and healer:
            healer.mark_broken()
        result.transfer_s = time.monotonic() - t0

    def _deliver(self, link: GeneratorLink, healer: Healer, version: int, result: PushResult) -> None:
        """Rank 0's push: a generator that fails a step marks the healer broken, to heal (or fail) after."""
        if self.verifier.needs_served and not link.attempt(
            self.verifier.learn_served(), "asking for weight fingerprints"
        ):
            healer.mark_broken()  # a generator is unreachable: the push heals (and verifies) or fails
        t0 = time.monotonic()
        if not link.attempt(link.client.pause(self.cfg.pause_mode), "pause"):
            healer.mark_broken()
        result.pause_s = time.monotonic() - t0
        try:
            self._push(version, result)
            if self.verifier.active and not healer.broken:
                try:
                    self.verifier.check(version, self.transport)
                except GeneratorError as e:  # did not answer: heal (re-deliver and check) or fail
                    log.warning("weight publisher: checking push %d failed: %s", version, e)
                    healer.mark_broken()
        finally:
            if not link.attempt(link.client.continue_generation(), "continue"):
                healer.mark_broken()

    def redeliver(self, version: int) -> None:
        """Rank 0, for the healer once every generator answers: the last pushed weights (`version`)
        again, verified, generation paused meanwhile. Raises where a generator fails a step."""
        link = rank0(self.link, "WeightPublisher.redeliver")
        link.run(link.client.pause(self.cfg.pause_mode))
        try:
            if self.verifier.needs_served:
                link.run(self.verifier.learn_served())
            self.transport.redeliver()
            if self.verifier.active:
                self.verifier.check(version, self.transport)
        finally:
            link.run(link.client.continue_generation())

    def probe(self) -> float:
        """The probe's largest log-prob difference (`probe.py`); every rank calls."""
        return probe(self.engine, self.link, self.cfg.probe_tolerance)

    def close(self) -> None:
        if self.healer is not None:
            self.healer.stop()
        if self.link is not None:
            self.link.close()
            self.link = None
        self.transport.close()
