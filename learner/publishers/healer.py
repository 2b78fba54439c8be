"""Generator restarts (`learner.publish.heal`): a generator that comes back gets the last push.

A push that fails on a generator (dead, or restarted without the weight group) still finishes
its collective part, then waits until every generator answers again and delivers the weights
once more (`recover`). Between pushes a watcher thread on rank 0 asks every generator for
`/model_info` each `heal_interval_s`; one that was unreachable and is back (seen on two checks
in a row, so the launcher has paused it first), or that reports another weight version than the
last push, gets the last pushed weights the same way, and is then continued.

The healer decides when to deliver again; the publisher's `redeliver(version)` does it (pause,
the transport's re-delivery, the verifier's check, continue). Only rank 0, which holds the link,
has a healer: a re-delivery moves a copy rank 0 kept, so the other ranks need not take part. Its
state (whether a generator failed since the last delivery, the version every generator holds, a
failure the watcher found) changes only through its methods; the publisher's lock, which it
shares, keeps a push and the watcher apart.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional

from areal_mem.config.learner import PublishConfig
from areal_mem.generation import GeneratorError

from .link import GeneratorLink
from .verifier import WeightMismatch

log = logging.getLogger(__name__)


class Healer:
    def __init__(
        self, link: GeneratorLink, cfg: PublishConfig, redeliver: Callable[[int], None], lock: threading.RLock
    ):
        self.link, self.cfg, self.redeliver, self.lock = link, cfg, redeliver, lock
        self._pushed: Optional[int] = None  # the version every generator holds
        self._broken = False  # a generator failed or came back since the last delivery
        self.heals = 0  # deliveries repeated for restarted generators
        self._failure: Optional[WeightMismatch] = None  # found by the watcher; raised by the next push
        self._stop = threading.Event()
        self._watcher: Optional[threading.Thread] = None

    @property
    def broken(self) -> bool:
        """A generator failed a step, or came back, since the last delivery."""
        return self._broken

    @property
    def pushed_version(self) -> Optional[int]:
        return self._pushed

    def mark_broken(self) -> None:
        """A step of this push failed on a generator: `settle` delivers again (or fails)."""
        self._broken = True

    def delivered(self, version: int) -> None:
        """Every generator now holds `version` (the watcher compares their versions with it)."""
        self._pushed = version

    def raise_failure(self) -> None:
        """A mismatch the watcher found since the last push, raised by the next push."""
        if self._failure is not None:
            raise self._failure

    def start(self) -> None:
        if self.cfg.heal and self.cfg.heal_interval_s > 0 and self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="publisher-heal", daemon=True)
            self._watcher.start()

    def settle(self, version: int) -> bool:
        """After a push: where a generator failed on the way, deliver `version` again once every
        generator answers (an error with heal off). True when it did."""
        if not self._broken:
            return False
        if not self.cfg.heal:
            raise RuntimeError(f"weight push {version} failed on a generator (learner.publish.heal is off)")
        self.recover(version)
        return True

    def _retry_s(self) -> float:
        return min(1.0, self.cfg.heal_interval_s or 1.0)

    def recover(self, version: int) -> None:
        """Wait until every generator answers, then re-deliver; retried until `restart_timeout_s`
        has passed (then the error names the generators). A WeightMismatch is raised at once."""
        deadline = time.monotonic() + self.cfg.restart_timeout_s
        was_down = False
        while True:
            health = self.link.run(self.link.client.health())
            down = [u for u, ok in health.items() if not ok]
            if was_down and not down:  # just back: let its launcher pause it first
                was_down = False
                time.sleep(self._retry_s())
                continue
            was_down = bool(down)
            try:
                if down:
                    raise GeneratorError(f"generator(s) {down} not answering")
                self.redeliver(version)
                self._broken = False
                self.heals += 1
                log.warning("weight publisher: generators %s hold the last pushed weights again", list(health))
                return
            except WeightMismatch:
                raise
            except (GeneratorError, RuntimeError) as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"weight publisher: generators not back within {self.cfg.restart_timeout_s:.0f} s: {e}"
                    ) from e
                time.sleep(self._retry_s())

    def _watch(self) -> None:
        back_once = False  # a server came back: heal on the next check, after the launcher paused it
        while not self._stop.wait(self.cfg.heal_interval_s):
            with self.lock:
                try:
                    versions = set(self.link.run(self.link.client.weight_versions(), timeout=60).values())
                except (GeneratorError, TimeoutError) as e:
                    if not self._broken:
                        log.warning("weight publisher: a generator is unreachable (%s)", e)
                    self._broken, back_once = True, False
                    continue
                if self._pushed is not None and versions != {self._pushed}:
                    self._broken = True
                if not self._broken:  # all hold the last push: none may stay paused (a dead
                    self.link.attempt(self.link.client.continue_generation(), "continue")  # learner's pause)
                    continue
                if not back_once:
                    back_once = True
                    continue
                back_once = False
                if self._pushed is None:  # nothing pushed yet: the first push delivers (and settles)
                    continue
                try:
                    self.recover(self._pushed)
                except WeightMismatch as e:
                    log.error("%s", e)
                    self._failure = e  # the next push raises it
                    return
                except RuntimeError as e:
                    log.error("%s", e)

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            with self.lock:  # the watcher finishes what it is doing
                pass
            self._watcher.join(timeout=5)
            self._watcher = None
