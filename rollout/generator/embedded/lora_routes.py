"""SGLang's LoRA routes over the engine's adapters (`lora.py`): `/load_lora_adapter` (a PEFT
folder on disk), `/load_lora_adapter_from_tensors` and `/unload_lora_adapter`.

Bodies and answers are SGLang 0.5.23's (`LoadLoRAAdapterReqInput`, `UnloadLoRAAdapterReqInput`,
`LoadLoRAAdapterFromTensorsReqInput` -> `LoRAUpdateOutput`: `success`, `error_message`,
`loaded_adapters` name -> path; 400 on failure). One difference, refused by name: SGLang's
`serialized_named_tensors` are pickles, which this server never loads; each entry here is a
safetensors file (base64, as SGLang's bytes travel), one per rank (this server has one).
An adapter is checked whole before it is served, so a refused one changes nothing.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import os
from typing import Any, Dict, List, Optional

import torch
from aiohttp import web
from pydantic import BaseModel, ConfigDict, ValidationError

from .disk_weights import allowed_path, check_header
from .errors import BadRequest, RequestError
from .lora import AdapterError, LoraAdapters
from .request import WeightLoadError
from .service import EngineService
from .validator import RequestValidator

ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
MAX_CONFIG_BYTES = 1 << 20


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")  # as SGLang: keys it does not know are dropped

    rid: Optional[str] = None
    http_worker_ipc: Optional[str] = None


class LoadLoRAAdapter(_Body):
    lora_name: str
    lora_path: str
    pinned: bool = False
    lora_id: Optional[str] = None


class UnloadLoRAAdapter(_Body):
    lora_name: str
    lora_id: Optional[str] = None


class LoadLoRAAdapterFromTensors(_Body):
    lora_name: str
    config_dict: Dict[str, Any]
    serialized_named_tensors: List[str]  # base64 (SGLang's Base64Bytes)
    pinned: bool = False
    added_tokens_config: Optional[Dict[str, int]] = None
    lora_id: Optional[str] = None
    load_format: Optional[str] = None
    expected_checksums: Optional[Dict[str, str]] = None


def read_adapter_dir(path: str, allowed: List[str]) -> tuple:
    """(adapter_config.json as a dict, tensors) of a PEFT folder inside the `allowed` folders."""
    from safetensors.torch import load_file

    real = allowed_path(path, allowed, "lora_path")
    cfg_path, weights = os.path.join(real, CONFIG_FILE), os.path.join(real, ADAPTER_FILE)
    for needed in (cfg_path, weights):
        if not os.path.isfile(needed):
            raise AdapterError(f"lora_path {path!r}: no {os.path.basename(needed)} there (a PEFT adapter folder)")
    if os.path.getsize(cfg_path) > MAX_CONFIG_BYTES:
        raise AdapterError(f"{cfg_path}: larger than {MAX_CONFIG_BYTES} bytes")
    with open(cfg_path, encoding="utf-8") as f:
        try:
            config = json.load(f)
        except ValueError as e:
            raise AdapterError(f"{cfg_path}: not JSON ({e})") from None
    check_header(allowed_path(weights, allowed, "lora_path"))
    try:
        return config, list(load_file(weights).items())
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error type
        raise AdapterError(f"{weights}: not a readable safetensors file ({type(e).__name__}: {e})") from None


def decode_tensors(body: LoadLoRAAdapterFromTensors) -> list:
    """The one rank's tensors of a from-tensors body: a safetensors file, never a pickle."""
    from safetensors.torch import load as load_bytes

    if body.load_format is not None:
        raise AdapterError(f"load_format={body.load_format!r:.40} is not supported by the embedded generator")
    if body.added_tokens_config:
        raise AdapterError("added_tokens_config is not supported by the embedded generator")
    if len(body.serialized_named_tensors) != 1:
        raise AdapterError(
            f"serialized_named_tensors: {len(body.serialized_named_tensors)} entries; this server has one rank"
        )
    try:
        raw = base64.b64decode(body.serialized_named_tensors[0], validate=True)
        n = int.from_bytes(raw[:8], "little")
        if len(raw) < 8 or n > len(raw) - 8 or raw[8:9] != b"{":
            raise ValueError("no safetensors header")
        named = list(load_bytes(raw).items())
    except (binascii.Error, ValueError, Exception) as e:  # noqa: BLE001 - safetensors' own error type
        raise AdapterError(
            "serialized_named_tensors[0]: not a safetensors file in base64 (the embedded generator never "
            f"loads pickled tensors; {type(e).__name__}: {str(e)[:80]})"
        ) from None
    if body.expected_checksums is not None:  # SGLang's check: sha256 of each tensor's bytes
        tensors = dict(named)
        got = {
            n: hashlib.sha256(t.contiguous().flatten().view(torch.uint8).numpy().tobytes()).hexdigest()
            for n, t in tensors.items()
        }
        bad = sorted(n for n in set(got) | set(body.expected_checksums) if got.get(n) != body.expected_checksums.get(n))
        if bad:
            raise AdapterError(f"expected_checksums: {len(bad)} tensor(s) differ, are missing or extra: {bad[:5]}")
    return named


