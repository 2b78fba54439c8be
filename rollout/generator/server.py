"""The embedded generator's HTTP server: SGLang's native routes over the batching engine.

Handlers never block the event loop: engine control and weight transfers run in worker
threads, and a finished request wakes its handler through the loop. Every error in a
request is answered with a 4xx in SGLang's error shape and the server keeps serving.
"""

from __future__ import annotations

import asyncio
import dataclasses
import glob
import hashlib
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from aiohttp import web

from areal_mem import __version__
from areal_mem.config.generator import EmbeddedConfig
from areal_mem.security import bearer_auth_middleware, json_errors_middleware
from areal_mem.weight_fingerprint import fingerprints
from areal_mem.weight_transport import BucketMeta, WeightGroup

from . import openai_api
from .admin_requests import (
    Abort,
    CheckWeights,
    InitWeightsUpdateGroup,
    PauseGeneration,
    UpdateWeightFromDisk,
    UpdateWeightsFromDistributed,
    UpdateWeightVersion,
    parse_body,
)
from .engine import Engine, Request, WeightLoadError
from .protocol import BadRequest, ParsedGenerate, build_response, check_prompt, error_body, parse_generate

log = logging.getLogger(__name__)

# SGLang's ParallelismInfo of the one rank an embedded server has
ONE_RANK = dict(role="target", tp_rank=0, tp_size=1, dp_rank=0, dp_size=1, pp_rank=0, pp_size=1, rank=0, size=1)
MAX_BODY_BYTES = 64 << 20  # larger bodies get 413; a 32k-token prompt is well under 1 MiB
WEIGHT_BACKENDS = ("nccl", "gloo")


@dataclass
class ModelMeta:
    model_path: str
    vocab_size: int
    max_context_len: int


def snapshot(req: Request, n: int) -> Request:
    """`req` as it was when it held `n` output tokens (the engine thread goes on appending
    while a streamed chunk is written), unfinished."""
    spans = [[v, s, min(e, n)] for v, s, e in req.spans if s < n]
    return dataclasses.replace(
        req,
        output_ids=req.output_ids[:n],
        logprobs=req.logprobs[:n],
        top_logprobs=req.top_logprobs[:n],
        spans=spans,
        finish=None,
    )


def sse_response() -> web.StreamResponse:
    """A server-sent-events answer (SGLang's and OpenAI's streams)."""
    return web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})


async def end_sse(resp: web.StreamResponse, request: web.Request) -> web.StreamResponse:
    if not resp.prepared:
        await resp.prepare(request)
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def load_safetensors_dir(path: str) -> List[Tuple[str, torch.Tensor]]:
    """All tensors of a Hugging Face safetensors checkpoint folder (any number of shards)."""
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(glob.escape(path), "*.safetensors")))
    if not files:
        raise WeightLoadError(f"{path}: no *.safetensors files")
    out: List[Tuple[str, torch.Tensor]] = []
    for f in files:
        try:
            out += list(load_file(f).items())
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error type for corrupt files
            raise WeightLoadError(f"{f}: not a readable safetensors file ({type(e).__name__}: {e})") from None
    return out


class ForbiddenPath(ValueError):
    """A weights path outside the configured folders (answered 403)."""


def allowed_path(path: str, allowed: Sequence[str]) -> str:
    """`path` with symlinks and `..` resolved, if it lies inside one of the `allowed` folders."""
    real = os.path.realpath(path)
    for root in allowed:
        root = os.path.realpath(root)
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return real
    raise ForbiddenPath(
        f"model_path {path!r} is outside the folders this server loads weights from "
        f"({', '.join(allowed) or 'none'}); see generator.embedded.weights_dirs"
    )


