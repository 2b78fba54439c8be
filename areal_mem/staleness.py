"""AReaL's staleness bound as one small object: rollout admission and the drop rule.

With B groups per training batch and bound eta, a new group may start only while
`accepted + running < (eta + clock + 1) * B` and `running < max_running`, so
no accepted group was started more than eta weight pushes before it is trained;
eta = 0 is synchronous RL. Counts are in groups. The object holds no lock: its
owner (the buffer service) serialises calls.

AReaL's formula uses the version as its clock, which assumes one push per trained
batch. A restarted learner pushes its restored weights under a fresh version
without training a batch; counted as a batch, every restart would let rollouts
run one batch further ahead and those groups would all be dropped as stale. So
the clock is set at each version change to `min(version, trained_batches)`: the
version, except that pushes without a trained batch do not advance it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class StalenessManager:
    max_staleness: int  # eta
    batch_groups: int  # B
    max_running: int  # groups in flight over all rollout workers
    version: int = 0  # the learner's weight version (pushes so far)
    accepted: int = 0  # groups accepted and not dropped as stale
    running: int = 0  # admitted groups not yet accepted or released
    trained_batches: int = 0  # batches the learner acked
    clock: Optional[int] = None  # the admission clock (module docstring); None: the version

    def __post_init__(self) -> None:
        if self.max_staleness < 0 or self.batch_groups < 1 or self.max_running < 1:
            raise ValueError(
                f"staleness bound needs max_staleness >= 0, batch_groups >= 1, max_running >= 1; "
                f"got {self.max_staleness}, {self.batch_groups}, {self.max_running}"
            )
        if self.clock is None:
            self.clock = self.version

    def capacity(self) -> int:
        """How many more groups may start now (AReaL's formula; may be negative)."""
        assert self.clock is not None  # set in __post_init__
        bound = (self.max_staleness + self.clock + 1) * self.batch_groups
        return min(self.max_running - self.running, bound - (self.accepted + self.running))

    def set_version(self, version: int) -> None:
        """The learner pushed `version`; the clock advances by the batches trained since."""
        self.version = version
        assert self.clock is not None  # set in __post_init__
        self.clock = max(self.clock, min(version, self.trained_batches))

    def on_trained(self) -> None:
        """The learner acked a batch (the clock moves at the next version)."""
        self.trained_batches += 1

    def try_acquire(self) -> bool:
        if self.capacity() <= 0:
            return False
        self.running += 1
        return True

    def release(self) -> None:
        """A started group ended without being accepted (failed, abandoned)."""
        self.running = max(0, self.running - 1)

    def on_accepted(self, held_slot: bool) -> None:
        """A group was stored; `held_slot` when it came with an acquired slot."""
        self.accepted += 1
        if held_slot:
            self.release()

    def on_dropped(self, n: int = 1) -> None:
        """Dropped groups no longer count as accepted, so the learner cannot starve."""
        self.accepted -= n

    def is_stale(self, start_version: int) -> bool:
        """The drop rule: a group started before `version - eta` is never trained on."""
        return is_stale(start_version, self.version, self.max_staleness)


def is_stale(start_version: int, version: int, max_staleness: int) -> bool:
    """The drop rule on its own, for whoever learns the version: the buffer drops such a group,
    and a rollout worker stops generating it (its tokens could never be trained on)."""
    return start_version < version - max_staleness
