"""Every route's request checks in one place, bound to the served model and the server's limits.

A route reads its body through one method here and gets back a checked value or a
`BadRequest`: `/generate` a `ParsedBatch`, the OpenAI routes their pydantic body (and the
prompts and model name checked against the model), the admin routes SGLang's control bodies.
The limits that must hold for every route family (`items`: sampling ranges, stop strings and
token ids, top log-probs, sequences per request; `encode`: text bytes before tokenising) have
this one home, so `/generate` and `/v1/*` refuse the same values of the same fields. The shapes
themselves are SGLang's and OpenAI's (`protocol`, `openai_api`, `admin_requests`).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, Dict, List, Optional, Sequence, Type, TypeVar

from aiohttp import web

from . import openai_api
from .admin_requests import B, parse_body
from .errors import BadRequest
from .protocol import (
    ParsedBatch,
    ParsedGenerate,
    check_prompt,
    check_sampling,
    parse_generate,
    sequence_count,
    texts_of,
)
from .service import EngineService

MAX_BODY_BYTES = 64 << 20  # larger bodies get 413; a 32k-token prompt is well under 1 MiB
TEXT_BYTES_PER_TOKEN = 32  # generator.embedded.max_text_bytes 0: this many UTF-8 bytes per context token

M = TypeVar("M")


def lone_surrogate_at(value: Any, where: str = "") -> Optional[str]:
    """The path of the first string (key or value) in a JSON value that is not valid Unicode
    (a lone UTF-16 surrogate such as "\\ud800", which JSON's escapes allow), else None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where or "body"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            at = f"{where}.{k}" if where else str(k)
            if lone_surrogate_at(k, at) is not None:
                return at.encode("utf-8", "backslashreplace").decode()
            found = lone_surrogate_at(v, at)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found = lone_surrogate_at(v, f"{where}[{i}]")
            if found is not None:
                return found
    return None


class RequestValidator:
    def __init__(self, service: EngineService):
        self.service = service
        self.limits = service.limits
        ctx = service.meta.max_context_len if service.meta is not None else 0
        self.max_text_bytes = self.limits.max_text_bytes or TEXT_BYTES_PER_TOKEN * ctx

    async def json(self, request: web.Request) -> Dict[str, Any]:
        """The body as a JSON object, whatever the Content-Type (as SGLang reads it); empty: {}.
        The body must arrive within `http_read_timeout_s` (408), and be valid Unicode text
        throughout (a lone surrogate is a 400 naming the field)."""
        timeout = self.limits.http_read_timeout_s
        try:
            raw = await asyncio.wait_for(request.read(), timeout)
        except web.HTTPRequestEntityTooLarge:
            raise BadRequest(f"request body is larger than the limit of {MAX_BODY_BYTES} bytes", 413) from None
        except TimeoutError:
            raise BadRequest(
                f"body: not received within {timeout:g} s (generator.embedded.http_read_timeout_s)", 408
            ) from None
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as e:  # RecursionError: absurdly deep nesting
            raise BadRequest(f"request body is not JSON: {type(e).__name__}: {str(e)[:200]}") from None
        if not isinstance(body, dict):
            raise BadRequest(f"expected a JSON object, got {type(body).__name__}")
        # a lone surrogate comes as a \\udXXX escape, or as its (invalid) UTF-8 bytes: look only then
        if b"\\ud" in raw or b"\\uD" in raw or b"\xed" in raw:
            where = lone_surrogate_at(body)
            if where is not None:
                raise BadRequest(f"{where}: not valid Unicode text (a lone surrogate such as \\ud800)")
        return body

    async def generate(self, request: web.Request) -> ParsedBatch:
        """SGLang's `/generate` body: prompts as token ids of this model, one item per sequence."""
        meta = self.service.meta
        body = await self.json(request)
        self.sequences(sequence_count(body))  # from the counts, before any prompt is read
        texts = texts_of(body)
        encoded = await self.encode(texts, "text") if texts is not None else None
        batch = parse_generate(body, meta.vocab_size, meta.max_context_len, encoded)
        self.items(batch.items)
        return batch

    async def encode(self, texts: Sequence[str], where: str) -> Optional[List[List[int]]]:
        """`texts` as token ids, each first checked for its byte length (a text longer than the
        context could hold is refused before the tokenizer sees it), tokenised off the event loop;
        None when the model has no tokenizer."""
        if self.service.codec.tokenizer is None:
            return None
        names = [f"{where}[{i}]" if len(texts) > 1 else where for i in range(len(texts))]
        for t, name in zip(texts, names):
            self.text_bytes(t, name)
        codec, ctx = self.service.codec, self.service.meta.max_context_len

        def encode_all() -> List[List[int]]:
            out = []
            for t, name in zip(texts, names):
                ids = codec.encode_within(t, ctx)
                if ids is None:  # stopped early: a prefix already holds more than the context
                    raise BadRequest(f"{name}: more than {ctx} tokens; the model's context is {ctx} tokens")
                out.append(ids)
            return out

        return await asyncio.to_thread(encode_all)

    def text_bytes(self, text: str, where: str) -> None:
        n = len(text.encode("utf-8"))
        if n > self.max_text_bytes:
            raise BadRequest(
                f"{where}: {n} bytes of text; this server takes at most {self.max_text_bytes} "
                f"(generator.embedded.max_text_bytes; the context is {self.service.meta.max_context_len} tokens)"
            )

    async def openai(self, request: web.Request, model: Type[M]) -> M:
        """An OpenAI body (`openai_api.CompletionBody` / `ChatBody`); the route checks the model it
        names (`model`) after its values (`items`), so a bad value is named whatever the model."""
        return openai_api.parse(model, await self.json(request))

    async def admin(self, request: web.Request, model: Type[B]) -> B:
        """A control route's body, as SGLang validates it (`admin_requests`)."""
        return parse_body(model, await self.json(request))

    def prompts(self, prompts: List[List[int]], where: str) -> List[List[int]]:
        """Prompts that did not come through `/generate`, checked as its prompts are."""
        meta = self.service.meta
        for i, p in enumerate(prompts):
            check_prompt(p, f"{where}[{i}]" if len(prompts) > 1 else where, meta.vocab_size, meta.max_context_len)
        return prompts

    def items(self, items: List[ParsedGenerate], names: Optional[Dict[str, str]] = None) -> List[ParsedGenerate]:
        """The limits every route family shares, on the sequences a request asks for: how many,
        the sampling values (`names`: the route's own names of the fields), stop strings and
        token ids, top log-probs. `/generate` and `/v1/*` call this on the same engine items."""
        lim, names = self.limits, names or {}
        self.sequences(len(items))
        vocab = self.service.meta.vocab_size
        seen = set()
        for it in items:
            spec, where = it.spec, it.origin
            top = names.get("top_logprobs_num", "top_logprobs_num")
            if it.top_logprobs_num > lim.max_top_logprobs:
                raise BadRequest(
                    f"{top}: {it.top_logprobs_num} is more than {lim.max_top_logprobs} "
                    f"(generator.embedded.max_top_logprobs)"
                )
            check_sampling(spec, where, names)
            key = (id(spec.stop), id(spec.stop_token_ids))
            if key in seen:  # the n samples of one prompt share these lists
                continue
            seen.add(key)
            at = f"{where}." if where else ""
            if len(spec.stop) > lim.max_stops:
                raise BadRequest(
                    f"{at}stop: {len(spec.stop)} strings; at most {lim.max_stops} (generator.embedded.max_stops)"
                )
            for s in spec.stop:
                if len(s) > lim.max_stop_chars:
                    raise BadRequest(
                        f"{at}stop: a string of {len(s)} characters; at most {lim.max_stop_chars} "
                        f"(generator.embedded.max_stop_chars)"
                    )
            if len(spec.stop_token_ids) > lim.max_stops:
                raise BadRequest(
                    f"{at}stop_token_ids: {len(spec.stop_token_ids)} ids; at most {lim.max_stops} "
                    f"(generator.embedded.max_stops)"
                )
            for t in spec.stop_token_ids:  # the engine indexes logits with them
                if not 0 <= t < vocab:
                    raise BadRequest(
                        f"{at}stop_token_ids: {t} is not a token id of this model (vocabulary size {vocab})"
                    )
        return items

    def sequences(self, count: int) -> None:
        """The cap on prompts x n of one request; routes call it with the counts before building items."""
        cap = self.limits.max_sequences_per_request
        if count > cap:
            raise BadRequest(
                f"{count} sequences (prompts x n) in one request; this server takes at most "
                f"{cap} (generator.embedded.max_sequences_per_request)"
            )

    def model(self, name: str) -> None:
        """OpenAI clients name the model: the served folder, or its base name; else 404."""
        path = self.service.meta.model_path
        if name not in (path, os.path.basename(path.rstrip(os.sep))):
            raise BadRequest(f"model: the model `{name}` does not exist; this server serves {path!r}", 404)
