"""SGLang's control and information routes over the engine: pause / continue / abort, the
weight version label, the prefix cache, `/health`, `/model_info` and `/server_info`.
(The routes that move weights are `weight_routes`.) Engine control runs in worker threads:
a pause waits for the engine's step to end and must not hold up the event loop."""

from __future__ import annotations

import asyncio
from typing import List

from aiohttp import web

from areal_mem import __version__

from .admin_requests import Abort, PauseGeneration, UpdateWeightVersion
from .errors import BadRequest
from .service import EngineService
from .validator import RequestValidator


class AdminRoutes:
    def __init__(self, service: EngineService, validator: RequestValidator):
        self.service, self.validator = service, validator
        self.engine = service.engine

    def routes(self) -> List[web.RouteDef]:
        return [
            web.get("/server_info", self.server_info),
            web.get("/get_server_info", self.server_info),
            web.get("/health", self.health),
            web.get("/health_generate", self.health),
            web.get("/model_info", self.model_info),
            web.get("/get_model_info", self.model_info),
            web.post("/pause_generation", self.pause_generation),
            web.post("/continue_generation", self.continue_generation),
            web.post("/abort_request", self.abort_request),
            web.post("/update_weight_version", self.update_weight_version),
            web.get("/flush_cache", self.flush_cache),
            web.post("/flush_cache", self.flush_cache),
        ]

    async def server_info(self, request: web.Request) -> web.Response:
        """SGLang's /server_info fields that apply to one embedded engine."""
        e, meta, s = self.engine, self.service.meta, self.service
        return web.json_response(
            {
                "model_path": meta.model_path,
                "served_model_name": meta.model_path,
                "tokenizer_path": meta.model_path,
                "max_context_length": meta.max_context_len,
                "max_total_num_tokens": e.max_batch_size * meta.max_context_len,
                "max_running_requests": e.max_batch_size,
                "version": f"areal-mem-embedded {__version__}",
                "host": s.host,
                "port": s.port,
                "tp_size": 1,
                "dp_size": 1,
                "device": e.device.type,
                "dtype": str(next(e.model.parameters()).dtype).removeprefix("torch."),
                "weight_version": e.version,
                "incremental_streaming_output": False,
                "disaggregation_mode": "null",
                "internal_states": [{"engine_stats": e.stats(), "paused": e.paused, "in_flight": e.in_flight()}],
                "startup_time": s.started,
                "frontend": "areal-mem",
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def model_info(self, request: web.Request) -> web.Response:
        meta = self.service.meta
        return web.json_response(
            {
                "model_path": meta.model_path,
                "tokenizer_path": meta.model_path,
                "served_model_name": meta.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": self.engine.version,
                "max_context_length": meta.max_context_len,
                "engine_stats": self.engine.stats(),  # busy/idle seconds for `areal-mem bench async`
            }
        )

    async def pause_generation(self, request: web.Request) -> web.Response:
        mode = (await self.validator.admin(request, PauseGeneration)).mode
        n = await asyncio.to_thread(self.engine.pause, mode)
        return web.json_response({"success": True, "message": f"paused ({mode}); {n} in flight"})

    async def continue_generation(self, request: web.Request) -> web.Response:
        await self.validator.json(request)  # no fields, but a malformed body is still refused
        self.engine.resume()
        return web.json_response({"success": True, "message": "continued"})

    async def abort_request(self, request: web.Request) -> web.Response:
        body = await self.validator.admin(request, Abort)
        message = body.abort_message or "Abort by /abort_request"
        n = await asyncio.to_thread(self.engine.abort, None if body.abort_all else body.rid or "", message)
        return web.json_response({"success": n > 0})

    async def update_weight_version(self, request: web.Request) -> web.Response:
        body = await self.validator.admin(request, UpdateWeightVersion)
        if body.abort_all_requests:
            await asyncio.to_thread(self.engine.abort, None, "Abort by /update_weight_version")
        await asyncio.to_thread(self.engine.set_version, body.new_version)
        return web.json_response({"success": True, "message": f"weight_version {body.new_version}"})

    async def flush_cache(self, request: web.Request) -> web.Response:
        await self.validator.json(request)  # no fields, but a malformed body is still refused
        n = self.engine.in_flight()
        if n:
            raise BadRequest(f"Cache not flushed because there are {n} pending requests")
        await asyncio.to_thread(self.engine.flush_prefix_cache)
        return web.json_response({"success": True, "message": "Cache flushed."})
