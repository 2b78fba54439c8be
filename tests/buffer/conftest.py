"""Fixtures of the buffer tests: groups with float32-exact values and a live service."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from areal_mem.buffer.server.launch import BufferProcess
from areal_mem.trajectory import Context, Group, Trajectory


def make_group(
    group_id: str, n_traj: int = 3, n_ctx: int = 2, tokens: int = 40, start_version: int = 0, seed: int = 0
) -> Group:
    """A group whose floats are float32 already, so a round trip is exact."""
    rng = np.random.default_rng(seed)
    trajs = []
    for t in range(n_traj):
        contexts = []
        for _ in range(n_ctx):
            prompt = int(rng.integers(1, tokens))
            resp = tokens - prompt
            mask = rng.integers(0, 2, resp)
            contexts.append(
                Context(
                    input_ids=rng.integers(0, 50_000, tokens).tolist(),
                    prompt_len=prompt,
                    loss_mask=mask.tolist(),
                    behav_logp=np.where(mask, -rng.random(resp, dtype=np.float32), 0).astype(np.float32).tolist(),
                    versions=np.where(mask, start_version, -1).tolist(),
                )
            )
        trajs.append(
            Trajectory(
                traj_id=f"{group_id}/{t}",
                contexts=contexts,
                reward=float(np.float32(rng.random())),
                start_version=start_version,
                info={"answer": f"a{t}", "em": t % 2, "f1": 0.5},
            )
        )
    return Group(group_id=group_id, trajectories=trajs)


@pytest.fixture
def serve(tmp_path):
    """Start real `areal-mem buffer serve` processes on 127.0.0.1; all stopped at the end."""
    procs = []

    def start(run_dir=None, **kwargs) -> BufferProcess:
        proc = BufferProcess(str(run_dir or tmp_path / "run"), **kwargs)
        procs.append(proc)
        return proc

    yield start
    for p in procs:
        p.stop()


def unchecked_table(group: Group) -> pa.Table:
    """The group's rows as a hostile writer builds them: no writer-side check or filtering."""
    from areal_mem.buffer.schema import CONTEXT_SCHEMA

    rows = [
        dict(
            group_id=group.group_id,
            traj_id=t.traj_id,
            turn=i,
            is_final=i == len(t.contexts) - 1,
            input_ids=c.input_ids,
            prompt_len=c.prompt_len,
            loss_mask=c.loss_mask,
            behav_logp=c.behav_logp,
            versions=c.versions,
            reward=t.reward,
            start_version=t.start_version,
        )
        for t in group.trajectories
        for i, c in enumerate(t.contexts)
    ]
    return pa.Table.from_pylist(rows, schema=CONTEXT_SCHEMA)
