"""One asyncio client for every generator: real SGLang servers and the embedded server.

It speaks SGLang's native HTTP API only. Requests go to the server with the fewest
outstanding requests, except that a `sticky_key` (a trajectory id) keeps going to the server
that served it before, so that server's prefix cache is reused. A server that fails (connection
error, 5xx, timeout) is skipped for a cool-down and the request is resent elsewhere, at most
`max_retries` times. A request that comes back aborted because a weight update paused the
server is resent with its tokens so far appended and the remaining budget; each token keeps
the weight version the server reported for it, so one result can span several versions.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Sequence

import aiohttp

from areal_mem.config.generator import GeneratorApi, GeneratorConfig
from areal_mem.config.loading import ConfigError
from areal_mem.generation import REQUEST_PRIORITY, GenerationResult, GeneratorError, SamplingParams
from areal_mem.http_session import PooledSession
from areal_mem.security import auth_headers

log = logging.getLogger(__name__)

PAUSE_MODES = ("abort", "retract", "in_place")
TOKEN_ENV = "AREAL_MEM_GENERATOR_TOKEN"  # the shared token, kept off command lines
STICKY_CAPACITY = 65536  # trajectories remembered for stickiness (least recently used forgotten)
# Called with (route, JSON payload) for every request sent / response received (contract tests).
Hook = Callable[[str, Any], None]


class GeneratorUnavailable(GeneratorError):
    """No server could serve the request within `max_retries` attempts."""


class _ServerDown(Exception):
    pass


@dataclass
class _Server:
    url: str
    outstanding: int = 0
    down_until: float = 0.0


def parse_version(value: Any) -> int:
    """SGLang reports versions as strings; SGLang's never-set "default" is version 0."""
    if value is None or value == "default":
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        raise GeneratorError(f"weight_version {value!r} is not an integer") from None


def token_versions(meta: Dict[str, Any], n: int) -> List[int]:
    """Per-token versions of one response: `weight_versions` spans if given, else `weight_version`."""
    spans = meta.get("weight_versions") or []
    if not spans:
        return [parse_version(meta.get("weight_version"))] * n
    out = [parse_version(spans[-1]["version"])] * n
    for span in spans:
        v = parse_version(span["version"])
        for i in range(max(0, span["start"]), min(n, span["end"])):
            out[i] = v
    return out


