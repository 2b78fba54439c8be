"""Push weights through the file system: an HF safetensors checkpoint per version in the run
dir, loaded by every generator with `/update_weights_from_disk`; old versions removed.

With verify on, the learner's own weights are fingerprinted on their device after the export
(every rank reads them again: under ZeRO-3 that is a second gather per push), so a checkpoint
damaged between writing and loading is caught too. Only when the generators' dtypes were unknown
at the push (unreachable before it) is the checkpoint itself fingerprinted, on re-delivery."""

from __future__ import annotations

import glob
import os
import shutil
from typing import List, Optional, Tuple

from safetensors.torch import load_file

from areal_mem.config.learner import PublishConfig

from ..generator_admin import GeneratorAdmin
from .link import GeneratorLink
from .publisher import WeightPublisher
from .transport import Named, PushResult, Record, Transport


def pushed_versions(weights_dir: str) -> List[Tuple[int, str]]:
    """(version, path) of the complete pushes in `weights_dir` (`vNNNNNN/`), oldest first."""
    if not os.path.isdir(weights_dir):
        return []
    return sorted(
        (int(d[1:]), os.path.join(weights_dir, d))
        for d in os.listdir(weights_dir)
        if d[:1] == "v" and d[1:].isdigit() and os.path.exists(os.path.join(weights_dir, d, "config.json"))
    )


class DiskTransport(Transport):
    def __init__(self, engine, link: Optional[GeneratorLink], weights_dir: str, cfg: PublishConfig):
        super().__init__(engine, link, cfg)
        self.weights_dir = weights_dir
        self.last: Optional[Tuple[int, str]] = None  # (version, path) of the newest push

    def path(self, version: int) -> str:
        return os.path.join(self.weights_dir, f"v{version:06d}")

    def setup(self) -> None:
        """Nothing to join: each push names its checkpoint to the generators."""

    def push(self, version: int, result: PushResult, deliver: bool, record: Optional[Record]) -> bool:
        path = self.path(version)
        self.engine.export_hf(path)  # every rank: ZeRO-3 gathers; rank 0 writes
        if record is not None:  # every rank reads the weights again (a ZeRO-3 gather), rank 0 hashes
            record(self.engine.named_weights())
        if not self.leader:
            return True
        result.bytes = sum(
            os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".safetensors")
        )
        self.last = (version, os.path.abspath(path))
        delivered = True
        if self.link is not None and deliver:
            delivered = self.link.attempt(
                self.link.client.update_weights_from_disk(*self.last[::-1]), f"update_weights_from_disk v{version}"
            )
        self._clean()
        return delivered

    def pushed(self) -> Optional[Named]:
        if self.last is None:
            return None
        files = sorted(glob.glob(os.path.join(glob.escape(self.last[1]), "*.safetensors")))
        return ((n, t) for f in files for n, t in load_file(f).items())

    def redeliver(self) -> None:
        if self.last is not None:
            link = self.rank0_link()
            link.run(link.client.update_weights_from_disk(self.last[1], self.last[0]))

    def close(self) -> None:
        """Nothing held: the newest checkpoints stay for restarted generators (`pushed_versions`)."""

    def _clean(self) -> None:
        for _, old in pushed_versions(self.weights_dir)[: -max(1, self.cfg.keep_weights)]:
            shutil.rmtree(old, ignore_errors=True)


class DiskPublisher(WeightPublisher):
    """The publisher over `DiskTransport`."""

    transport: DiskTransport

    def __init__(self, engine, client: Optional[GeneratorAdmin], weights_dir: str, cfg: PublishConfig):
        link = GeneratorLink.of(engine, client)
        super().__init__(engine, link, cfg, DiskTransport(engine, link, weights_dir, cfg))

    def path(self, version: int) -> str:
        """Where push `version` is written (the launcher's restarts and the weights folders use it)."""
        return self.transport.path(version)
