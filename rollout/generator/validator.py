"""Every route's request checks in one place, bound to the served model.

A route reads its body through one method here and gets back a checked value or a
`BadRequest`: `/generate` a `ParsedBatch`, the OpenAI routes their pydantic body (and the
prompts and model name checked against the model), the admin routes SGLang's control bodies.
A limit that must hold for every route family (on prompts, tokens, samples) therefore has
one home. The shapes themselves are SGLang's and OpenAI's (`protocol`, `openai_api`,
`admin_requests`); this module binds them to the model and to the HTTP body.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Type, TypeVar

from aiohttp import web

from . import openai_api
from .admin_requests import parse_body
from .errors import BadRequest
from .protocol import ParsedBatch, check_prompt, parse_generate
from .service import EngineService

MAX_BODY_BYTES = 64 << 20  # larger bodies get 413; a 32k-token prompt is well under 1 MiB

M = TypeVar("M")


class RequestValidator:
    def __init__(self, service: EngineService):
        self.service = service

    async def json(self, request: web.Request) -> Dict[str, Any]:
        """The body as a JSON object, whatever the Content-Type (as SGLang reads it); empty: {}."""
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(f"request body is larger than the limit of {MAX_BODY_BYTES} bytes", 413) from None
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
            raise BadRequest(f"request body is not JSON: {type(e).__name__}: {str(e)[:200]}") from None
        if not isinstance(body, dict):
            raise BadRequest(f"expected a JSON object, got {type(body).__name__}")
        return body

    async def generate(self, request: web.Request) -> ParsedBatch:
        """SGLang's `/generate` body: prompts as token ids of this model, one item per sequence."""
        meta = self.service.meta
        return parse_generate(
            await self.json(request), meta.vocab_size, meta.max_context_len, self.service.codec.encode
        )

    async def openai(self, request: web.Request, model: Type[M]) -> M:
        """An OpenAI body (`openai_api.CompletionBody` / `ChatBody`) naming the served model."""
        body = openai_api.parse(model, await self.json(request))
        self.model(body.model)
        return body

    async def admin(self, request: web.Request, model: Type[M]) -> M:
        """A control route's body, as SGLang validates it (`admin_requests`)."""
        return parse_body(model, await self.json(request))

    def prompts(self, prompts: List[List[int]], where: str) -> List[List[int]]:
        """Prompts that did not come through `/generate`, checked as its prompts are."""
        meta = self.service.meta
        for i, p in enumerate(prompts):
            check_prompt(p, f"{where}[{i}]" if len(prompts) > 1 else where, meta.vocab_size, meta.max_context_len)
        return prompts

    def model(self, name: str) -> None:
        """OpenAI clients name the model: the served folder, or its base name; else 404."""
        path = self.service.meta.model_path
        if name not in (path, os.path.basename(path.rstrip(os.sep))):
            raise BadRequest(f"model: the model `{name}` does not exist; this server serves {path!r}", 404)