class GeneratorClient(PooledSession):
    def __init__(
        self,
        urls: Sequence[str],
        token: str = "",
        timeout_s: float = 300.0,
        max_retries: int = 3,
        cooldown_s: float = 5.0,
        flush_retry_s: float = 0.2,
        on_request: Optional[Hook] = None,
        on_response: Optional[Hook] = None,
        priority: Optional[int] = None,
        lora_path: Optional[str] = None,
    ):
        """`priority`: SGLang's request priority on every /generate (larger first; None sends none),
        unless the caller's context sets one (`areal_mem.generation.REQUEST_PRIORITY`).
        `lora_path`: the LoRA adapter every /generate names (the learner's, `generator.lora.adapter`)."""
        if not urls:
            raise ValueError("GeneratorClient needs at least one server url")
        self.servers = [_Server(u.rstrip("/")) for u in urls]
        self.token = token or os.environ.get(TOKEN_ENV, "")
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.cooldown_s, self.flush_retry_s = cooldown_s, flush_retry_s
        self.on_request, self.on_response = on_request, on_response
        self.priority = priority
        self.lora_path = lora_path
        self._sticky: OrderedDict[str, _Server] = OrderedDict()
        self._rid_server: Dict[str, _Server] = {}
        self._active: set = set()  # rids of this client's generate calls in progress
        self._cancelled: set = set()  # ... of those, the ones abort_request ended on purpose
        super().__init__(auth_headers(self.token), timeout_s)

    # ---- plumbing ----
    @property
    def urls(self) -> List[str]:
        return [s.url for s in self.servers]

    async def _call(self, server: _Server, method: str, route: str, payload: Optional[dict] = None):
        """One HTTP call. Raises `_ServerDown` (retryable) or `GeneratorError` (4xx)."""
        if payload is not None and self.on_request:
            self.on_request(route, payload)
        try:
            async with self._http().request(method, server.url + route, json=payload) as resp:
                text = await resp.text()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as e:
            raise _ServerDown(f"{server.url}{route}: {type(e).__name__}: {e}") from e
        try:  # SGLang answers some routes (/health, /flush_cache) with plain text
            body = json.loads(text) if text else None
        except ValueError:
            body = text
        if status >= 500:
            raise _ServerDown(f"{server.url}{route}: HTTP {status}: {body}")
        if status >= 400:
            err = body.get("error", body) if isinstance(body, dict) else body
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise GeneratorError(f"{server.url}{route}: HTTP {status}: {msg}", status, server.url)
        if self.on_response and body is not None:
            self.on_response(route, body)
        return body

    def _pick(self, sticky_key: Optional[str]) -> _Server:
        now = time.monotonic()
        up = [s for s in self.servers if s.down_until <= now] or self.servers
        if sticky_key is not None:
            s = self._sticky.get(sticky_key)
            if s is not None and s in up:
                self._sticky.move_to_end(sticky_key)
                return s
        s = min(up, key=lambda s: s.outstanding)
        if sticky_key is not None:
            self._sticky[sticky_key] = s
            self._sticky.move_to_end(sticky_key)
            if len(self._sticky) > STICKY_CAPACITY:
                self._sticky.popitem(last=False)
        return s

    def forget(self, sticky_key: str) -> None:
        """Drop a finished trajectory's stickiness."""
        self._sticky.pop(sticky_key, None)

    # ---- generation ----
    async def generate(
        self, input_ids: List[int], sampling: SamplingParams, rid: str | None = None, sticky_key: str | None = None
    ) -> GenerationResult:
        rid = rid or uuid.uuid4().hex
        self._active.add(rid)
        try:
            return await self._generate(input_ids, sampling, rid, sticky_key)
        finally:
            self._active.discard(rid)
            self._cancelled.discard(rid)

    def _payload(self, input_ids: List[int], out_ids: List[int], sampling: SamplingParams, rid: str) -> dict:
        """The `/generate` body of one attempt: the prompt and the tokens already generated (a
        resend after a pause or a failure continues them), within what is left of the budget."""
        params = replace(sampling, max_new_tokens=sampling.max_new_tokens - len(out_ids))
        if sampling.min_new_tokens:
            params.min_new_tokens = max(0, sampling.min_new_tokens - len(out_ids))
        payload: dict = {
            "input_ids": list(input_ids) + out_ids,
            "sampling_params": params.to_sglang(),
            "return_logprob": True,
            "rid": rid,
        }
        priority = REQUEST_PRIORITY.get()
        priority = self.priority if priority is None else priority
        if priority is not None:
            payload["priority"] = priority
        if self.lora_path:
            payload["lora_path"] = self.lora_path
        return payload

    async def _generate(
        self, input_ids: List[int], sampling: SamplingParams, rid: str, sticky_key: Optional[str]
    ) -> GenerationResult:
        out_ids: List[int] = []
        logps: List[float] = []
        versions: List[int] = []
        failures = resumes = 0
        text, server_url = "", ""
        t0 = time.monotonic()

        def result(kind: str, matched=None) -> GenerationResult:
            return GenerationResult(
                output_ids=out_ids,
                logprobs=logps,
                versions=versions,
                finish_reason=kind,
                matched_stop=matched,
                prompt_tokens=len(input_ids),
                meta={
                    "rid": rid,
                    "server": server_url,
                    "resumes": resumes,
                    "failures": failures,
                    "e2e_latency": time.monotonic() - t0,
                    "text": text,
                },
            )

        while True:
            if rid in self._cancelled:  # aborted between two attempts
                return result("abort")
            payload = self._payload(input_ids, out_ids, sampling, rid)
            server = self._pick(sticky_key)
            server.outstanding += 1
            self._rid_server[rid] = server
            try:
                body = await self._call(server, "POST", "/generate", payload)
            except _ServerDown as e:
                server.down_until = time.monotonic() + self.cooldown_s
                failures += 1
                log.warning("generator failed (%d/%d): %s", failures, self.max_retries, e)
                if failures > self.max_retries:
                    raise GeneratorUnavailable(f"request {rid}: gave up after {failures} failures: {e}") from e
                if sticky_key is not None:
                    self._sticky.pop(sticky_key, None)
                await asyncio.sleep(min(2.0, 0.05 * 2**failures))
                continue
            finally:
                server.outstanding -= 1
                self._rid_server.pop(rid, None)
            server_url = server.url
            meta = body["meta_info"]
            entries = meta.get("output_token_logprobs") or []
            ids = [e[1] for e in entries]
            if ids != body.get("output_ids", ids):
                raise GeneratorError(f"{server.url}: output_ids and output_token_logprobs disagree")
            out_ids += ids
            logps += [float(e[0]) for e in entries]
            versions += token_versions(meta, len(ids))
            text += body.get("text", "")
            finish = meta.get("finish_reason") or {"type": "abort"}
            kind = finish["type"]
            if kind == "abort":
                if len(out_ids) >= sampling.max_new_tokens:
                    kind = "length"  # aborted exactly when the budget ran out
                elif rid not in self._cancelled:
                    resumes += 1  # paused for a weight update: resend; the server holds it until continue
                    continue
            return result(kind, finish.get("matched"))

    # ---- admin calls (the learner's side); each goes to every server ----
    async def _all(
        self, method: str, route: str, payload: Optional[dict] = None, payloads: Optional[List[dict]] = None
    ) -> List[Any]:
        async def one(i: int, s: _Server):
            try:
                return await self._call(s, method, route, payloads[i] if payloads else payload)
            except _ServerDown as e:
                raise GeneratorError(str(e), 0, s.url) from e

        return list(await asyncio.gather(*(one(i, s) for i, s in enumerate(self.servers))))

    @staticmethod
    def _check_success(route: str, answers: List[Any], urls: List[str]) -> List[dict]:
        for url, a in zip(urls, answers):
            if not (isinstance(a, dict) and a.get("success")):
                raise GeneratorError(f"{url}{route} failed: {a}", 0, url)
        return answers

    async def pause(self, mode: str = "abort") -> None:
        if mode not in PAUSE_MODES:
            raise ValueError(f"pause mode must be one of {PAUSE_MODES}, not {mode!r}")
        await self._all("POST", "/pause_generation", {"mode": mode})

    async def continue_generation(self) -> None:
        await self._all("POST", "/continue_generation", {})

    async def abort_request(self, rid: str) -> None:
        """Abort one request; its `generate` returns what it has (finish_reason "abort")."""
        if rid in self._active:
            self._cancelled.add(rid)
        s = self._rid_server.get(rid)
        if s is None:  # not in flight from here (or between two attempts): ask every server
            await self._all("POST", "/abort_request", {"rid": rid})
            return
        try:
            await self._call(s, "POST", "/abort_request", {"rid": rid})
        except _ServerDown as e:
            raise GeneratorError(str(e), 0, s.url) from e

    async def update_weights_from_disk(self, path: str, version: int, abort_all_requests: bool = False) -> List[dict]:
        payload = {"model_path": path, "weight_version": str(version), "abort_all_requests": abort_all_requests}
        return self._check_success(
            "/update_weights_from_disk", await self._all("POST", "/update_weights_from_disk", payload), self.urls
        )

    async def init_weights_update_group(
        self, master_address: str, master_port: int, group_name: str, backend: str = "gloo", ranks_per_server: int = 1
    ) -> int:
        """Every server joins the group (rank 0 is the caller, who must join at the same time).

        Returns the group's world size: 1 + ranks_per_server x servers.
        """
        world = 1 + ranks_per_server * len(self.servers)
        payloads = [
            {
                "master_address": master_address,
                "master_port": master_port,
                "rank_offset": 1 + i * ranks_per_server,
                "world_size": world,
                "group_name": group_name,
                "backend": backend,
            }
            for i in range(len(self.servers))
        ]
        self._check_success(
            "/init_weights_update_group",
            await self._all("POST", "/init_weights_update_group", payloads=payloads),
            self.urls,
        )
        return world

    async def update_weights_from_distributed(
        self,
        names: List[str],
        dtypes: List[str],
        shapes: List[List[int]],
        group_name: str,
        version: int,
        flush_cache=False,
    ) -> List[dict]:
        """Announce a bucket; the caller broadcasts its tensors in this order meanwhile."""
        payload = {
            "names": names,
            "dtypes": dtypes,
            "shapes": shapes,
            "group_name": group_name,
            "weight_version": str(version),
            "flush_cache": flush_cache,
        }
        return self._check_success(
            "/update_weights_from_distributed",
            await self._all("POST", "/update_weights_from_distributed", payload),
            self.urls,
        )

    async def load_lora_adapter(self, name: str, path: str) -> List[dict]:
        """SGLang's `/load_lora_adapter` on every server: the PEFT folder `path` served as `name`."""
        answers = await self._all("POST", "/load_lora_adapter", {"lora_name": name, "lora_path": path})
        return self._check_success("/load_lora_adapter", answers, self.urls)

    async def unload_lora_adapter(self, name: str) -> List[dict]:
        answers = await self._all("POST", "/unload_lora_adapter", {"lora_name": name})
        return self._check_success("/unload_lora_adapter", answers, self.urls)

    async def update_weight_version(self, version: int) -> None:
        """Label what every server serves as `version` (after a LoRA push), requests kept."""
        await self._all("POST", "/update_weight_version", {"new_version": str(version), "abort_all_requests": False})

    async def flush_cache(self, timeout_s: float = 60.0) -> None:
        """Flush every server's cache, retrying while one answers 400 (requests in flight)."""
        deadline = time.monotonic() + timeout_s
        for s in self.servers:
            while True:
                try:
                    await self._call(s, "POST", "/flush_cache", None)
                    break
                except GeneratorError as e:
                    if e.status != 400 or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(self.flush_retry_s)
                except _ServerDown as e:
                    raise GeneratorError(str(e), 0, s.url) from e

    async def model_info(self) -> Dict[str, dict]:
        """url -> `/model_info` (model_path, weight_version, ...)."""
        return dict(zip(self.urls, await self._all("GET", "/model_info")))

    async def weight_versions(self) -> Dict[str, int]:
        return {u: parse_version(i.get("weight_version")) for u, i in (await self.model_info()).items()}

    async def weight_checksums(self) -> Dict[str, Dict[str, str]]:
        """url -> {tensor name: checksum} from SGLang's `/weights_checker` (action `checksum`), the
        ranks of one server merged. The embedded server's checksums are `areal_mem.weight_fingerprint`s."""
        answers = await self._all("POST", "/weights_checker", {"action": "checksum"})
        self._check_success("/weights_checker", answers, self.urls)
        out: Dict[str, Dict[str, str]] = {}
        for url, a in zip(self.urls, answers):
            ranks = a.get("ranks")
            if not isinstance(ranks, list) or not all(
                isinstance(r, dict) and isinstance(r.get("checksums"), dict) for r in ranks
            ):
                raise GeneratorError(f"{url}/weights_checker: no ranks[].checksums in the answer", 0, url)
            out[url] = {n: str(c) for r in ranks for n, c in r["checksums"].items()}
        return out

    async def health(self) -> Dict[str, bool]:
        """url -> healthy; a healthy answer also ends a server's cool-down."""

        async def one(s: _Server) -> bool:
            try:
                await self._call(s, "GET", "/health")
            except (_ServerDown, GeneratorError):
                return False
            s.down_until = 0.0
            return True

        return dict(zip(self.urls, await asyncio.gather(*(one(s) for s in self.servers))))


