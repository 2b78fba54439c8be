"""The embedded generator's HTTP server: SGLang's native, OpenAI-compatible and admin routes
over one engine service.

`GeneratorServer` assembles the app: each route family (`native_routes`, `openai_routes`,
`admin_routes`, `weight_routes`) takes the shared `EngineService` and the one
`RequestValidator`; errors are raised as `RequestError` and answered by the one middleware
(`errors.json_errors`), so a bad request gets a 4xx in SGLang's error shape and the server
keeps serving. `build_server` loads the model and starts the engine; `serve` listens.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Optional, Sequence

import torch
from aiohttp import web

from areal_mem.config.generator import EmbeddedConfig, GeneratorLoraConfig
from areal_mem.http_guard import GuardLimits, start_guarded
from areal_mem.security import bearer_auth_middleware

from .admin_routes import AdminRoutes
from .codec import TextCodec
from .engine import Engine
from .errors import json_errors
from .lora import LoraAdapters
from .lora_routes import LoraRoutes
from .native_routes import NativeRoutes
from .openai_routes import OpenAIRoutes
from .service import EngineService, ModelMeta
from .validator import MAX_BODY_BYTES, RequestValidator
from .weight_routes import WeightRoutes

__all__ = ["GeneratorServer", "build_server", "serve"]

SHUTDOWN_S = 2.0


class GeneratorServer:
    """One embedded server: its engine service, and the app that serves it with `token`."""

    def __init__(
        self,
        engine: Engine,
        meta: ModelMeta,
        tokenizer=None,
        token: str = "",
        group_timeout_s: float = 600.0,
        weights_dirs: Sequence[str] = (),
        limits: Optional[EmbeddedConfig] = None,
    ):
        """`limits`: the request and connection limits (`generator.embedded.*`; default: the schema's)."""
        self.service = EngineService(engine, meta, TextCodec(tokenizer), group_timeout_s, weights_dirs, limits)
        self.token = token

    def app(self) -> web.Application:
        """Every route family's routes, behind the error middleware and then the bearer-token
        check (so a request without the token reaches no route, and a route's error is JSON)."""
        app = web.Application(
            middlewares=[json_errors(), bearer_auth_middleware(self.token)], client_max_size=MAX_BODY_BYTES
        )
        validator = RequestValidator(self.service)
        for family in (NativeRoutes, OpenAIRoutes, AdminRoutes, WeightRoutes, LoraRoutes):
            app.add_routes(family(self.service, validator).routes())
        app.on_cleanup.append(self._cleanup)
        return app

    async def _cleanup(self, app: web.Application) -> None:
        await self.service.close()


def build_server(
    model_path: str,
    cfg: EmbeddedConfig,
    token: str = "",
    weight_version: str = "0",
    weights_dirs: Sequence[str] = (),
    lora: Optional[GeneratorLoraConfig] = None,
) -> GeneratorServer:
    """Load the model (and its tokenizer, if the folder has one) and start the engine.
    `weights_dirs`: where /update_weights_from_disk may load from (default: the model's folder);
    the command passes `cfg.weights_dirs` or its defaults."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    device = cfg.device if cfg.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
    hf = AutoConfig.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, cfg.dtype))
    model.to(device)  # type: ignore[arg-type]  # transformers' wrapper of .to hides nn.Module.to's signature
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError):
        tokenizer = None
    eos = set()
    for src in (hf, _generation_config(model_path, GenerationConfig)):
        e = getattr(src, "eos_token_id", None)
        eos |= set(e if isinstance(e, list) else [e] if e is not None else [])
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        eos.add(tokenizer.eos_token_id)
    ctx = cfg.max_context_len or getattr(hf, "max_position_embeddings", 4096)
    decode = (lambda ids: str(tokenizer.decode(ids, skip_special_tokens=False))) if tokenizer else None
    adapters = None
    if lora is not None and lora.enabled:  # `generator.lora`: adapters served per request (lora.py)
        adapters = LoraAdapters(model, lora.max_rank, lora.target_modules, lora.max_loras)
    engine = Engine(model, eos, cfg.max_batch_size, ctx, decode, weight_version, cfg.prefix_cache_tokens, adapters)
    engine.start()
    meta = ModelMeta(model_path, int(hf.vocab_size), ctx)
    return GeneratorServer(
        engine, meta, tokenizer, token, cfg.weight_group_timeout_s, list(weights_dirs) or [model_path], cfg
    )


def _generation_config(path: str, cls):
    try:
        return cls.from_pretrained(path)
    except OSError:
        return None


async def serve(
    server: GeneratorServer, host: str, port: int, on_ready: Optional[Callable[[str], None]] = None
) -> None:
    """Serve until cancelled; `on_ready(url)` once listening (port 0: the OS picked one)."""
    # handler_cancellation: a client that hangs up cancels its handler, which aborts its request;
    # idle connections, slots per client address and answers not taken are limited
    # (areal_mem.http_guard, generator.embedded.http_* and max_*_per_client)
    runner = await start_guarded(
        server.app(),
        host=host,
        port=port,
        limits=GuardLimits.of(server.service.limits),
        handle_signals=False,
        access_log=None,
        handler_cancellation=True,
        # at SIGTERM, requests in flight get this long before their handlers are cancelled (a
        # join waiting on a silent peer must not hold the exit; the launcher kills after 10 s)
        shutdown_timeout=SHUTDOWN_S,
    )
    service = server.service
    service.host, service.port = host, runner.addresses[0][1]  # (host, port[, flow, scope]) of the socket
    url = f"http://{host}:{service.port}"
    print(
        f"areal-mem generator: serving {service.meta.model_path} on {url} (weight_version {service.engine.version})",
        flush=True,
    )
    if on_ready:
        on_ready(url)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
