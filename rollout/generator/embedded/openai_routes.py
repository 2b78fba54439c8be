"""The OpenAI-compatible routes SGLang and vLLM serve: `/v1/models`, `/v1/completions`,
`/v1/chat/completions` (the served model's chat template), answered one object at a time or
streamed as text deltas. The bodies and answer pieces are `openai_api`'s; the prompts become
the same engine items as `/generate`'s and run through the same engine service."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional, cast

from aiohttp import web

from . import openai_api
from .errors import BadRequest
from .protocol import dumps
from .request import Request
from .service import EngineService
from .sse import EventStream
from .validator import RequestValidator


class OpenAIRoutes:
    def __init__(self, service: EngineService, validator: RequestValidator):
        self.service, self.validator = service, validator
        self.codec = service.codec

    def routes(self) -> List[web.RouteDef]:
        return [
            web.get("/v1/models", self.v1_models),
            web.get("/v1/models/{model:.+}", self.v1_model),
            web.post("/v1/completions", self.v1_completions),
            web.post("/v1/chat/completions", self.v1_chat_completions),
        ]

    async def v1_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_card()]})

    async def v1_model(self, request: web.Request) -> web.Response:
        self.validator.model(request.match_info["model"])
        return web.json_response(self._model_card())

    def _model_card(self) -> Dict[str, Any]:
        meta = self.service.meta
        return {
            "id": meta.model_path,
            "object": "model",
            "created": self.service.started,
            "owned_by": "areal-mem",
            "root": meta.model_path,
            "max_model_len": meta.max_context_len,
        }

    async def v1_completions(self, request: web.Request) -> web.StreamResponse:
        b = await self.validator.openai(request, openai_api.CompletionBody)
        p = b.prompt
        self.validator.sequences(
            (len(p) if isinstance(p, list) and p and isinstance(p[0], (str, list)) else 1) * b.n
        )  # before tokenising
        prompts: Optional[List[List[int]]]
        if isinstance(p, str) or (isinstance(p, list) and p and all(isinstance(x, str) for x in p)):
            prompts = await self.validator.encode([p] if isinstance(p, str) else cast(List[str], p), "prompt")
            if prompts is None:
                self.codec.encode("")  # no tokenizer: its 400
        else:  # one prompt of ids, or a list of them (the body's schema allows only these)
            prompts = [cast(List[int], p)] if not p or isinstance(p[0], int) else cast(List[List[int]], p)
        assert prompts is not None  # encode returns None only without a tokenizer, refused just above
        self.validator.prompts(prompts, "prompt")
        items = openai_api.items_of(prompts, openai_api.spec_of(b, b.max_tokens, 16), b.n, b.logprobs)
        self.validator.items(items, openai_api.COMPLETION_NAMES)
        self.validator.model(b.model)

        def choice(i: int, req: Request, text: str) -> Dict[str, Any]:
            lp = self._completion_logprobs(req) if b.logprobs is not None else None
            return {"index": i, "text": text, "logprobs": lp, **openai_api.finish_fields(req)}

        return await self._answer(request, b, "text_completion", "cmpl", prompts, items, choice)

    async def v1_chat_completions(self, request: web.Request) -> web.StreamResponse:
        b = await self.validator.openai(request, openai_api.ChatBody)
        if b.top_logprobs is not None and not b.logprobs:
            raise BadRequest("top_logprobs: needs logprobs=true")
        prompts = self.validator.prompts([await self._chat_prompt(b.messages)], "messages")
        max_tokens = b.max_completion_tokens if b.max_completion_tokens is not None else b.max_tokens
        default = self.service.meta.max_context_len - len(prompts[0])
        top = (b.top_logprobs or 0) if b.logprobs else None
        items = openai_api.items_of(prompts, openai_api.spec_of(b, max_tokens, default), b.n, top)
        names = openai_api.CHAT_NAMES
        if b.max_completion_tokens is not None:
            names = {**names, "max_new_tokens": "max_completion_tokens"}
        self.validator.items(items, names)
        self.validator.model(b.model)

        def choice(i: int, req: Request, text: str) -> Dict[str, Any]:
            lp = {"content": self._chat_logprobs(req)} if b.logprobs else None
            message = {"role": "assistant", "content": text}
            return {"index": i, "message": message, "logprobs": lp, **openai_api.finish_fields(req)}

        return await self._answer(request, b, "chat.completion", "chatcmpl", prompts, items, choice)

    async def _chat_prompt(self, messages) -> List[int]:
        tokenizer = self.codec.tokenizer
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise BadRequest("messages: this model has no chat template; use /v1/completions")
        convo = []
        for i, m in enumerate(messages):
            content = m.content
            if isinstance(content, list):
                if any(part.get("type") != "text" for part in content):
                    raise BadRequest(f"messages[{i}].content: only text parts are supported")
                content = "".join(str(part.get("text", "")) for part in content)
            convo.append({"role": m.role, "content": content or "", **({"name": m.name} if m.name else {})})
        # the template only adds text: content over the byte limit cannot fit, refused untokenised
        content = "".join(c["content"] for c in convo)
        self.validator.text_bytes(content, "messages")
        await self.validator.encode([content], "messages")  # the token bound, before the template runs
        ids = await asyncio.to_thread(tokenizer.apply_chat_template, convo, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def _completion_logprobs(self, req: Request) -> Dict[str, Any]:
        token_text = self.codec.token_text
        tokens = [token_text(t) for t in req.output_ids]
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        top = [{token_text(t): lp for lp, t in row} for row in req.top_logprobs] if req.top_logprobs_num else None
        return {"tokens": tokens, "token_logprobs": list(req.logprobs), "top_logprobs": top, "text_offset": offsets}

    def _chat_logprobs(self, req: Request) -> List[Dict[str, Any]]:
        def entry(lp: float, t: int) -> Dict[str, Any]:
            text = self.codec.token_text(t)
            return {"token": text, "logprob": lp, "bytes": list(text.encode())}

        rows = req.top_logprobs if req.top_logprobs_num else [[] for _ in req.output_ids]
        return [
            {**entry(lp, t), "top_logprobs": [entry(a, b) for a, b in row]}
            for lp, t, row in zip(req.logprobs, req.output_ids, rows)
        ]

    async def _answer(self, request, b, kind: str, prefix: str, prompts, items, choice) -> web.StreamResponse:
        """Run `items`; answer one object with every choice, or (stream) chunks of text deltas."""
        rid, created, model = openai_api.new_id(prefix), openai_api.now(), b.model
        if not b.stream:
            reqs, _ = await self.service.run(items)
            choices = [choice(i, r, self.codec.output_text(it, r)) for i, (it, r) in enumerate(zip(items, reqs))]
            body = openai_api.envelope(kind, model, rid, created, choices)
            return web.json_response({**body, "usage": openai_api.usage(prompts, reqs)}, dumps=dumps)
        chat = kind == "chat.completion"
        stream, sent, started = EventStream(request), [""] * len(items), [False] * len(items)
        chunk_kind = "chat.completion.chunk" if chat else kind

        async def event(i: int, req: Request, _prompt_lp, finished: bool) -> None:
            await stream.start()
            text = self.codec.output_text(items[i], req)
            if not finished and text.endswith("\ufffd"):
                return  # a character cut between tokens: wait for the rest of it
            delta = text[len(sent[i]) :] if text.startswith(sent[i]) else ""
            sent[i] = text
            reason = openai_api.finish_reason(req) if finished else None
            if chat:
                d = {"content": delta} if delta or not finished else {}
                if not started[i]:
                    d, started[i] = {"role": "assistant", **d}, True
                c = {"index": i, "delta": d, "logprobs": None, "finish_reason": reason}
            else:
                c = {"index": i, "text": delta, "logprobs": None, "finish_reason": reason}
            await stream.send(openai_api.envelope(chunk_kind, model, rid, created, [c]))

        reqs, _ = await self.service.run(items, event)
        if (b.stream_options or {}).get("include_usage"):
            last = {
                **openai_api.envelope(chunk_kind, model, rid, created, []),
                "usage": openai_api.usage(prompts, reqs),
            }
            await stream.send(last)
        return await stream.end()