def client_from_config(
    cfg: GeneratorConfig,
    urls: Optional[Sequence[str]] = None,
    tokenizer=None,
    generation_only: bool = False,
    priority: Optional[int] = None,
    **hooks,
):
    """A client for `urls` (default `cfg.urls`) with a `GeneratorConfig`'s timeouts and retries:
    SGLang's native API, or (`generator.api: openai`, `generation_only` callers such as
    evaluation, which pass the run's tokenizer) an OpenAI-compatible server's completions."""
    if cfg.api == GeneratorApi.openai:
        if not generation_only:
            raise ConfigError(
                "generator.api=openai is for evaluation only: training needs token ids, behaviour "
                "log-probs, weight versions and the admin routes of the native API (generator.api=native)"
            )
        from .openai_client import OpenAICompletionsClient

        return OpenAICompletionsClient(
            list(urls or cfg.urls), tokenizer, cfg.served_model, cfg.token, cfg.client.timeout_s, cfg.client.max_retries
        )
    return GeneratorClient(
        list(urls or cfg.urls),
        token=cfg.token,
        timeout_s=cfg.client.timeout_s,
        max_retries=cfg.client.max_retries,
        cooldown_s=cfg.client.cooldown_s,
        flush_retry_s=cfg.client.flush_retry_s,
        priority=priority,
        lora_path=cfg.lora.adapter or None,
        **hooks,
    )
