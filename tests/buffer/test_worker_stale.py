"""A rollout worker stops generating a group that the buffer would drop as stale and frees its
slot at once; without the bound it finishes the group, puts it, and the buffer drops it. Under
`oldest_first` a group's requests carry its priority. Against a real buffer service (eta 0, one
group per batch)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from areal_mem.data.task import Task
from areal_mem.generation import REQUEST_PRIORITY
from areal_mem.rollout.tasks import TaskCursor
from areal_mem.rollout.worker import PRIORITY_TOP, RolloutWorker
from areal_mem.trajectory import Context, Trajectory


class Gate:
    """Episodes that wait until `open` is set, counting the ones cancelled while waiting."""

    name = "gate"

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.started = self.cancelled = 0
        self.priorities = []  # what the episodes' generation requests would carry

    async def run(self, task, ctx, traj_id):
        self.started += 1
        self.priorities.append(REQUEST_PRIORITY.get())
        try:
            await self.open.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return Trajectory(traj_id, [Context([1, 2, 3], 2, [1], [-0.5], [0])], reward=1.0)


async def _until(predicate, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _scenario(buffer, learner, max_staleness):
    gate = Gate()
    cursor = TaskCursor([Task("q1", "Q?", ["a"]), Task("q2", "R?", ["b"])])
    worker = RolloutWorker(
        gate,
        SimpleNamespace(generator=None),
        buffer,
        cursor,
        group_size=2,
        max_in_flight=4,
        acquire_wait_s=0.1,
        max_staleness=max_staleness,
        oldest_first=max_staleness is not None,
    )
    stop = asyncio.Event()
    run = asyncio.create_task(worker.run(stop=stop))
    await _until(lambda: gate.started == 2, "the first group's episodes")
    await asyncio.to_thread(learner.set_version, 1)  # a push: a group started at version 0 is now stale
    if max_staleness is not None:
        await _until(lambda: gate.started == 4, "a second group in the freed slot")
    else:
        await asyncio.sleep(0.5)  # several slot requests: the first group keeps its slot
        assert gate.started == 2
    gate.open.set()
    await _until(lambda: worker.stats.groups_put == 1, "a group stored")
    stop.set()
    await asyncio.wait_for(run, 20)
    dropped = (await asyncio.to_thread(learner.set_version, 1))["dropped_stale"]
    return gate, worker.stats, dropped, await asyncio.to_thread(learner.stats)


@pytest.mark.parametrize("cancel", [True, False])
def test_a_group_the_buffer_would_drop_is_cancelled_and_its_slot_freed(serve, cancel):
    buf = serve(overrides=["buffer.max_staleness=0", "buffer.batch_groups=1", "buffer.max_running_groups=4"])
    with buf.client() as buffer, buf.client() as learner:
        gate, stats, dropped, after = asyncio.run(_scenario(buffer, learner, 0 if cancel else None))
    if cancel:
        # both episodes of the first group cancelled mid-generation, its slot freed without a put;
        # the group started in its place (at version 1) was trained-fresh and stored
        assert (gate.cancelled, stats.groups_cancelled_stale, stats.groups_put, dropped) == (2, 1, 1, 0)
        assert after.groups_put == 1 and after.pending_groups == 1
        # rollout.oldest_first: the group started at version 0 ranks above the one started at 1
        assert gate.priorities == [PRIORITY_TOP] * 2 + [PRIORITY_TOP - 1] * 2
    else:
        # generated to the end, then refused as stale at its put: the generator's work was wasted
        assert (gate.cancelled, stats.groups_cancelled_stale, stats.groups_failed, dropped) == (0, 0, 1, 0)
        assert (after.groups_put, after.dropped_stale, after.pending_groups) == (1, 1, 1)
        assert gate.priorities == [None] * 4  # a second group generated in the freed slot
    assert after.running == 0


def test_a_stopping_worker_cancels_its_groups_and_frees_their_slots(serve):
    buf = serve(overrides=["buffer.max_staleness=0", "buffer.batch_groups=2", "buffer.max_running_groups=4"])
    gate = Gate()  # never opened: the groups could only end by being cancelled

    async def scenario(buffer):
        worker = RolloutWorker(
            gate, SimpleNamespace(generator=None), buffer, TaskCursor([Task("q1", "Q?", ["a"])]), 2, 4, 0.1
        )
        stop = asyncio.Event()
        run = asyncio.create_task(worker.run(stop=stop))
        await _until(lambda: gate.started == 4, "two groups running")
        stop.set()
        return await asyncio.wait_for(run, 10)

    with buf.client() as buffer:
        stats = asyncio.run(scenario(buffer))
        after = buffer.stats()
    assert (gate.cancelled, stats.groups_put, stats.groups_failed) == (4, 0, 0)
    assert (after.running, after.groups_put) == (0, 0)
