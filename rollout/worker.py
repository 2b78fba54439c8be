"""A rollout worker: one asyncio loop, many groups in flight, each written whole to the buffer.

For every group the worker first takes a slot from the buffer (AReaL's staleness
rule decides), runs the G episodes of one question concurrently through the
workflow, and puts the finished group in one call, which also frees the slot. A
group whose episodes fail on a broken service (a generator restarting) is run again
from the start after a wait, at most `group_retries` times, then abandoned (its slot
released); nothing partial ever reaches the buffer. The slots it holds are kept in
`slots_path`, so a worker restarted after a crash frees its predecessor's slots at
once (else they would block admission until the buffer's `slot_ttl_s`). Asked to stop
(SIGTERM), it cancels the groups in flight and releases their slots: at the end of a run the
services they need stop beside it, and finishing them only delayed the exit by the launcher's
grace period (about 20 s per run). With `max_groups` it lets the last ones finish.

A group still generating when the learner's version passes its start version plus the
staleness bound would be dropped by the buffer on arrival: every token still to come is
wasted generator time. Given `max_staleness`, the worker cancels such a group as soon as
a slot request tells it the new version (its requests are aborted as their connections
close) and releases its slot. With `oldest_first`, a group's generation requests carry SGLang's
`priority`, higher for groups started earlier: a generator whose batch is full admits them
first, so fewer groups outlive the bound.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from areal_mem.generation import REQUEST_PRIORITY
from areal_mem.staleness import is_stale
from areal_mem.trajectory import Group, Trajectory

from .buffer_port import BufferPort
from .tasks import TaskCursor
from .tools.base import ToolUnavailable
from .workflows.base import Workflow, WorkflowContext, run_episode

log = logging.getLogger(__name__)

# Rollout priorities sit above SGLang's default 0 and evaluation's `eval.priority` (-1).
PRIORITY_TOP = 2**30


def group_priority(start_version: int) -> int:
    """The priority of a group's requests under `oldest_first`: the earlier it started, the higher."""
    return PRIORITY_TOP - start_version


@dataclass
class WorkerStats:
    groups_put: int = 0
    groups_duplicate: int = 0  # already accepted before (a retry after a restart)
    groups_failed: int = 0
    groups_retried: int = 0  # runs of a group started again after its episodes failed
    groups_cancelled_stale: int = 0  # stopped mid-generation: the buffer would have dropped them
    trajectories: int = 0
    reward_sum: float = 0.0
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> Dict[str, Any]:
        n = max(1, self.trajectories)
        return {
            "groups_put": self.groups_put,
            "groups_duplicate": self.groups_duplicate,
            "groups_failed": self.groups_failed,
            "groups_retried": self.groups_retried,
            "groups_cancelled_stale": self.groups_cancelled_stale,
            "trajectories": self.trajectories,
            "mean_reward": self.reward_sum / n,
            "groups_per_s": self.groups_put / max(1e-9, time.monotonic() - self.started),
        }


