"""What a rollout worker needs from the replay buffer: a narrow port the rollout owns.

The worker takes slots (AReaL's admission rule), puts whole groups and releases what it did not
fill; it reads the learner's version to cancel groups the buffer would drop as stale. The base
layer's `areal_mem.buffer.BufferClient` satisfies it structurally; the composition layer injects
it (`areal_mem.app.commands.rollout`), and a test may pass anything with these methods.
"""

from __future__ import annotations

from typing import Protocol, Tuple

from areal_mem.buffer.stats import BufferStats
from areal_mem.trajectory import Group


class BufferPort(Protocol):
    def acquire_slot(self, wait_s: float = 0.0) -> Tuple[str, int]:
        """A slot id ("" when the staleness bound says wait) and the learner's version."""
        ...

    def release(self, slot: str) -> bool: ...

    def put_group(self, group: Group, slot: str = "") -> bool:
        """Store one whole group; False when its id was already accepted."""
        ...

    def stats(self) -> BufferStats: ...
