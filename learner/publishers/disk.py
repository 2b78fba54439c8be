"""Push weights through the file system: an HF safetensors checkpoint per version in the run
dir, loaded by every generator with `/update_weights_from_disk`; old versions removed.

With verify on, the learner's own weights are fingerprinted on their device after the export
(every rank iterates them again: under ZeRO-3 that is a second gather per push), so a checkpoint
damaged between writing and loading is caught too. Only when the generators' dtypes were unknown
at the push (unreachable before it) is the checkpoint itself fingerprinted, on re-delivery."""

from __future__ import annotations

import glob
import os
import shutil
from typing import List, Optional, Tuple

from safetensors.torch import load_file

from areal_mem.config.learner import PublishConfig, VerifyMode

from ..generator_admin import GeneratorAdmin
from .base import Expected, PushResult, WeightPublisher


def pushed_versions(weights_dir: str) -> List[Tuple[int, str]]:
    """(version, path) of the complete pushes in `weights_dir` (`vNNNNNN/`), oldest first."""
    if not os.path.isdir(weights_dir):
        return []
    return sorted(
        (int(d[1:]), os.path.join(weights_dir, d))
        for d in os.listdir(weights_dir)
        if d[:1] == "v" and d[1:].isdigit() and os.path.exists(os.path.join(weights_dir, d, "config.json"))
    )


class DiskPublisher(WeightPublisher):
    def __init__(self, engine, client: Optional[GeneratorAdmin], weights_dir: str, cfg: PublishConfig):
        super().__init__(engine, client, cfg)
        self.weights_dir = weights_dir
        self.last: Optional[Tuple[int, str]] = None  # (version, path) of the newest push

    def path(self, version: int) -> str:
        return os.path.join(self.weights_dir, f"v{version:06d}")

    def _push(self, version: int, result: PushResult) -> None:
        path = self.path(version)
        self.engine.export_hf(path)  # every rank: ZeRO-3 gathers; rank 0 writes
        if self.cfg.verify != VerifyMode.off:  # every rank takes part (a ZeRO-3 gather), rank 0 hashes
            named = self.engine.named_weights()
            if self.leader and self.verify and self.served is not None:
                self.expected = self._fingerprint(named)
            else:
                for _ in named:
                    pass
        if not self.leader:
            return
        result.bytes = sum(
            os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".safetensors")
        )
        self.last = (version, os.path.abspath(path))
        if self.client is not None and not self.broken:
            self.broken = not self._try(
                self.client.update_weights_from_disk(*self.last[::-1]), f"update_weights_from_disk v{version}"
            )
        self._clean()

    def _pushed_fingerprints(self) -> Optional[Expected]:
        if self.expected is None and self.last is not None and self.served is not None:
            files = sorted(glob.glob(os.path.join(glob.escape(self.last[1]), "*.safetensors")))
            self.expected = self._fingerprint((n, t) for f in files for n, t in load_file(f).items())
        return self.expected

    def _redeliver(self) -> None:
        if self.last is not None:
            self.io.run(self.client.update_weights_from_disk(self.last[1], self.last[0]))

    def _clean(self) -> None:
        for _, old in pushed_versions(self.weights_dir)[: -max(1, self.cfg.keep_weights)]:
            shutil.rmtree(old, ignore_errors=True)
