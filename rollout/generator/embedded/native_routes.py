"""SGLang's native generation route, `/generate`: one prompt or a batch, `n` samples each,
optionally streamed, answered in SGLang's shapes (`protocol.build_response`)."""

from __future__ import annotations

from typing import Any, Dict, List

from aiohttp import web

from .errors import error_body
from .protocol import ParsedGenerate, build_response, dumps
from .request import Request
from .service import EngineService
from .sse import EventStream
from .validator import RequestValidator


class NativeRoutes:
    def __init__(self, service: EngineService, validator: RequestValidator):
        self.service, self.validator = service, validator

    def routes(self) -> List[web.RouteDef]:
        return [web.post("/generate", self.generate)]

    async def generate(self, request: web.Request) -> web.StreamResponse:
        batch = await self.validator.generate(request)
        items = batch.items
        if not batch.stream:
            reqs, prompt_lps = await self.service.run(items)
            out = [self._response(it, r, lp) for it, r, lp in zip(items, reqs, prompt_lps)]
            return web.json_response(out if batch.batched else out[0], dumps=dumps)
        stream = EventStream(request)
        index = (lambda i: i) if batch.batched else (lambda i: None)

        async def chunk(i: int, req: Request, prompt_lp, finished: bool) -> None:
            if req.error is not None:  # SGLang's GenerateStreamError
                out = {"error": error_body(req.error, 500)["error"], "index": index(i)}
            else:
                out = self._response(items[i], req, prompt_lp if finished else None, index(i))
            await stream.send(out)

        await self.service.run(items, chunk)
        return await stream.end()

    def _response(self, item: ParsedGenerate, req: Request, prompt_lp, index=None) -> Dict[str, Any]:
        codec = self.service.codec
        text = codec.output_text(item, req)
        return build_response(req, item, self.service.engine.version, text, codec.token_text, prompt_lp, index)
