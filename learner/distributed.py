"""The learner's process group: gloo on CPU, NCCL on GPU, and small collectives on it."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Dict, List

import torch
import torch.distributed as dist

from areal_mem.dist_bind import gloo_on, master_store
from areal_mem.net import free_port


def init_distributed() -> None:
    """Join the launcher's group (env:// variables); alone, start a group of one on 127.0.0.1."""
    if dist.is_initialized():
        return
    import deepspeed

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    init_group(backend)
    deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False)  # takes the group as it is
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))


def init_group(backend: str) -> None:
    """torch's default group, bound to the configured address only (`MASTER_ADDR`, or 127.0.0.1
    alone): rank 0's store listens there rather than on every interface, and gloo binds the
    interface that holds it when it is local (areal_mem/dist_bind.py)."""
    if "RANK" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"])
    else:  # not launched: a group of one; only LOCAL_RANK (which DeepSpeed reads) is set, so
        # child processes do not try to join this group
        os.environ.setdefault("LOCAL_RANK", "0")
        rank, world, host, port = 0, 1, "127.0.0.1", free_port()
    timeout = timedelta(minutes=30)  # torch's default for a process group
    if rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":  # torchrun's agent serves one
        store = master_store(host, port, world, timeout, wait_for_workers=True)
    else:
        store = dist.TCPStore(host, port, world, is_master=False, timeout=timeout)
    with gloo_on(host):
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


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
