"""The torch.distributed group that carries new weights from the learner to the generators.

Both ends use the rendezvous that SGLang's `/init_weights_update_group` uses (a TCPStore at
`tcp://master_address:master_port` whose master is rank 0, keys under `group_name`, a
process group of its own that never touches the default group the learner trains with), so
the learner can push into real SGLang servers and into the embedded server alike. Rank 0 is
the learner; it broadcasts each tensor of a bucket in the order the bucket's names were
announced; every generator rank receives them in that order (gloo on CPU, NCCL on GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from .dist_bind import gloo_on, master_store

NamedTensors = Sequence[Tuple[str, torch.Tensor]]


def parse_dtype(name: str) -> torch.dtype:
    """`"bfloat16"` or `"torch.bfloat16"` -> `torch.bfloat16`; anything else is a ValueError."""
    short = name[len("torch.") :] if name.startswith("torch.") else name
    dtype = getattr(torch, short, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype)[len("torch.") :]


@dataclass
class BucketMeta:
    """What `/update_weights_from_distributed` announces before the broadcast."""

    names: List[str]
    dtypes: List[str]
    shapes: List[List[int]]

    @classmethod
    def of(cls, named: NamedTensors) -> BucketMeta:
        return cls([n for n, _ in named], [dtype_name(t.dtype) for _, t in named], [list(t.shape) for _, t in named])


def iter_buckets(
    named: Iterable[Tuple[str, torch.Tensor]], bucket_bytes: int
) -> Iterator[List[Tuple[str, torch.Tensor]]]:
    """Group tensors, in order, into buckets of at most `bucket_bytes` (a larger tensor goes alone)."""
    bucket: List[Tuple[str, torch.Tensor]] = []
    size = 0
    for name, t in named:
        nbytes = t.numel() * t.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, t))
        size += nbytes
    if bucket:
        yield bucket


class WeightGroup:
    """One member of a weight-update group; `join` blocks until all `world_size` ranks joined."""

    def __init__(self, pg, rank: int, world_size: int, group_name: str, backend: str):
        self.pg, self.rank, self.world_size = pg, rank, world_size
        self.group_name, self.backend = group_name, backend

    @classmethod
    def join(
        cls,
        master_address: str,
        master_port: int,
        world_size: int,
        rank: int,
        group_name: str = "weights",
        backend: str = "gloo",
        timeout_s: float = 600.0,
    ) -> WeightGroup:
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be 'gloo' or 'nccl', not {backend!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world_size {world_size}")
        timeout = timedelta(seconds=timeout_s)
        if rank == 0:
            # Rank 0 serves the store itself (a tcp:// rendezvous would, under torchrun, become a
            # client of the launcher's store and no one would serve the weight group's); it does
            # not wait for the workers' registration: the group's own set-up waits for them.
            # It listens on master_address only (torch's own store listens on every interface).
            store: dist.Store = master_store(master_address, master_port, world_size, timeout, wait_for_workers=False)
        else:
            # A generator rank joins exactly as SGLang's `init_custom_process_group` does: torch's
            # tcp:// rendezvous, whose client registers as a worker, so a trainer whose store
            # waits for its workers (torch's default, used by SGLang-style trainers) is released.
            url = f"tcp://{f'[{master_address}]' if ':' in master_address else master_address}:{master_port}"
            store, _, _ = next(c10d.rendezvous(url, rank, world_size, timeout=timeout))
            store.set_timeout(timeout)
        store = c10d.PrefixStore(group_name, store)
        with gloo_on(master_address):  # a local master address: gloo binds its interface only
            pg, _ = c10d._new_process_group_helper(
                world_size,
                rank,
                [],
                c10d.Backend(backend),
                store,
                group_name=group_name,  # type: ignore[arg-type]  # torch types it as GroupName, a NewType of str
                backend_options=None,
                timeout=timeout,
            )
        c10d._world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
        return cls(pg, rank, world_size, group_name, backend)

    def broadcast_bucket(self, named: NamedTensors, meanwhile: Optional[Callable[[], None]] = None) -> None:
        """Rank 0: send each tensor, in order (contiguous copies; on the group's device).
        `meanwhile()` runs on this thread while they are on the wire (gloo's threads or NCCL's
        stream move them): the publisher fingerprints the bucket there, read-only."""
        if self.rank != 0:
            raise RuntimeError("only rank 0 broadcasts weights")
        works = [dist.broadcast(t.detach().contiguous(), src=0, group=self.pg, async_op=True) for _, t in named]
        try:
            if meanwhile is not None:
                meanwhile()
        finally:
            for w in works:
                w.wait()

    def receive_bucket(self, meta: BucketMeta, device: str | torch.device = "cpu") -> List[Tuple[str, torch.Tensor]]:
        """Rank > 0: receive the announced tensors, in order."""
        out = [
            (n, torch.empty(tuple(s), dtype=parse_dtype(d), device=device))
            for n, d, s in zip(meta.names, meta.dtypes, meta.shapes)
        ]
        works = [dist.broadcast(t, src=0, group=self.pg, async_op=True) for _, t in out]
        for w in works:
            w.wait()
        return out

    def close(self) -> None:
        if self.pg is not None:
            dist.destroy_process_group(self.pg)
            self.pg = None
