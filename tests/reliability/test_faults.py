"""Faults during the debug recipe (real processes through the local launcher): the launcher
restarts what died, nothing stored is lost or trained twice, no partial group is stored, and the
run reaches its last step. Checked from metrics.jsonl, the buffer's ledger and files, the logs
and the process table (`benchmarks.harness.soak.account`, shared with `python -m benchmarks soak`)."""

import json
import os
import re
import time
from datetime import datetime, timedelta

import pytest

from benchmarks.harness.soak import account, run_rl, train_rows

from .faults_helpers import GROUP_SIZE, fault_cfg, run_dir_processes

pytestmark = pytest.mark.integration  # the debug recipe's real processes, started through run_rl


def held_slots(run_dir):
    try:
        with open(os.path.join(run_dir, "rollout", "worker0.slots.json"), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:  # before the worker's first slot
        return []


def at_steps(run_dir, plan):
    """An on_tick that injects plan[i][1] once the learner logged plan[i][0] steps (a rollout
    worker or generator only while groups are in flight: mid-episode)."""

    def tick(injector):
        if not plan or len(train_rows(run_dir)) < plan[0][0] or not settled(injector):
            return
        mid_episode = plan[0][1] in ("rollout", "generator")
        deadline = time.monotonic() + 10
        while mid_episode and not held_slots(run_dir) and time.monotonic() < deadline:
            time.sleep(0.01)  # groups are in flight for a moment only
        if not mid_episode or held_slots(run_dir):
            injector.inject(plan.pop(0)[1])

    return tick


def settled(injector):
    """The previous fault is over: every process runs, a restarted worker freed its slots."""
    launcher = injector.launcher
    if not all(c.alive() for c in launcher.children.values()):
        return False
    worker = launcher.children.get("rollout0")
    return not (worker and worker.restarts) or "slot(s) held by this worker" in worker.log_tail(100000)


def check_books(run_dir, steps):
    """Every step trained whole groups; versions never went back; nothing lost or trained twice."""
    rows = train_rows(run_dir)
    assert sorted({r["step"] for r in rows}) == list(range(1, steps + 1))
    books = account(str(run_dir), GROUP_SIZE, max_staleness=2)
    assert books["lost"] == 0 and books["trained_twice"] == 0 and books["partial_groups"] == 0, books
    # a stale token would show a generator that served before it held the learner's weights
    assert books["steps_staler_than_bound"] == 0, [r["staleness_max"] for r in train_rows(run_dir)]
    assert books["versions_monotone"], [r["version"] for r in rows]
    assert books["groups_trained"] >= 2 * steps  # every step acked its batch of 2 groups
    return rows, books


def log_text(run_dir, name):
    with open(os.path.join(run_dir, "logs", f"{name}.log"), encoding="utf-8", errors="replace") as f:
        return f.read()


def test_killed_worker_buffer_and_generator_come_back_and_nothing_is_lost(tmp_path):
    run_dir = tmp_path / "run"
    plan = [(2, "rollout"), (3, "buffer"), (5, "generator")]
    # enough steps that an idle machine is still training when the last fault is due
    injector = run_rl(fault_cfg(run_dir, "learner.steps=40"), at_steps(run_dir, plan))
    assert not plan and [f.kind for f in injector.faults] == ["rollout", "buffer", "generator"]
    assert injector.restarts() == {"rollout0": 1, "buffer": 1, "generator0": 1}
    rows, books = check_books(run_dir, 40)
    # the buffer came back at its address; the worker's puts and the learner's calls retried
    served = re.findall(r"serving (grpc://\S+)", log_text(run_dir, "buffer"))
    assert len(served) == 2 and served[0] == served[1]
    # the generator restarted paused and got the current weights from the learner (probe checked)
    assert "hold the last pushed weights again" in log_text(run_dir, "learner")
    # killed with groups in flight (checked at the kill); the new worker freed their slots
    rollout = log_text(run_dir, "rollout0")
    assert re.search(r"freed \d+ of \d+ slot", rollout)
    # episodes that met the dead generator (if any was generating then) ran again
    assert "generator failed" not in rollout or "running it again" in rollout
    assert not run_dir_processes(run_dir)


@pytest.mark.slow
def test_killed_learner_resumes_from_its_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    plan = [(5, "learner")]
    injector = run_rl(fault_cfg(run_dir, "learner.steps=8"), at_steps(run_dir, plan))
    assert not plan and injector.restarts() == {"learner": 1}
    rows, books = check_books(run_dir, 8)
    learner = log_text(run_dir, "learner")
    first, second = learner.split("[learner] resumed from step ")
    killed_after = max(int(n) for n in re.findall(r"\[train step (\d+)\]", first))
    resumed = int(second.split(",")[0])
    assert killed_after >= 5 and resumed == killed_after - killed_after % 2  # checkpoints: every 2
    assert [r["step"] for r in rows] == [*range(1, killed_after + 1), *range(resumed + 1, 9)]
    assert not run_dir_processes(run_dir)


@pytest.mark.slow
def test_a_stalled_retriever_gives_error_text_and_groups_flow_again(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join(
            filter(
                None,
                [
                    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    os.environ.get("PYTHONPATH", ""),
                ],
            )
        ),
    )
    run_dir = tmp_path / "run"
    marks = {}

    def tick(injector):
        if "resume" not in marks and len(train_rows(run_dir)) >= 2:
            injector.inject("retriever")
            marks["resume"] = datetime.now() + timedelta(seconds=10)

    injector = run_rl(
        fault_cfg(
            run_dir,
            "learner.steps=12",
            "rollout.tool_timeout_s=2",
            "rollout.workflow=tests.reliability.faults_helpers:SearchingWorkflow",
        ),
        tick,
        stall_s=10.0,
    )
    assert injector.restarts() == {}  # nothing died: the worker stayed up
    check_books(run_dir, 12)
    rollout = log_text(run_dir, "rollout0")
    assert "tool response error: Error: the wikipedia_search call timed out after 2 s." in rollout
    assert "abandoned" not in rollout and "running it again" not in rollout  # no episode crashed
    stored_after = [
        t
        for t in re.findall(r"^(\S+ \S+) rollout0 INFO group \S+ stored", rollout, re.M)
        if datetime.strptime(t, "%Y-%m-%d %H:%M:%S,%f") > marks["resume"]
    ]
    assert len(stored_after) >= 4  # groups flow again after SIGCONT
    assert not run_dir_processes(run_dir)