class GeneratorServer:
    def __init__(
        self,
        engine: Engine,
        meta: ModelMeta,
        tokenizer=None,
        token: str = "",
        group_timeout_s: float = 600.0,
        weights_dirs: Sequence[str] = (),
    ):
        self.engine, self.meta, self.tokenizer, self.token = engine, meta, tokenizer, token
        self.group_timeout_s = group_timeout_s
        self.weights_dirs = list(weights_dirs)  # /update_weights_from_disk loads only inside these
        self.groups: Dict[str, WeightGroup] = {}
        self.host, self.port = "", 0  # where `serve` listens
        self.started = int(time.time())

    # ---- helpers ----
    @staticmethod
    def _bad(message: str, status: int = 400) -> web.Response:
        return web.json_response(error_body(message, status), status=status)

    @web.middleware
    async def _bad_requests(self, request: web.Request, handler) -> web.StreamResponse:
        """A `BadRequest` raised anywhere in a handler is its 4xx answer, in SGLang's error shape."""
        try:
            return await handler(request)
        except BadRequest as e:
            return self._bad(str(e), e.status)

    @staticmethod
    async def _json(request: web.Request) -> Dict[str, Any]:
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

    @staticmethod
    def _failed(e: Exception, status: int = 400) -> web.Response:
        """The weight routes' error shape: `{"success": false, "message"}`."""
        if isinstance(e, BadRequest):
            status = e.status
        elif isinstance(e, ForbiddenPath):
            status = 403
        return web.json_response({"success": False, "message": f"{type(e).__name__}: {e}"}, status=status)

    def _decode(self, ids: List[int], skip_special_tokens: bool = True) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    # ---- routes ----
    async def generate(self, request: web.Request) -> web.StreamResponse:
        """SGLang's /generate: one prompt or a batch, `n` samples each, optionally streamed."""
        body = await self._json(request)
        batch = parse_generate(body, self.meta.vocab_size, self.meta.max_context_len, self.encode)
        items = batch.items
        if not batch.stream:
            reqs, prompt_lps = await self.run(items)
            failed = next((r for r in reqs if r.error is not None), None)
            if failed is not None:
                return self._bad(failed.error, 500)
            out = [self._response(it, r, lp) for it, r, lp in zip(items, reqs, prompt_lps)]
            return web.json_response(out if batch.batched else out[0])
        resp = sse_response()
        index = (lambda i: i) if batch.batched else (lambda i: None)

        async def chunk(i: int, req: Request, prompt_lp, finished: bool) -> None:
            if not resp.prepared:
                await resp.prepare(request)
            if req.error is not None:  # SGLang's GenerateStreamError
                out = {"error": error_body(req.error, 500)["error"], "index": index(i)}
            else:
                out = self._response(items[i], req, prompt_lp if finished else None, index(i))
            await resp.write(b"data: " + json.dumps(out).encode() + b"\n\n")

        await self.run(items, chunk)
        return await end_sse(resp, request)

    def encode(self, text: str) -> List[int]:
        if self.tokenizer is None:
            raise BadRequest("text: this model has no tokenizer; send input_ids")
        return self.tokenizer.encode(text, add_special_tokens=False)

    async def run(self, items: List[ParsedGenerate], on_event=None) -> Tuple[List[Request], list]:
        """Generate every sequence of `items` together; returns their finished engine requests
        and prompt log-probs. With `on_event`, `await on_event(i, req, prompt_lp, finished)` runs
        for every new token of sequence i (every stream_interval tokens) and once when it ends.
        A client that goes away (cancelled handler, broken stream) aborts them all."""
        items[:] = [dataclasses.replace(it, rid=it.rid or uuid.uuid4().hex) for it in items]
        rids = [it.rid for it in items]
        if len(set(rids)) < len(rids):
            raise BadRequest(f"rid {next(r for r in rids if rids.count(r) > 1)!r} appears twice in the request")
        busy = [r for r in rids if self.engine.has_rid(r)]
        if busy:
            raise BadRequest(f"rid {busy[0]!r} is already in flight")
        scored: Dict[tuple, Any] = {}  # n samples of one prompt share its prompt log-probs
        keys = [(tuple(it.input_ids), it.spec.temperature, it.top_logprobs_num, self._wants_prompt(it)) for it in items]
        for key, it in zip(keys, items):
            if key not in scored:
                scored[key] = await self._prompt_logprobs(it)
        prompt_lps = [scored[key] for key in keys]
        loop = asyncio.get_running_loop()
        progress: asyncio.Queue = asyncio.Queue()
        futures = [loop.create_future() for _ in items]
        stream = on_event is not None
        reqs = [self._request(it, i, loop, futures[i], progress, stream) for i, it in enumerate(items)]
        for req in reqs:
            self.engine.submit(req)
        try:
            left = len(reqs) if stream else 0
            while left:
                i, n = await progress.get()  # n: tokens at the event; None: the sequence ended
                view = reqs[i] if n is None else snapshot(reqs[i], n)
                await on_event(i, view, prompt_lps[i], n is None)
                left -= n is None
            await asyncio.gather(*futures)
        except (asyncio.CancelledError, ConnectionError):  # the client went away: stop its requests
            for rid in rids:
                await asyncio.to_thread(self.engine.abort, rid, "client disconnected")
            raise
        return reqs, prompt_lps

    @staticmethod
    def _wants_prompt(item: ParsedGenerate) -> bool:
        return item.return_logprob and item.logprob_start_len >= 0

    async def _prompt_logprobs(self, item: ParsedGenerate):
        if not self._wants_prompt(item):
            return None
        return await asyncio.to_thread(
            self.engine.prompt_logprobs, item.input_ids, item.spec.temperature, item.top_logprobs_num
        )

    def _request(self, item: ParsedGenerate, i: int, loop, fut, progress: asyncio.Queue, stream: bool) -> Request:
        """The engine request of sequence `i`: `fut` resolves on the loop when it ends, and while
        streaming every new token (every stream_interval tokens) puts `i` on `progress`."""

        def done(req: Request) -> None:
            loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(req))
            if stream:
                loop.call_soon_threadsafe(progress.put_nowait, (i, None))

        def token(req: Request) -> None:
            n = len(req.output_ids)
            if n % req.spec.stream_interval == 0:
                loop.call_soon_threadsafe(progress.put_nowait, (i, n))

        gen = None
        if item.spec.sampling_seed is not None:
            gen = torch.Generator(device=self.engine.device)
            gen.manual_seed(item.spec.sampling_seed)
        req = Request(
            item.rid,
            item.input_ids,
            item.spec,
            done,
            generator=gen,
            top_logprobs_num=item.top_logprobs_num if item.return_logprob else 0,
            on_token=token if stream else None,
            priority=item.priority,
        )
        return req

    def _text(self, item: ParsedGenerate, req: Request) -> str:
        """The output text without the stop token or string that ended it (unless no_stop_trim),
        as SGLang's detokenizer trims it; `output_ids` keep the token."""
        matched = (req.finish or {}).get("matched")
        ids = req.output_ids
        if isinstance(matched, int) and not isinstance(matched, bool) and not item.spec.no_stop_trim and ids:
            ids = ids[:-1]
        text = self._decode(ids, item.spec.skip_special_tokens)
        if isinstance(matched, str) and not item.spec.no_stop_trim and matched in text:
            text = text[: text.index(matched)]
        return text

    def token_text(self, token: int) -> str:
        return self._decode([token], False)

    def _response(self, item: ParsedGenerate, req: Request, prompt_lp, index=None) -> Dict[str, Any]:
        text = self._text(item, req)
        return build_response(req, item, self.engine.version, text, self.token_text, prompt_lp, index)

    # ---- OpenAI-compatible routes (openai_api.py) ----
    def _check_model(self, name: str) -> None:
        if name not in (self.meta.model_path, os.path.basename(self.meta.model_path.rstrip(os.sep))):
            raise BadRequest(
                f"model: the model `{name}` does not exist; this server serves {self.meta.model_path!r}", 404
            )

    def _prompt_ids(self, prompts: List[List[int]], where: str) -> List[List[int]]:
        for i, p in enumerate(prompts):
            check_prompt(
                p, f"{where}[{i}]" if len(prompts) > 1 else where, self.meta.vocab_size, self.meta.max_context_len
            )
        return prompts

    async def v1_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_card()]})

    async def v1_model(self, request: web.Request) -> web.Response:
        self._check_model(request.match_info["model"])
        return web.json_response(self._model_card())

    def _model_card(self) -> Dict[str, Any]:
        return {
            "id": self.meta.model_path,
            "object": "model",
            "created": self.started,
            "owned_by": "areal-mem",
            "root": self.meta.model_path,
            "max_model_len": self.meta.max_context_len,
        }

    async def v1_completions(self, request: web.Request) -> web.StreamResponse:
        b = openai_api.parse(openai_api.CompletionBody, await self._json(request))
        self._check_model(b.model)
        p = b.prompt
        if isinstance(p, str) or (isinstance(p, list) and p and all(isinstance(x, str) for x in p)):
            prompts = [self.encode(t) for t in ([p] if isinstance(p, str) else p)]
        else:
            prompts = [p] if not p or isinstance(p[0], int) else p
        self._prompt_ids(prompts, "prompt")
        items = openai_api.items_of(prompts, openai_api.spec_of(b, b.max_tokens, 16), b.n, b.logprobs)

        def choice(i: int, req: Request, text: str) -> Dict[str, Any]:
            lp = self._completion_logprobs(req) if b.logprobs is not None else None
            return {"index": i, "text": text, "logprobs": lp, **openai_api.finish_fields(req)}

        return await self._openai(request, b, "text_completion", "cmpl", prompts, items, choice)

    async def v1_chat_completions(self, request: web.Request) -> web.StreamResponse:
        b = openai_api.parse(openai_api.ChatBody, await self._json(request))
        self._check_model(b.model)
        if b.top_logprobs is not None and not b.logprobs:
            raise BadRequest("top_logprobs: needs logprobs=true")
        prompts = self._prompt_ids([self._chat_prompt(b.messages)], "messages")
        max_tokens = b.max_completion_tokens if b.max_completion_tokens is not None else b.max_tokens
        default = self.meta.max_context_len - len(prompts[0])
        top = (b.top_logprobs or 0) if b.logprobs else None
        items = openai_api.items_of(prompts, openai_api.spec_of(b, max_tokens, default), b.n, top)

        def choice(i: int, req: Request, text: str) -> Dict[str, Any]:
            lp = {"content": self._chat_logprobs(req)} if b.logprobs else None
            message = {"role": "assistant", "content": text}
            return {"index": i, "message": message, "logprobs": lp, **openai_api.finish_fields(req)}

        return await self._openai(request, b, "chat.completion", "chatcmpl", prompts, items, choice)

    def _chat_prompt(self, messages) -> List[int]:
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise BadRequest("messages: this model has no chat template; use /v1/completions")
        convo = []
        for i, m in enumerate(messages):
            content = m.content
            if isinstance(content, list):
                if any(part.get("type") != "text" for part in content):
                    raise BadRequest(f"messages[{i}].content: only text parts are supported")
                content = "".join(str(part.get("text", "")) for part in content)
            convo.append({"role": m.role, "content": content or "", **({"name": m.name} if m.name else {})})
        ids = self.tokenizer.apply_chat_template(convo, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def _completion_logprobs(self, req: Request) -> Dict[str, Any]:
        tokens = [self.token_text(t) for t in req.output_ids]
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        top = [{self.token_text(t): lp for lp, t in row} for row in req.top_logprobs] if req.top_logprobs_num else None
        return {"tokens": tokens, "token_logprobs": list(req.logprobs), "top_logprobs": top, "text_offset": offsets}

    def _chat_logprobs(self, req: Request) -> List[Dict[str, Any]]:
        def entry(lp: float, t: int) -> Dict[str, Any]:
            text = self.token_text(t)
            return {"token": text, "logprob": lp, "bytes": list(text.encode())}

        rows = req.top_logprobs if req.top_logprobs_num else [[] for _ in req.output_ids]
        return [
            {**entry(lp, t), "top_logprobs": [entry(a, b) for a, b in row]}
            for lp, t, row in zip(req.logprobs, req.output_ids, rows)
        ]

    async def _openai(self, request, b, kind: str, prefix: str, prompts, items, choice) -> web.StreamResponse:
        """Run `items`; answer one object with every choice, or (stream) chunks of text deltas."""
        rid, created, model = openai_api.new_id(prefix), openai_api.now(), b.model
        if not b.stream:
            reqs, _ = await self.run(items)
            failed = next((r for r in reqs if r.error is not None), None)
            if failed is not None:
                raise BadRequest(failed.error, 500)
            choices = [choice(i, r, self._text(it, r)) for i, (it, r) in enumerate(zip(items, reqs))]
            body = openai_api.envelope(kind, model, rid, created, choices)
            return web.json_response({**body, "usage": openai_api.usage(prompts, reqs)})
        chat = kind == "chat.completion"
        resp, sent, started = sse_response(), [""] * len(items), [False] * len(items)
        chunk_kind = "chat.completion.chunk" if chat else kind

        async def event(i: int, req: Request, _prompt_lp, finished: bool) -> None:
            if not resp.prepared:
                await resp.prepare(request)
            text = self._text(items[i], req)
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
            out = openai_api.envelope(chunk_kind, model, rid, created, [c])
            await resp.write(b"data: " + json.dumps(out).encode() + b"\n\n")

        reqs, _ = await self.run(items, event)
        if (b.stream_options or {}).get("include_usage"):
            if not resp.prepared:
                await resp.prepare(request)
            last = {
                **openai_api.envelope(chunk_kind, model, rid, created, []),
                "usage": openai_api.usage(prompts, reqs),
            }
            await resp.write(b"data: " + json.dumps(last).encode() + b"\n\n")
        return await end_sse(resp, request)

    async def server_info(self, request: web.Request) -> web.Response:
        """SGLang's /server_info fields that apply to one embedded engine."""
        e = self.engine
        return web.json_response(
            {
                "model_path": self.meta.model_path,
                "served_model_name": self.meta.model_path,
                "tokenizer_path": self.meta.model_path,
                "max_context_length": self.meta.max_context_len,
                "max_total_num_tokens": e.max_batch_size * self.meta.max_context_len,
                "max_running_requests": e.max_batch_size,
                "version": f"areal-mem-embedded {__version__}",
                "host": self.host,
                "port": self.port,
                "tp_size": 1,
                "dp_size": 1,
                "device": e.device.type,
                "dtype": str(next(e.model.parameters()).dtype).removeprefix("torch."),
                "weight_version": e.version,
                "incremental_streaming_output": False,
                "disaggregation_mode": "null",
                "internal_states": [{"engine_stats": e.stats(), "paused": e.paused, "in_flight": e.in_flight()}],
                "startup_time": self.started,
                "frontend": "areal-mem",
            }
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_path": self.meta.model_path,
                "tokenizer_path": self.meta.model_path,
                "served_model_name": self.meta.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": self.engine.version,
                "max_context_length": self.meta.max_context_len,
                "engine_stats": self.engine.stats(),  # busy/idle seconds for `areal-mem bench async`
            }
        )

    async def pause_generation(self, request: web.Request) -> web.Response:
        mode = parse_body(PauseGeneration, await self._json(request)).mode
        n = await asyncio.to_thread(self.engine.pause, mode)
        return web.json_response({"success": True, "message": f"paused ({mode}); {n} in flight"})

    async def continue_generation(self, request: web.Request) -> web.Response:
        await self._json(request)  # no fields, but a malformed body is still refused
        self.engine.resume()
        return web.json_response({"success": True, "message": "continued"})

    async def abort_request(self, request: web.Request) -> web.Response:
        body = parse_body(Abort, await self._json(request))
        message = body.abort_message or "Abort by /abort_request"
        n = await asyncio.to_thread(self.engine.abort, None if body.abort_all else body.rid or "", message)
        return web.json_response({"success": n > 0})

    async def _update(self, request: web.Request, model, load) -> web.Response:
        """Shared body of the weight-update routes: `load(body)` returns tensors (off the loop)."""
        try:
            body = parse_body(model, await self._json(request))
            named, complete = await load(body)
            if body.abort_all_requests:
                await asyncio.to_thread(self.engine.abort, None, "Abort by weight update")
            await asyncio.to_thread(self.engine.load_weights, named, body.weight_version, complete)
        except (BadRequest, WeightLoadError, ValueError, OSError, RuntimeError, TypeError) as e:
            return self._failed(e)
        log.info("%s: loaded %d tensors, weight_version %s", request.path, len(named), self.engine.version)
        held = self.engine.in_flight() if self.engine.paused else 0
        return web.json_response(
            {
                "success": True,
                "num_paused_requests": held,
                "message": f"loaded {len(named)} tensors, weight_version {self.engine.version}",
            }
        )

    async def update_weights_from_disk(self, request: web.Request) -> web.Response:
        async def load(body: UpdateWeightFromDisk):
            if not body.model_path or "\0" in body.model_path:
                raise BadRequest("model_path: expected a folder path")
            real = allowed_path(body.model_path, self.weights_dirs)
            return await asyncio.to_thread(load_safetensors_dir, real), True

        return await self._update(request, UpdateWeightFromDisk, load)

    async def update_weights_from_distributed(self, request: web.Request) -> web.Response:
        async def load(body: UpdateWeightsFromDistributed):
            if not len(body.names) == len(body.dtypes) == len(body.shapes):
                raise BadRequest("names, dtypes and shapes must be lists of the same length")
            if not all(0 <= x < 2**40 for s in body.shapes for x in s):
                raise BadRequest("shapes: sizes must be in 0..2**40")
            group = self.groups.get(body.group_name)
            if group is None:
                raise BadRequest(
                    f"group_name {body.group_name[:80]!r}: no such weight-update group; "
                    f"call /init_weights_update_group first (have {sorted(self.groups)})"
                )
            meta = BucketMeta(body.names, body.dtypes, body.shapes)
            return await asyncio.to_thread(group.receive_bucket, meta, self.engine.device), False

        return await self._update(request, UpdateWeightsFromDistributed, load)

    async def init_weights_update_group(self, request: web.Request) -> web.Response:
        try:
            b = parse_body(InitWeightsUpdateGroup, await self._json(request))
            if not 1 <= b.master_port <= 65535:
                raise BadRequest(f"master_port: {b.master_port} is not a port (1..65535)")
            if not 2 <= b.world_size <= 1 << 16 or not 1 <= b.rank_offset < b.world_size:
                raise BadRequest(
                    f"world_size {b.world_size}, rank_offset {b.rank_offset}: need "
                    f"2 <= world_size and 1 <= rank_offset < world_size (the trainer is rank 0)"
                )
            if not b.master_address or not b.group_name:
                raise BadRequest("master_address and group_name must not be empty")
            if b.group_name in self.groups:
                raise BadRequest(f"group {b.group_name!r} already exists")
            backend = b.backend or ("nccl" if self.engine.device.type == "cuda" else "gloo")
            if backend not in WEIGHT_BACKENDS:
                raise BadRequest(f"backend: expected one of {WEIGHT_BACKENDS}, got {backend[:60]!r}")
            group = await asyncio.to_thread(
                WeightGroup.join,
                b.master_address,
                b.master_port,
                b.world_size,
                b.rank_offset,
                b.group_name,
                backend,
                self.group_timeout_s,
            )
        except (BadRequest, ValueError, RuntimeError, OSError, TypeError) as e:
            return self._failed(e)
        self.groups[b.group_name] = group
        return web.json_response({"success": True, "message": f"joined {b.group_name} as rank {group.rank}"})

    async def weights_checker(self, request: web.Request) -> web.Response:
        """SGLang's `/weights_checker`, action `checksum`, in SGLang's answer shape, each checksum
        an `areal_mem.weight_fingerprint` of the tensor as served, keyed by its HF name (the names
        the learner pushes), so the learner can compare it with what it pushed. The weights are
        read as they are: the publisher asks after every push's answer, while generation is paused."""
        try:
            body = parse_body(CheckWeights, await self._json(request))
            skip = body.skip_tensor_list or []
            named = [(n, p) for n, p in self.engine.model.named_parameters() if not any(s in n for s in skip)]
            t0 = time.monotonic()
            checksums = await asyncio.to_thread(fingerprints, named)
        except (BadRequest, ValueError) as e:
            return self._failed(e)
        overall = hashlib.sha256()  # SGLang's per_gpu_checksum: over the sorted names and checksums
        for name in sorted(checksums):
            overall.update(name.encode())
            overall.update(checksums[name].encode())
        per_gpu = overall.hexdigest()
        rank = {
            "checksums": checksums,
            "per_gpu_checksum": per_gpu,
            "parallelism_info": [ONE_RANK],
        }
        return web.json_response(
            {
                "success": True,
                "message": f"checksum of {len(checksums)} tensors in {time.monotonic() - t0:.3f} s",
                "ranks": [rank],
                "per_engine_checksum": hashlib.sha256(per_gpu.encode()).hexdigest(),
            }
        )

    async def update_weight_version(self, request: web.Request) -> web.Response:
        body = parse_body(UpdateWeightVersion, await self._json(request))
        if body.abort_all_requests:
            await asyncio.to_thread(self.engine.abort, None, "Abort by /update_weight_version")
        await asyncio.to_thread(self.engine.set_version, body.new_version)
        return web.json_response({"success": True, "message": f"weight_version {body.new_version}"})

    async def flush_cache(self, request: web.Request) -> web.Response:
        await self._json(request)  # no fields, but a malformed body is still refused
        n = self.engine.in_flight()
        if n:
            return self._bad(f"Cache not flushed because there are {n} pending requests")
        await asyncio.to_thread(self.engine.flush_prefix_cache)
        return web.json_response({"success": True, "message": "Cache flushed."})

    def app(self) -> web.Application:
        app = web.Application(
            middlewares=[json_errors_middleware(error_body), bearer_auth_middleware(self.token), self._bad_requests],
            client_max_size=MAX_BODY_BYTES,
        )
        app.add_routes(
            [
                web.post("/generate", self.generate),
                web.get("/v1/models", self.v1_models),
                web.get("/v1/models/{model:.+}", self.v1_model),
                web.post("/v1/completions", self.v1_completions),
                web.post("/v1/chat/completions", self.v1_chat_completions),
                web.get("/server_info", self.server_info),
                web.get("/get_server_info", self.server_info),
                web.get("/health", self.health),
                web.get("/health_generate", self.health),
                web.get("/model_info", self.model_info),
                web.get("/get_model_info", self.model_info),
                web.post("/pause_generation", self.pause_generation),
                web.post("/continue_generation", self.continue_generation),
                web.post("/abort_request", self.abort_request),
                web.post("/update_weights_from_disk", self.update_weights_from_disk),
                web.post("/init_weights_update_group", self.init_weights_update_group),
                web.post("/update_weights_from_distributed", self.update_weights_from_distributed),
                web.post("/update_weight_version", self.update_weight_version),
                web.get("/weights_checker", self.weights_checker),
                web.post("/weights_checker", self.weights_checker),
                web.get("/flush_cache", self.flush_cache),
                web.post("/flush_cache", self.flush_cache),
            ]
        )
        app.on_cleanup.append(self._cleanup)
        return app

    async def _cleanup(self, app) -> None:
        for g in self.groups.values():
            g.close()
        await asyncio.to_thread(self.engine.stop)


