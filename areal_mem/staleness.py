"""AReaL's staleness bound as one small object: rollout admission and the drop rule.

With B groups per training batch and bound eta, a new group may start only while
`accepted + running < (eta + version + 1) * B` and `running < max_running`, so
no accepted group was started more than eta weight pushes before it is trained;
eta = 0 is synchronous RL. Counts are in groups. The object holds no lock: its
owner (the buffer service) serialises calls.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StalenessManager:
    max_staleness: int  # eta
    batch_groups: int  # B
    max_running: int  # groups in flight over all rollout workers
    version: int = 0  # the learner's weight version (pushes so far)
    accepted: int = 0  # groups accepted and not dropped as stale
    running: int = 0  # admitted groups not yet accepted or released

    def __post_init__(self) -> None:
        if self.max_staleness < 0 or self.batch_groups < 1 or self.max_running < 1:
            raise ValueError(
                f"staleness bound needs max_staleness >= 0, batch_groups >= 1, max_running >= 1; "
                f"got {self.max_staleness}, {self.batch_groups}, {self.max_running}")

    def capacity(self) -> int:
        """How many more groups may start now (AReaL's formula; may be negative)."""
        bound = (self.max_staleness + self.version + 1) * self.batch_groups
        return min(self.max_running - self.running, bound - (self.accepted + self.running))

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
        return start_version < self.version - self.max_staleness
