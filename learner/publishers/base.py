"""The interface every weight transport implements: pause -> push -> continue (-> probe).

Every learner rank calls `publish` (ZeRO-3 gathers parameters collectively);
only rank 0 talks to the generators. Bumping the buffer's version is the
training loop's job, after `publish` returns.

Generator restarts (`heal=True`): a push that fails on a generator (dead, or restarted
without the weight group) still finishes its collective part, then waits until every
generator answers again and delivers the weights once more (`_redeliver`). Between
pushes a watcher thread on rank 0 asks every generator for `/model_info` each
`heal_interval_s`; one that was unreachable and is back (seen on two checks in a row,
so the launcher has paused it first), or that reports another weight version than the
last push, gets the last pushed weights the same way, and is then continued.

Verified pushes (`verify`): before the first push rank 0 asks every generator once for its
`/weights_checker` fingerprints, to learn which dtype it serves each tensor in; each push then
fingerprints what it sends in that dtype (`areal_mem.weight_fingerprint`; the subclasses say
where: per bucket on the device, or from the checkpoint written), and after the push (and after
every re-delivery), while generation is still paused, every generator's fingerprints must equal
them: a difference, a tensor missing there or one it serves that was not pushed is a
`WeightMismatch` naming the generator and the tensors, never a silent success.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Awaitable, Dict, Iterable, List, Optional, Set, Tuple

import torch

from areal_mem.config.learner import PublishConfig, VerifyMode
from areal_mem.generation import GeneratorError, SamplingParams
from areal_mem.weight_fingerprint import fingerprint_items, served_dtype

from ..async_bridge import LoopThread
from ..batch import TrainRow, broadcast_rows
from ..generator_admin import GeneratorAdmin

log = logging.getLogger(__name__)


class ProbeMismatch(RuntimeError):
    """After a push the generator's log-probs differ from the learner's: the weights did not land."""


class WeightMismatch(RuntimeError):
    """After a push a generator serves other weights than the learner pushed (names the tensors)."""


# name -> {dtype the generators serve it in: fingerprint of the pushed tensor cast to it}
Expected = Dict[str, Dict[str, str]]


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


class WeightPublisher(ABC):
    def __init__(self, engine, client: Optional[GeneratorAdmin], cfg: PublishConfig):
        """`client`: the generators' admin client, used on rank 0 only (None: no generators)."""
        self.engine, self.client, self.cfg = engine, client, cfg
        self.probe_ids = list(range(3, 19))
        self.leader = engine.rank == 0
        self.io = LoopThread() if (self.leader and client is not None) else None
        self.pushed_version: Optional[int] = None  # rank 0: the version every generator holds
        self.broken = False  # rank 0: a generator failed or came back since the last delivery
        self.heals = 0  # deliveries repeated for restarted generators
        self._lock = threading.RLock()  # a push and the watcher never overlap
        self._stop = threading.Event()
        self._watcher: Optional[threading.Thread] = None
        # verified pushes (rank 0): name -> dtypes the generators serve it in (None: not asked yet),
        # the fingerprints of the last push, and the seconds this push spent on them and on the checks
        self.verify = cfg.verify != VerifyMode.off
        self.served: Optional[Dict[str, Set[torch.dtype]]] = None
        self.expected: Optional[Expected] = None
        self.fingerprint_s = self.check_s = 0.0
        self.verified = 0  # deliveries whose fingerprints every generator matched (pushes and re-deliveries)
        self.failure: Optional[WeightMismatch] = None  # found by the watcher; raised by the next push

    def setup(self) -> None:
        """Once before the first push: continue generators that a dead learner left paused
        mid-push, and start the watcher."""
        if self.io is None:
            return
        self._try(self.client.continue_generation(), "continue")
        if self.cfg.heal and self.cfg.heal_interval_s > 0 and self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="publisher-heal", daemon=True)
            self._watcher.start()

    @abstractmethod
    def _push(self, version: int, result: PushResult) -> None:
        """Move the current weights into the generators, stamped `version` (all ranks call).
        On rank 0, skip the delivery while `self.broken` and set it when a delivery fails."""

    def _redeliver(self) -> None:
        """Rank 0: deliver the last pushed weights again (all generators are up and paused).
        With `verify` on, `_pushed_fingerprints` must then know their fingerprints."""
        raise NotImplementedError(f"{type(self).__name__} cannot re-deliver weights")

    def _pushed_fingerprints(self) -> Optional[Expected]:
        """Rank 0: the fingerprints of the last pushed weights in the served dtypes (None: none known)."""
        return self.expected

    def publish(self, version: int) -> PushResult:
        with self._lock:
            if self.failure is not None:
                raise self.failure
            t0 = time.monotonic()
            result = PushResult(version, 0.0)
            if (
                self.io is not None
                and self.verify
                and self.served is None
                and not self._try(self._ask_served_dtypes(), "asking for weight fingerprints")
            ):
                self.broken = True  # a generator is unreachable: the push heals (and verifies) or fails
            self.expected, self.fingerprint_s, self.check_s = None, 0.0, 0.0
            tp = time.monotonic()
            if self.io is not None and not self._try(self.client.pause(self.cfg.pause_mode), "pause"):
                self.broken = True
            result.pause_s = time.monotonic() - tp
            try:
                t1 = time.monotonic()
                self._push(version, result)
                result.transfer_s = time.monotonic() - t1
                if self.io is not None and self.verify and not self.broken:
                    try:
                        self._check(version)
                    except GeneratorError as e:  # did not answer: heal (re-deliver and check) or fail
                        log.warning("weight publisher: checking push %d failed: %s", version, e)
                        self.broken = True
            finally:
                if self.io is not None and not self._try(self.client.continue_generation(), "continue"):
                    self.broken = True
            if self.io is not None and self.broken:
                if not self.cfg.heal:
                    raise RuntimeError(f"weight push {version} failed on a generator (learner.publish.heal is off)")
                self._recover(version)
                result.extra["healed"] = 1.0
            if self.io is not None:
                self.pushed_version = version
                if self.verify:
                    result.verify_s = self.fingerprint_s + self.check_s
        if self.cfg.probe_check:
            result.probe_max_diff = self.probe()
        result.seconds = time.monotonic() - t0
        return result

    # ---- verified pushes (rank 0) ----
    async def _ask_served_dtypes(self) -> None:
        """Learn the dtype each generator serves each tensor in, from one `/weights_checker` call.
        A generator that cannot report fingerprints (SGLang's checksums, which no learner can
        reproduce, or a 4xx: a server without the route) turns verify off under `auto` and is an
        error under `on`. Raises GeneratorError when a generator does not answer (5xx, down)."""
        try:
            answers = await self.client.weight_checksums()
        except GeneratorError as e:
            if not 400 <= e.status < 500:
                raise
            return self._not_comparable(f"{e}")
        served: Dict[str, Set[torch.dtype]] = {}
        for url, sums in answers.items():
            for name, fp in sums.items():
                try:
                    served.setdefault(name, set()).add(served_dtype(fp))
                except ValueError as e:
                    return self._not_comparable(
                        f"{url}/weights_checker does not report weight fingerprints the learner can reproduce "
                        f"({e}); SGLang hashes its own fused tensors (qkv_proj, gate_up_proj)"
                    )
        self.served = served

    def _not_comparable(self, why: str) -> None:
        if self.cfg.verify == VerifyMode.on:
            raise RuntimeError(f"learner.publish.verify=on: {why}; set it to auto or off")
        log.warning("weight publisher: pushes are not verified (learner.publish.verify=auto): %s", why)
        self.verify = False

    def _fingerprint(self, named: Iterable[Tuple[str, torch.Tensor]]) -> Expected:
        """The fingerprints of `named` in every dtype the generators serve each tensor in (its own
        dtype for a tensor they do not serve: the check then names it), one tensor at a time."""
        t0 = time.monotonic()
        out: Expected = {}
        items = ((n, t, d) for n, t in named for d in (self.served.get(n) or {t.dtype}))
        for name, fp in fingerprint_items(items):
            out.setdefault(name, {})[fp.partition(":")[0]] = fp
        self.fingerprint_s += time.monotonic() - t0
        return out

    def _check(self, version: int) -> None:
        """Every generator's fingerprints against the pushed ones (generation paused); the seconds
        the generators take to answer and the comparison count in `check_s`.
        Raises WeightMismatch naming the generator and the first differing, missing and extra tensors."""
        expected = self._pushed_fingerprints()  # its time counts in fingerprint_s
        t0 = time.monotonic()
        if expected is None:  # the generators' dtypes were unknown when these weights were pushed
            raise WeightMismatch(f"weight push {version}: no fingerprints of the pushed weights to verify against")
        for url, sums in self.io.run(self.client.weight_checksums()).items():
            differ = [n for n, fp in sums.items() if n in expected and expected[n].get(fp.partition(":")[0]) != fp]
            missing = [n for n in expected if n not in sums]
            extra = [n for n in sums if n not in expected]
            if differ or missing or extra:
                raise WeightMismatch(
                    f"generator {url} does not serve the weights of push {version}: "
                    + "; ".join(
                        f"{what} {len(names)} tensor(s): {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}"
                        for what, names in (("differ in", differ), ("missing there", missing), ("not pushed", extra))
                        if names
                    )
                )
        self.verified += 1
        self.check_s += time.monotonic() - t0

    # ---- generator restarts (rank 0) ----
    def _try(self, coro: Awaitable, what: str) -> bool:
        try:
            self.io.run(coro)
            return True
        except GeneratorError as e:
            log.warning("weight publisher: %s failed: %s", what, e)
            return False

    def _recover(self, version: int) -> None:
        """Wait until every generator answers, then pause, re-deliver, continue; retried until
        `restart_timeout_s` has passed (then the error names the generators)."""
        deadline = time.monotonic() + self.cfg.restart_timeout_s
        was_down = False
        while True:
            health = self.io.run(self.client.health())
            down = [u for u, ok in health.items() if not ok]
            if was_down and not down:  # just back: let its launcher pause it first
                was_down = False
                time.sleep(min(1.0, self.cfg.heal_interval_s or 1.0))
                continue
            was_down = bool(down)
            try:
                if down:
                    raise GeneratorError(f"generator(s) {down} not answering")
                self.io.run(self.client.pause(self.cfg.pause_mode))
                try:
                    if self.verify and self.served is None:
                        self.io.run(self._ask_served_dtypes())
                    self._redeliver()
                    if self.verify:
                        self._check(version)
                finally:
                    self.io.run(self.client.continue_generation())
                self.broken = False
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
                time.sleep(min(1.0, self.cfg.heal_interval_s or 1.0))

    def _watch(self) -> None:
        back_once = False  # a server came back: heal on the next check, after the launcher paused it
        while not self._stop.wait(self.cfg.heal_interval_s):
            with self._lock:
                try:
                    versions = set(self.io.run(self.client.weight_versions(), timeout=60).values())
                except (GeneratorError, TimeoutError) as e:
                    if not self.broken:
                        log.warning("weight publisher: a generator is unreachable (%s)", e)
                    self.broken, back_once = True, False
                    continue
                if self.pushed_version is not None and versions != {self.pushed_version}:
                    self.broken = True
                if not self.broken:  # all hold the last push: none may stay paused (a dead
                    self._try(self.client.continue_generation(), "continue")  # learner's pause)
                    continue
                if not back_once:
                    back_once = True
                    continue
                back_once = False
                try:
                    self._recover(self.pushed_version)
                except WeightMismatch as e:
                    log.error("%s", e)
                    self.failure = e  # the next push raises it
                    return
                except RuntimeError as e:
                    log.error("%s", e)

    def probe(self) -> float:
        """Sample a few tokens from a generator, score them here; the largest log-prob difference.

        Raises ProbeMismatch above the tolerance. Every rank scores (ZeRO-3 forwards are collective).
        """
        rows = None
        gen_logps: List[float] = []
        if self.io is not None:
            res = self.io.run(
                self.client.generate(
                    list(self.probe_ids),
                    SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0, sampling_seed=1234),
                )
            )
            n = len(res.output_ids)
            rows = [
                TrainRow(
                    list(self.probe_ids) + res.output_ids,
                    len(self.probe_ids),
                    [1] * n,
                    res.logprobs,
                    res.versions,
                    [0.0] * n,
                )
            ]
            gen_logps = res.logprobs
        rows = broadcast_rows(rows)
        mine = self.engine.logprobs(rows)[0]
        if not self.leader:
            return 0.0
        diff = max((abs(a - b) for a, b in zip(mine, gen_logps)), default=0.0)
        if diff > self.cfg.probe_tolerance:
            raise ProbeMismatch(
                f"generator log-probs differ from the learner's by {diff:.3g} (> {self.cfg.probe_tolerance}) after the push"
            )
        return diff

    def close(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            with self._lock:  # the watcher finishes what it is doing
                pass
            self._watcher.join(timeout=5)
            self._watcher = None
        if self.io is not None:
            self.io.run(self.client.close())
            self.io.close()
            self.io = None
