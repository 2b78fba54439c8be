"""Push weights by torch.distributed broadcast: SGLang's handshake, HF-named tensors in buckets.

Rank 0 of the learner is rank 0 of a separate weight group whose other members
are the generator servers (areal_mem.weight_transport does the group and the
broadcast). Each bucket is announced with `/update_weights_from_distributed`
while rank 0 broadcasts its tensors in the announced order. With verify on, each bucket
is fingerprinted on the device while its broadcast is on the wire (gloo's threads or NCCL's
stream carry it; a ZeRO-3 tensor is gathered only for its bucket, so it is never read twice):
the learner's half of the verification overlaps the transfer instead of adding to it.
With heal on, rank 0 keeps a host copy of the last push, which a restarted generator gets.
"""

from __future__ import annotations

import logging
import uuid
from typing import List, Optional, Tuple

import torch

from areal_mem.config.learner import PublishConfig
from areal_mem.generation import GeneratorError
from areal_mem.net import free_port
from areal_mem.weight_transport import BucketMeta, WeightGroup, iter_buckets

from ..generator_admin import GeneratorAdmin
from .link import GeneratorLink
from .publisher import WeightPublisher
from .transport import Named, PushResult, Record, Transport

log = logging.getLogger(__name__)


class DistributedTransport(Transport):
    def __init__(self, engine, link: Optional[GeneratorLink], cfg: PublishConfig):
        super().__init__(engine, link, cfg)
        self.bucket_bytes = int(cfg.bucket_mb * 2**20)
        self.group_name = f"weights-{uuid.uuid4().hex[:8]}"
        self.backend = "nccl" if torch.cuda.is_available() else "gloo"
        self.group: Optional[WeightGroup] = None
        # rank 0, with heal on: (version, buckets on the host) of the last push, to push again
        self.copy: Optional[Tuple[int, List[List[Tuple[str, torch.Tensor]]]]] = None

    def setup(self) -> None:
        if self.group is None:
            self._join()

    def _join(self, timeout_s: float = 600.0) -> None:
        link = self.rank0_link()
        down = [u for u, ok in link.run(link.client.health()).items() if not ok]
        if down:  # the join would wait for them until its timeout
            raise GeneratorError(f"cannot form the weight group: generator(s) {down} not answering")
        port = free_port(self.cfg.master_address)
        world = 1 + self.cfg.ranks_per_server * len(link.client.urls)
        fut = link.submit(
            link.client.init_weights_update_group(
                self.cfg.master_address, port, self.group_name, self.backend, self.cfg.ranks_per_server
            )
        )
        self.group = WeightGroup.join(
            self.cfg.master_address, port, world, 0, self.group_name, self.backend, timeout_s=timeout_s
        )
        fut.result()

    def push(self, version: int, result: PushResult, deliver: bool, record: Optional[Record]) -> bool:
        named = self.engine.named_weights()
        if self.link is None:
            for _ in named:  # take part in the ZeRO-3 gathers
                pass
            return True
        failed = False
        if deliver and self.group is None:
            try:
                self._join()
            except RuntimeError as e:
                log.warning("weight group: %s", e)
                failed = True
        copy = []
        for n, bucket in enumerate(iter_buckets(named, self.bucket_bytes)):
            if self.cfg.heal:  # on the host: a restarted generator gets exactly these weights
                copy.append([(name, t.detach().to("cpu", copy=True)) for name, t in bucket])
            pending = [bucket] if record is not None else []

            def fingerprint() -> None:  # while the bucket is on the wire (or after a failed send)
                while pending and record is not None:
                    record(pending.pop())

            if deliver and not failed:
                try:
                    self._send(bucket, version, fingerprint)
                except RuntimeError as e:  # GeneratorError, or the group lost a member
                    log.warning("weight push %d failed: %s", version, str(e).splitlines()[0])
                    failed = True
            fingerprint()
            result.bytes += sum(t.numel() * t.element_size() for _, t in bucket)
            result.extra["buckets"] = n + 1
        if self.cfg.heal:
            self.copy = (version, copy)
        return not failed

    def _send(self, bucket, version: int, meanwhile=None) -> None:
        """Announce and broadcast one bucket; `meanwhile()` runs while its tensors are on the wire."""
        meta, link, group = BucketMeta.of(bucket), self.rank0_link(), self.group
        if group is None:
            raise RuntimeError("weight push: no weight group joined")
        fut = link.submit(
            link.client.update_weights_from_distributed(meta.names, meta.dtypes, meta.shapes, self.group_name, version)
        )
        try:
            group.broadcast_bucket(bucket, meanwhile)
        except BaseException:
            fut.cancel()
            raise
        fut.result()

    def pushed(self) -> Optional[Named]:
        """The host copy (kept with heal on)."""
        return None if self.copy is None else (t for bucket in self.copy[1] for t in bucket)

    def redeliver(self) -> None:
        """A new group with every generator (a restarted one lost the old group), then the copy."""
        if self.group is not None:
            try:
                self.group.close()
            except RuntimeError as e:
                log.warning("closing the old weight group: %s", e)
            self.group = None
        self.group_name = f"weights-{uuid.uuid4().hex[:8]}"
        self._join(timeout_s=min(600.0, self.cfg.restart_timeout_s))
        if self.copy is None:
            return
        version, buckets = self.copy
        device = "cuda" if self.backend == "nccl" else "cpu"
        for bucket in buckets:
            self._send([(n, t.to(device)) for n, t in bucket], version)

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None


class DistributedPublisher(WeightPublisher):
    """The publisher over `DistributedTransport`."""

    def __init__(self, engine, client: Optional[GeneratorAdmin], cfg: PublishConfig):
        link = GeneratorLink.of(engine, client)
        super().__init__(engine, link, cfg, DistributedTransport(engine, link, cfg))
