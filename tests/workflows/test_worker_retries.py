"""The rollout worker runs a failed group again (a service restarting), but not one whose tool
cannot answer as configured (a replay miss): that would fail the same way every time."""

import asyncio
from types import SimpleNamespace

import pytest

from areal_mem.rollout.tools.base import ToolUnavailable
from areal_mem.rollout.worker import RolloutWorker
from areal_mem.trajectory import Trajectory


class Flaky:
    """A workflow whose episodes raise `error` the first `fails` times they run."""

    name = "flaky"

    def __init__(self, error: Exception, fails: int) -> None:
        self.error, self.fails, self.runs = error, fails, 0

    async def run(self, task, ctx, traj_id):
        self.runs += 1
        if self.runs <= self.fails:
            raise self.error
        return Trajectory(traj_id, [])


def _worker(workflow):
    ctx = SimpleNamespace(generator=None)  # run_episode asks the generator to forget the episode
    return RolloutWorker(workflow, ctx, buffer=None, cursor=None, group_size=1, max_in_flight=1, retry_wait_s=0.0)


def test_a_failing_service_is_retried_and_a_tool_that_cannot_answer_is_not():
    flaky = Flaky(ConnectionError("generator restarting"), fails=2)
    worker = _worker(flaky)
    [traj] = asyncio.run(worker._episodes("task", "g1"))
    assert traj.traj_id == "g1/0" and flaky.runs == 3 and worker.stats.groups_retried == 2
    miss = Flaky(ToolUnavailable("replay: no recorded answer for 'x'"), fails=1)
    worker = _worker(miss)
    with pytest.raises(ToolUnavailable, match="no recorded answer"):
        asyncio.run(worker._episodes("task", "g2"))
    assert miss.runs == 1 and worker.stats.groups_retried == 0
