"""The one object every route family shares: the engine behind the embedded server.

The engine (its step loop, pause state and weight version live there), the served model's
metadata and text codec, the weight-update groups and the address served are held here once;
the native, OpenAI and admin routes each take this object and keep no state of their own.
`run` is how a route generates: it never blocks the event loop (the engine runs in its own
thread and a finished request wakes its handler through the loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from areal_mem.config.generator import EmbeddedConfig
from areal_mem.weight_transport import WeightGroup

from .codec import TextCodec
from .engine import Engine
from .errors import BadRequest, RequestError
from .protocol import ParsedGenerate
from .request import Request


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


class EngineService:
    def __init__(
        self,
        engine: Engine,
        meta: ModelMeta,
        codec: TextCodec,
        group_timeout_s: float = 600.0,
        weights_dirs: Sequence[str] = (),
        limits: Optional[EmbeddedConfig] = None,
    ):
        self.engine, self.meta, self.codec = engine, meta, codec
        self.limits = limits or EmbeddedConfig()  # the request limits (generator.embedded.max_*)
        self.group_timeout_s = group_timeout_s
        # /update_weights_from_disk loads only inside these (absolute: the working folder may change)
        self.weights_dirs = [os.path.abspath(d) for d in weights_dirs]
        self.groups: Dict[str, WeightGroup] = {}
        # Weight-group joins and transfers wait on peers for up to minutes: each runs on a daemon
        # thread of its own (`peer_call`), never in asyncio's default executor (the control routes'
        # `to_thread` calls, which hung joins would starve), and none is waited for at exit
        # (SIGTERM stops the server at once). One join at a time: `joining` is the one in progress.
        self.joining: Optional[concurrent.futures.Future] = None
        self.abandoned_joins: set = set()  # joins answered (timed out) whose threads still wait
        self.host, self.port = "", 0  # where `serve` listens
        self.started = int(time.time())

    async def run(self, items: List[ParsedGenerate], on_event=None) -> Tuple[List[Request], list]:
        """Generate every sequence of `items` together; returns their finished engine requests
        and prompt log-probs. Without `on_event`, a sequence the engine failed fails the
        request (500). With `on_event`, `await on_event(i, req, prompt_lp, finished)` runs for
        every new token of sequence i (every stream_interval tokens) and once when it ends,
        failed or not. A client that goes away (cancelled handler, broken stream) aborts them all."""
        rids = [it.rid or uuid.uuid4().hex for it in items]
        items[:] = [dataclasses.replace(it, rid=rid) for it, rid in zip(items, rids)]
        if len(set(rids)) < len(rids):
            raise BadRequest(f"rid {next(r for r in rids if rids.count(r) > 1)!r} appears twice in the request")
        self._check_lora(items)
        busy = [r for r in rids if self.engine.has_rid(r)]
        if busy:
            raise BadRequest(f"rid {busy[0]!r} is already in flight")
        self._admission(len(items))
        scored: Dict[tuple, Any] = {}  # n samples of one prompt share its prompt log-probs
        keys = [(tuple(it.input_ids), it.spec.temperature, it.top_logprobs_num, wants_prompt(it)) for it in items]
        for key, it in zip(keys, items):
            if key not in scored:
                scored[key] = await self._prompt_logprobs(it)
        prompt_lps = [scored[key] for key in keys]
        loop = asyncio.get_running_loop()
        progress: asyncio.Queue = asyncio.Queue()
        futures = [loop.create_future() for _ in items]
        stream = on_event is not None
        reqs = [self._request(it, i, loop, futures[i], progress, stream) for i, it in enumerate(items)]
        self._admission(len(items))  # again: other requests queued while the prompts were scored
        for req in reqs:
            self.engine.submit(req)
        thin, sent = self.limits.stream_thinning, [0] * len(reqs)
        try:
            left = len(reqs) if stream else 0
            while left:
                i, n = await progress.get()  # n: tokens at the event; None: the sequence ended
                if n is not None and thin and n - sent[i] < sent[i] // thin:
                    continue  # cumulative chunks: one per 1/thin growth keeps a stream's bytes linear
                if n is not None:
                    sent[i] = n
                view = reqs[i] if n is None else snapshot(reqs[i], n)
                await on_event(i, view, prompt_lps[i], n is None)
                left -= n is None
            await asyncio.gather(*futures)
        except (asyncio.CancelledError, ConnectionError):  # the client went away: stop its requests
            await asyncio.to_thread(self.engine.abort_many, rids, "client disconnected")  # one pass
            raise
        errors = [r.error for r in reqs if r.error is not None]
        if errors and not stream:
            raise RequestError(errors[0], 500)
        return reqs, prompt_lps

    def _admission(self, n: int) -> None:
        """Refuse (503, as SGLang's full queue) a request whose sequences would take the waiting
        queue past `max_waiting_sequences`: the client retries later or elsewhere."""
        cap, waiting = self.limits.max_waiting_sequences, self.engine.waiting()
        if waiting + n > cap:
            raise RequestError(
                f"The request queue is full: {waiting} sequences wait, this request adds {n}, the limit is "
                f"{cap} (generator.embedded.max_waiting_sequences); retry later",
                503,
            )

    def _check_lora(self, items: List[ParsedGenerate]) -> None:
        """`lora_path` names an adapter this server serves (while generation is paused, a push
        may be replacing it: the name is checked again when the request starts)."""
        names = {it.lora for it in items if it.lora is not None}
        if not names:
            return
        lora = self.engine.lora
        if lora is None:
            raise BadRequest("lora_path is not supported by a generator started without LoRA (generator.lora.enabled)")
        unknown = sorted(n for n in names if n not in lora.loaded)
        if unknown and not self.engine.paused:
            raise BadRequest(f"lora_path: no LoRA adapter {unknown[0]!r:.80} is loaded (loaded: {lora.names()})")

    async def _prompt_logprobs(self, item: ParsedGenerate):
        if not wants_prompt(item):
            return None
        return await asyncio.to_thread(
            self.engine.prompt_logprobs, item.input_ids, item.spec.temperature, item.top_logprobs_num, item.lora
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
        assert item.rid is not None  # run() gave every item one
        return Request(
            item.rid,
            item.input_ids,
            item.spec,
            done,
            generator=gen,
            top_logprobs_num=item.top_logprobs_num if item.return_logprob else 0,
            on_token=token if stream else None,
            priority=item.priority,
            lora=item.lora,
        )

    async def close(self) -> None:
        """Leave the weight-update groups and stop the engine (the app's cleanup). A join or a
        transfer still waiting on its peer is abandoned (its thread is not waited for)."""
        for g in self.groups.values():
            g.close()
        await asyncio.to_thread(self.engine.stop)


def peer_call(fn, *args, name: str) -> concurrent.futures.Future:
    """`fn(*args)` on a daemon thread of its own: a call that waits on a network peer, which
    nothing (no executor shutdown, no interpreter exit) waits for in turn."""
    fut: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            fut.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting handler
            fut.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut


def wants_prompt(item: ParsedGenerate) -> bool:
    """Whether `item` asked for its prompt's log-probs (`logprob_start_len` >= 0)."""
    return item.return_logprob and item.logprob_start_len >= 0
