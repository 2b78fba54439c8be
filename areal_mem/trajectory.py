"""The messages a workflow produces: contexts, trajectories, groups.

One `Context` becomes one context row of the replay buffer (docs/architecture.md, "The context row"): the
prompt tokens then the response tokens exactly as generated, with per-response-
token loss mask, behaviour log-prob and policy version. The buffer's Arrow
schema converts to and from these objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List


@dataclass
class Context:
    input_ids: List[int]  # prompt then response tokens, never re-tokenised
    prompt_len: int
    loss_mask: List[int]  # per response token: 1 generated, 0 injected
    behav_logp: List[float]  # per response token, 0.0 where masked
    versions: List[int]  # per response token, -1 where injected

    def __post_init__(self) -> None:
        n = len(self.input_ids) - self.prompt_len
        if n < 0 or not (len(self.loss_mask) == len(self.behav_logp) == len(self.versions) == n):
            raise ValueError(
                f"inconsistent context: {len(self.input_ids)} ids, prompt_len {self.prompt_len}, "
                f"loss_mask {len(self.loss_mask)}, behav_logp {len(self.behav_logp)}, "
                f"versions {len(self.versions)} (each must equal ids - prompt_len = {n})"
            )

    @property
    def response_len(self) -> int:
        return len(self.input_ids) - self.prompt_len


@dataclass
class Trajectory:
    traj_id: str
    contexts: List[Context]
    reward: float = 0.0
    start_version: int = 0
    # Flat scalars (answer, em, f1, num_turns, timings...) stored as extra columns.
    info: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Group:
    """All G trajectories of one question: the unit the buffer accepts whole or not at all."""

    group_id: str
    trajectories: List[Trajectory]