class RolloutWorker:
    def __init__(
        self,
        workflow: Workflow,
        ctx: WorkflowContext,
        buffer: BufferPort,
        cursor: TaskCursor,
        group_size: int,
        max_in_flight: int,
        acquire_wait_s: float = 2.0,
        group_retries: int = 3,
        retry_wait_s: float = 3.0,
        slots_path: str = "",
        max_staleness: Optional[int] = None,
        oldest_first: bool = False,
    ) -> None:
        """`max_staleness`: the buffer's bound eta, to cancel groups it would drop; None: never.
        `oldest_first`: requests carry `group_priority` of their group's start version."""
        if group_size < 1 or max_in_flight < 1:
            raise ValueError("rollout.group_size and rollout.max_concurrent_groups must be >= 1")
        self.workflow, self.ctx, self.buffer, self.cursor = workflow, ctx, buffer, cursor
        self.group_size, self.max_in_flight = group_size, max_in_flight
        self.acquire_wait_s = acquire_wait_s
        self.group_retries, self.retry_wait_s = group_retries, retry_wait_s  # waits 3, 6, 12 s
        self.slots_path = slots_path
        self._held: set = set()  # slots acquired and not yet put or released
        self.max_staleness, self.oldest_first = max_staleness, oldest_first
        # group id -> (episodes, start version), while they run; `_cancel_stale` takes out what it cancels
        self._generating: Dict[str, Tuple[asyncio.Future, int]] = {}
        self.stats = WorkerStats()

    async def run(self, max_groups: Optional[int] = None, stop: Optional[asyncio.Event] = None) -> WorkerStats:
        """Keep up to `max_in_flight` groups running until `stop` is set or `max_groups` started."""
        stop = stop or asyncio.Event()
        in_flight: set = set()
        started = 0
        await asyncio.to_thread(self._release_predecessors)
        while not stop.is_set() and (max_groups is None or started < max_groups):
            if len(in_flight) >= self.max_in_flight:
                timeout = None if self.max_staleness is None else self.acquire_wait_s
                _, in_flight = await asyncio.wait(in_flight, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if len(in_flight) >= self.max_in_flight and timeout is not None:  # still full: learn the version
                    self._cancel_stale((await asyncio.to_thread(self.buffer.stats)).version)
                continue
            slot, version = await asyncio.to_thread(self.buffer.acquire_slot, self.acquire_wait_s)
            self._cancel_stale(version)
            if not slot:
                continue  # the staleness bound says wait; ask again
            self._hold(slot, True)
            task, group_id = self.cursor.next()
            self.cursor.save()
            started += 1
            in_flight.add(asyncio.create_task(self._group(slot, version, task, group_id)))
        if in_flight:
            if stop.is_set():  # stopping: cancel what is in flight, it would outlive the services it needs
                for group in in_flight:
                    group.cancel()
            await asyncio.wait(in_flight)
        return self.stats

    async def _group(self, slot: str, version: int, task: Any, group_id: str) -> None:
        if self.oldest_first:  # this group's task context only: its episodes inherit it
            REQUEST_PRIORITY.set(group_priority(version))
        try:
            trajs = await self._unless_stale(group_id, version, self._episodes(task, group_id))
            if trajs is None:  # the buffer would drop it: stop spending the generator on it
                self.stats.groups_cancelled_stale += 1
                log.info("group %s cancelled: started at version %d, now too stale to train on", group_id, version)
                await asyncio.to_thread(self._release, slot)
                self._hold(slot, False)
                return
            for traj in trajs:
                traj.start_version = version
            stored = await asyncio.to_thread(self.buffer.put_group, Group(group_id, trajs), slot)
        except asyncio.CancelledError:  # the worker is stopping: give the slot back, put nothing
            await asyncio.to_thread(self._release, slot)
            self._hold(slot, False)
            raise
        except Exception as e:  # noqa: BLE001 - a broken service: drop this group, keep the worker
            self.stats.groups_failed += 1
            log.warning("group %s abandoned: %s: %s", group_id, type(e).__name__, e)
            await asyncio.to_thread(self._release, slot)
            self._hold(slot, False)
            return
        self._hold(slot, False)  # the put freed it
        if stored:
            log.info("group %s stored: %d trajectories", group_id, len(trajs))  # soak reports count these
            self.stats.groups_put += 1
            self.stats.trajectories += len(trajs)
            self.stats.reward_sum += sum(t.reward for t in trajs)
        else:
            self.stats.groups_duplicate += 1

    def _cancel_stale(self, version: int) -> None:
        """Cancel the episodes of every group that `version` makes too stale to be trained on."""
        if self.max_staleness is None:
            return
        for group_id, (episodes, start) in list(self._generating.items()):
            if is_stale(start, version, self.max_staleness) and episodes.cancel():
                del self._generating[group_id]

    async def _unless_stale(self, group_id: str, version: int, work) -> Optional[List[Trajectory]]:
        """The trajectories of `work`, or None if `_cancel_stale` cancelled it first."""
        episodes = asyncio.ensure_future(work)
        self._generating[group_id] = (episodes, version)
        try:
            return await episodes
        except asyncio.CancelledError:
            if group_id in self._generating:  # not `_cancel_stale`'s doing: the worker itself is stopping
                raise
            return None
        finally:
            self._generating.pop(group_id, None)

    async def _episodes(self, task: Any, group_id: str) -> List[Trajectory]:
        """The group's G episodes, all run again when one fails (a service restarting)."""
        attempt = 0
        while True:
            try:
                return await asyncio.gather(
                    *(run_episode(self.workflow, task, self.ctx, f"{group_id}/{j}") for j in range(self.group_size))
                )
            except Exception as e:  # noqa: BLE001 - retried, then abandoned by the caller
                if attempt == self.group_retries or isinstance(e, ToolUnavailable):  # a replay miss stays one
                    raise
                wait = self.retry_wait_s * 2**attempt
                attempt += 1
                self.stats.groups_retried += 1
                log.warning(
                    "group %s: %s: %s; running it again in %.0f s", group_id, type(e).__name__, str(e)[:200], wait
                )
                await asyncio.sleep(wait)

    def _hold(self, slot: str, held: bool) -> None:
        (self._held.add if held else self._held.discard)(slot)
        if self.slots_path:
            os.makedirs(os.path.dirname(self.slots_path) or ".", exist_ok=True)
            with open(self.slots_path + ".tmp", "w", encoding="utf-8") as f:
                json.dump(sorted(self._held), f)
            os.replace(self.slots_path + ".tmp", self.slots_path)

    def _release_predecessors(self) -> None:
        """Free the slots a crashed predecessor of this worker still held."""
        if not self.slots_path or not os.path.exists(self.slots_path):
            return
        with open(self.slots_path, encoding="utf-8") as f:
            slots = json.load(f)
        freed = sum(1 for slot in slots if self._release(slot))
        log.info("freed %d of %d slot(s) held by this worker before a restart", freed, len(slots))
        self._hold("", False)

    def _release(self, slot: str) -> bool:
        try:
            return self.buffer.release(slot)
        except Exception as e:  # noqa: BLE001 - the slot expires on the service side anyway
            log.warning("could not release slot: %s", e)
            return False
