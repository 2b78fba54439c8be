"""The learner's process group: gloo on CPU, NCCL on GPU, and small collectives on it."""

from __future__ import annotations

import os
from typing import Dict, List

import torch
import torch.distributed as dist

from areal_mem.net import free_port


def init_distributed() -> None:
    """Join the launcher's group (env:// variables); alone, start a group of one on 127.0.0.1."""
    if dist.is_initialized():
        return
    import deepspeed

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ:
        deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False)
    else:  # not launched: a group of one; only LOCAL_RANK (which DeepSpeed reads) is set, so
        # child processes do not try to join this group
        os.environ.setdefault("LOCAL_RANK", "0")
        deepspeed.init_distributed(
            dist_backend=backend,
            auto_mpi_discovery=False,
            rank=0,
            world_size=1,
            init_method=f"tcp://127.0.0.1:{free_port()}",
        )
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))


def device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def all_reduce_sums(values: Dict[str, float]) -> Dict[str, float]:
    """Sum a dict of floats over ranks (same keys in the same order on every rank)."""
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device())
    if world_size() > 1:
        dist.all_reduce(t)
    return dict(zip(keys, t.tolist()))


def all_reduce_max(value: int) -> int:
    t = torch.tensor([value], dtype=torch.long, device=device())
    if world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def broadcast_floats(values: List[float], src: int = 0) -> List[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device())
    if world_size() > 1:
        dist.broadcast(t, src=src)
    return t.tolist()