def build_server(
    model_path: str, cfg: EmbeddedConfig, token: str = "", weight_version: str = "0", weights_dirs: Sequence[str] = ()
) -> GeneratorServer:
    """Load the model (and its tokenizer, if the folder has one) and start the engine.
    `weights_dirs`: where /update_weights_from_disk may load from (default: the model's folder);
    the command passes `cfg.weights_dirs` or its defaults."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    device = cfg.device if cfg.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
    hf = AutoConfig.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, cfg.dtype)).to(device)
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
    decode = (lambda ids: tokenizer.decode(ids, skip_special_tokens=False)) if tokenizer else None
    engine = Engine(model, eos, cfg.max_batch_size, ctx, decode, weight_version, cfg.prefix_cache_tokens).start()
    meta = ModelMeta(model_path, int(hf.vocab_size), ctx)
    return GeneratorServer(
        engine, meta, tokenizer, token, cfg.weight_group_timeout_s, list(weights_dirs) or [model_path]
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
    # handler_cancellation: a client that hangs up cancels its handler, which aborts its request
    runner = web.AppRunner(server.app(), handle_signals=False, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server.host, server.port = host, site._server.sockets[0].getsockname()[1]
    url = f"http://{host}:{server.port}"
    print(
        f"areal-mem generator: serving {server.meta.model_path} on {url} (weight_version {server.engine.version})",
        flush=True,
    )
    if on_ready:
        on_ready(url)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
