"""`BufferStats`: the buffer's `stats` answer as a typed value, for every caller (rollout, learner, tools).

The service sends a JSON object; `from_wire` names the first missing or mistyped counter, so a
buffer of another version fails at the call that reads it, not later at a `KeyError`. Counters a
newer service adds are kept in `extra` rather than refused: stats are read, never acted upon by
field, except the ones typed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Mapping


@dataclass(frozen=True)
class BufferStats:
    # the admission rule (AReaL's staleness manager) and the learner's version
    version: int
    clock: int
    accepted: int
    running: int
    capacity: int
    max_staleness: int
    batch_groups: int
    max_running: int
    # what is held now
    pending_groups: int
    outstanding_batches: int
    outstanding_groups: int
    in_memory_groups: int
    # counters since the service started
    groups_put: int
    bytes_put: int
    groups_served: int
    bytes_served: int
    groups_acked: int
    dropped_stale: int
    slots_expired: int
    refused_invalid: int
    refused_duplicate: int
    recovered_groups: int
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, body: Mapping[str, Any]) -> BufferStats:
        """The stats answer `body`; a missing or non-integer counter raises ValueError naming it."""
        values: Dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "extra":
                continue
            v = body.get(f.name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"buffer stats: `{f.name}` must be an integer, got {v!r}")
            values[f.name] = v
        extra = {k: v for k, v in body.items() if k not in values}
        return cls(**values, extra=extra)
