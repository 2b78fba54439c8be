"""Push weights by torch.distributed broadcast: SGLang's handshake, HF-named tensors in buckets.

Rank 0 of the learner is rank 0 of a separate weight group whose other members
are the generator servers (areal_mem.weight_transport does the group and the
broadcast). Each bucket is announced with `/update_weights_from_distributed`
while rank 0 broadcasts its tensors in the announced order.
"""
from __future__ import annotations

import uuid

import torch

from areal_mem.net import free_port
from areal_mem.weight_transport import BucketMeta, WeightGroup, iter_buckets

from .base import PushResult, WeightPublisher


class DistributedPublisher(WeightPublisher):
    def __init__(self, engine, client, bucket_mb: float = 512.0, master_address: str = "127.0.0.1",
                 ranks_per_server: int = 1, **kwargs):
        super().__init__(engine, client, **kwargs)
        self.bucket_bytes = int(bucket_mb * 2 ** 20)
        self.master_address, self.ranks_per_server = master_address, ranks_per_server
        self.group_name = f"weights-{uuid.uuid4().hex[:8]}"
        self.backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.group = None

    def setup(self) -> None:
        if not self.leader or self.group is not None:
            return
        port = free_port(self.master_address)
        world = 1 + self.ranks_per_server * len(self.client.urls)
        fut = self.io.submit(self.client.init_weights_update_group(
            self.master_address, port, self.group_name, self.backend, self.ranks_per_server))
        self.group = WeightGroup.join(self.master_address, port, world, 0, self.group_name, self.backend)
        fut.result()

    def _push(self, version: int, result: PushResult) -> None:
        named = self.engine.named_weights()
        if not self.leader:
            for _ in named:  # take part in the ZeRO-3 gathers
                pass
            return
        self.setup()
        for n, bucket in enumerate(iter_buckets(named, self.bucket_bytes)):
            meta = BucketMeta.of(bucket)
            fut = self.io.submit(self.client.update_weights_from_distributed(
                meta.names, meta.dtypes, meta.shapes, self.group_name, version))
            self.group.broadcast_bucket(bucket)
            fut.result()
            result.bytes += sum(t.numel() * t.element_size() for _, t in bucket)
            result.extra["buckets"] = n + 1

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None
        super().close()
