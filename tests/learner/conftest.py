"""Helpers for the learner tests: run a script under torch.distributed.run on 127.0.0.1."""

import os
import subprocess
import sys

import pytest

from areal_mem.net import free_port

HERE = os.path.dirname(os.path.abspath(__file__))


def run_ranks(script: str, nproc: int, *args: str, timeout: float = 300) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.path.dirname(os.path.dirname(HERE)))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        os.path.join(HERE, script),
        *map(str, args),
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}")


@pytest.fixture
def ranks():
    return run_ranks