class LoraRoutes:
    def __init__(self, service: EngineService, validator: RequestValidator):
        self.service, self.validator = service, validator
        self.engine = service.engine

    def routes(self) -> List[web.RouteDef]:
        return [
            web.post("/load_lora_adapter", self.load),
            web.post("/load_lora_adapter_from_tensors", self.load_from_tensors),
            web.post("/unload_lora_adapter", self.unload),
        ]

    def _answer(self, ok: bool, error: str = "") -> web.Response:
        lora: Optional[LoraAdapters] = self.engine.lora
        loaded = {n: a.path for n, (_, a) in lora.loaded.items()} if lora is not None else {}
        body = {"success": ok, "error_message": error, "loaded_adapters": loaded}
        return web.json_response(body, status=200 if ok else 400)

    async def _run(self, request: web.Request, model, act) -> web.Response:
        """Parse the body, refuse a server without LoRA, then `act(body)` (off the loop); an
        adapter problem is SGLang's failure answer naming it, and nothing changed."""
        try:
            body = model.model_validate(await self.validator.json(request))
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "body"
            return self._answer(False, f"{where}: {err['msg']}")
        if self.engine.lora is None:
            return self._answer(
                False, "LoRA is not enabled on this generator (generator.lora.enabled; SGLang's --enable-lora)"
            )
        try:
            await asyncio.to_thread(act, body)
        except (AdapterError, WeightLoadError, BadRequest) as e:
            if isinstance(e, RequestError) and e.status == 403:
                raise
            return self._answer(False, str(e))
        return self._answer(True)

    def _adapters(self) -> LoraAdapters:
        """The engine's adapters; `_run` answered a server without LoRA before any `act`."""
        if self.engine.lora is None:
            raise RuntimeError("LoRA is not enabled on this generator")
        return self.engine.lora

    def _serve(self, name: str, config: dict, named: list, path: str) -> None:
        lora = self._adapters()
        self.engine.lora_call(lora.load, name, lora.parse(config, named, path))

    async def load(self, request: web.Request) -> web.Response:
        def act(b: LoadLoRAAdapter) -> None:
            config, named = read_adapter_dir(b.lora_path, self.service.weights_dirs)
            self._serve(b.lora_name, config, named, b.lora_path)

        return await self._run(request, LoadLoRAAdapter, act)

    async def load_from_tensors(self, request: web.Request) -> web.Response:
        def act(b: LoadLoRAAdapterFromTensors) -> None:
            self._serve(b.lora_name, b.config_dict, decode_tensors(b), "__tensor__")

        return await self._run(request, LoadLoRAAdapterFromTensors, act)

    async def unload(self, request: web.Request) -> web.Response:
        def act(b: UnloadLoRAAdapter) -> None:
            self.engine.lora_call(self._adapters().unload, b.lora_name)

        return await self._run(request, UnloadLoRAAdapter, act)
