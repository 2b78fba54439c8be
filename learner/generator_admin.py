"""What the learner needs from the generators it pushes weights into: a narrow admin protocol.

The learner owns this protocol and never imports the rollout side. Where the learner is composed
(`areal_mem.app.commands.learner`), the rollout's SGLang HTTP client is injected; it satisfies the
protocol structurally, as would a client of another inference server. Failures are
`areal_mem.generation.GeneratorError`, a base-layer type both sides know.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Protocol

from areal_mem.generation import GenerationResult, SamplingParams


class GeneratorAdmin(Protocol):
    """Every call reaches all generators (except `generate`, which one of them answers)."""

    @property
    def urls(self) -> List[str]: ...

    async def health(self) -> Dict[str, bool]: ...

    async def weight_versions(self) -> Dict[str, int]: ...

    async def pause(self, mode: str = "abort") -> None: ...

    async def continue_generation(self) -> None: ...

    async def update_weights_from_disk(
        self, path: str, version: int, abort_all_requests: bool = False
    ) -> List[dict]: ...

    async def init_weights_update_group(
        self, master_address: str, master_port: int, group_name: str, backend: str, ranks_per_server: int
    ) -> int: ...

    async def update_weights_from_distributed(
        self, names: List[str], dtypes: List[str], shapes: List[List[int]], group_name: str, version: int
    ) -> List[dict]: ...

    async def weight_checksums(self) -> Dict[str, Dict[str, str]]: ...

    async def load_lora_adapter(self, name: str, path: str) -> List[dict]: ...

    async def unload_lora_adapter(self, name: str) -> List[dict]: ...

    async def update_weight_version(self, version: int) -> None: ...

    async def generate(
        self, input_ids: List[int], sampling: SamplingParams, rid: Optional[str] = None
    ) -> GenerationResult: ...

    async def close(self) -> None: ...
