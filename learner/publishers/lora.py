"""LoRA pushes (`learner.lora`): the adapter alone moves, as a PEFT folder per version in the run
dir that every generator loads with SGLang's `/load_lora_adapter` (SGLang and the embedded server
alike; kilobytes to a few megabytes, so the disk costs little), after unloading the previous
one of the same name, then `/update_weight_version` labels the result. Rollout requests name the
adapter (`generator.lora.adapter`), so the name is kept and the content changes under it while
generation is paused (a request let in meanwhile finds it loaded again when it starts).

Verification compares what the generators report (`/weights_checker`: the base's tensors and
`lora/<name>/<tensor>` for each loaded adapter) with the pushed adapter and the base: the base
is read once (a ZeRO-3 gather) and its host copy kept on rank 0, as it never changes.
"""

from __future__ import annotations

import itertools
import os
import shutil
from typing import Dict, List, Optional, Tuple

import torch
from safetensors.torch import load_file

from areal_mem.config.learner import PublishConfig
from areal_mem.generation import GeneratorError

from .. import lora
from ..generator_admin import GeneratorAdmin
from .link import GeneratorLink
from .publisher import WeightPublisher
from .transport import Named, PushResult, Record, Transport


class LoraTransport(Transport):
    def __init__(self, engine, link: Optional[GeneratorLink], weights_dir: str, cfg: PublishConfig):
        super().__init__(engine, link, cfg)
        self.weights_dir, self.name = weights_dir, engine.cfg.lora.name
        self.last: Optional[Tuple[int, str]] = None  # (version, folder) of the newest push
        self.base: Optional[List[Tuple[str, torch.Tensor]]] = None  # rank 0's copy, for fingerprints
        self.loaded = False  # whether this learner loaded its adapter into the generators yet

    def path(self, version: int) -> str:
        """Push `version`'s folder; the starting adapter's (version < 0) is `lora_start`."""
        return os.path.join(self.weights_dir, f"lora_v{version:06d}" if version >= 0 else "lora_start")

    def setup(self) -> None:
        """Nothing to join: each push names its folder."""

    def write(self, version: int) -> Optional[str]:
        """Every rank: the adapter out of the engine (a ZeRO-3 gather); rank 0 writes its folder."""
        return self.engine.export_adapter(self.path(version))

    def push(self, version: int, result: PushResult, deliver: bool, record: Optional[Record]) -> bool:
        path = self.write(version)  # rank 0's folder; None on the other ranks
        if record is not None:
            if self.base is None:  # every rank reads the base once (collective under ZeRO-3)
                base = [(n, t.cpu()) for n, t in lora.base_tensors(self.engine.engine.module)]
                self.base = base if self.leader else []
            record(itertools.chain(self.base, self._adapter_named(path) if path is not None else ()))
        if path is None:
            return True
        result.bytes = os.path.getsize(os.path.join(path, lora.ADAPTER_FILE))
        last = self.last = (version, os.path.abspath(path))
        delivered = True
        if self.link is not None and deliver:
            delivered = self.link.attempt(self._deliver(*last), f"load_lora_adapter v{version}")
        self._clean()
        return delivered

    async def _deliver(self, version: Optional[int], path: str, fresh: bool = False) -> None:
        """Replace the adapter of our name on every generator, then label the version (None: keep).
        `fresh`: a generator may not hold it (a restarted one), so a failed unload is no failure."""
        client = self.rank0_link().client
        try:
            await client.unload_lora_adapter(self.name)
        except GeneratorError:
            if self.loaded and not fresh:  # ours was there and could not be taken out: the push failed
                raise
        await client.load_lora_adapter(self.name, path)
        self.loaded = True
        if version is not None:
            await client.update_weight_version(version)

    def load_initial(self) -> None:
        """Every rank, before the first rollout: the generators serve the adapter the learner
        starts from under its name (their version label unchanged)."""
        path = self.write(-1 if self.last is None else self.last[0])
        if self.link is not None and path is not None:
            self.link.run(self._deliver(None, os.path.abspath(path)))

    def _adapter_named(self, path: str) -> Named:
        tensors: Dict[str, torch.Tensor] = load_file(os.path.join(path, lora.ADAPTER_FILE))
        return ((f"lora/{self.name}/{n}", t) for n, t in tensors.items())

    def pushed(self) -> Optional[Named]:
        if self.last is None or self.base is None:
            return None
        return itertools.chain(self.base, self._adapter_named(self.last[1]))

    def redeliver(self) -> None:
        if self.last is not None:
            self.rank0_link().run(self._deliver(*self.last, fresh=True))

    def close(self) -> None:
        """Nothing held."""

    def _clean(self) -> None:
        keep = max(1, self.cfg.keep_weights)
        folders = sorted(d for d in os.listdir(self.weights_dir) if d.startswith("lora_v") and d[6:].isdigit())
        for old in folders[:-keep]:
            shutil.rmtree(os.path.join(self.weights_dir, old), ignore_errors=True)


class LoraPublisher(WeightPublisher):
    """The publisher over `LoraTransport`; its set-up loads the starting adapter everywhere."""

    transport: LoraTransport

    def __init__(self, engine, client: Optional[GeneratorAdmin], weights_dir: str, cfg: PublishConfig):
        link = GeneratorLink.of(engine, client)
        super().__init__(engine, link, cfg, LoraTransport(engine, link, weights_dir, cfg))

    def setup(self) -> None:
        super().setup()
        self.transport.load_initial()
