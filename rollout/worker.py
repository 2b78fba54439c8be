"""A rollout worker: one asyncio loop, many groups in flight, each written whole to the buffer.

For every group the worker first takes a slot from the buffer (AReaL's staleness
rule decides), runs the G episodes of one question concurrently through the
workflow, and puts the finished group in one call, which also frees the slot. A
group whose episodes fail on a broken service is abandoned (its slot released);
nothing partial ever reaches the buffer.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from areal_mem.trajectory import Group, Trajectory

from .tasks import TaskCursor
from .workflows.base import Workflow, WorkflowContext, run_episode

log = logging.getLogger(__name__)


@dataclass
class WorkerStats:
    groups_put: int = 0
    groups_duplicate: int = 0  # already accepted before (a retry after a restart)
    groups_failed: int = 0
    trajectories: int = 0
    reward_sum: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> Dict[str, Any]:
        n = max(1, self.trajectories)
        return {"groups_put": self.groups_put, "groups_duplicate": self.groups_duplicate,
                "groups_failed": self.groups_failed, "trajectories": self.trajectories,
                "mean_reward": self.reward_sum / n,
                "groups_per_s": self.groups_put / max(1e-9, time.monotonic() - self.started)}


class RolloutWorker:
    def __init__(self, workflow: Workflow, ctx: WorkflowContext, buffer: Any, cursor: TaskCursor,
                 group_size: int, max_in_flight: int, acquire_wait_s: float = 2.0) -> None:
        if group_size < 1 or max_in_flight < 1:
            raise ValueError("rollout.group_size and rollout.max_concurrent_groups must be >= 1")
        self.workflow, self.ctx, self.buffer, self.cursor = workflow, ctx, buffer, cursor
        self.group_size, self.max_in_flight = group_size, max_in_flight
        self.acquire_wait_s = acquire_wait_s
        self.stats = WorkerStats()

    async def run(self, max_groups: Optional[int] = None,
                  stop: Optional[asyncio.Event] = None) -> WorkerStats:
        """Keep up to `max_in_flight` groups running until `stop` is set or `max_groups` started."""
        stop = stop or asyncio.Event()
        in_flight: set = set()
        started = 0
        while not stop.is_set() and (max_groups is None or started < max_groups):
            if len(in_flight) >= self.max_in_flight:
                _, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                continue
            slot, version = await asyncio.to_thread(self.buffer.acquire_slot, self.acquire_wait_s)
            if not slot:
                continue  # the staleness bound says wait; ask again
            task, group_id = self.cursor.next()
            self.cursor.save()
            started += 1
            in_flight.add(asyncio.create_task(self._group(slot, version, task, group_id)))
        if in_flight:
            await asyncio.wait(in_flight)
        return self.stats

    async def _group(self, slot: str, version: int, task: Any, group_id: str) -> None:
        try:
            trajs: List[Trajectory] = await asyncio.gather(*(
                run_episode(self.workflow, task, self.ctx, f"{group_id}/{j}") for j in range(self.group_size)))
            for traj in trajs:
                traj.start_version = version
            stored = await asyncio.to_thread(self.buffer.put_group, Group(group_id, trajs), slot)
        except Exception as e:  # noqa: BLE001 - a broken service: drop this group, keep the worker
            self.stats.groups_failed += 1
            log.warning("group %s abandoned: %s: %s", group_id, type(e).__name__, e)
            await asyncio.to_thread(self._release, slot)
            return
        if stored:
            self.stats.groups_put += 1
            self.stats.trajectories += len(trajs)
            self.stats.reward_sum += sum(t.reward for t in trajs)
        else:
            self.stats.groups_duplicate += 1

    def _release(self, slot: str) -> None:
        try:
            self.buffer.release(slot)
        except Exception as e:  # noqa: BLE001 - the slot expires on the service side anyway
            log.warning("could not release slot: %s", e)
