"""Generation through any OpenAI-compatible `/v1/completions` (vLLM, SGLang, the embedded server).

For evaluation only (`generator.api: openai`, `areal-mem eval`): the OpenAI API returns text,
not token ids, behaviour log-probs or weight versions, so the output ids are the text encoded
again with the run's tokenizer (plus the stop token that ended it, from SGLang's `matched_stop`
or vLLM's `stop_reason`), log-probs are 0 and versions -1. Training needs the native API
(`generator.api: native`); `client_from_config` refuses this client for it. The prompt goes as
token ids, so the chat template is the workflow's own, exactly as on the native API.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any, Dict, List, Optional, Sequence

import aiohttp

from areal_mem.generation import GenerationResult, GeneratorError, SamplingParams
from areal_mem.http_session import PooledSession
from areal_mem.security import auth_headers

log = logging.getLogger(__name__)


class OpenAICompletionsClient(PooledSession):
    def __init__(
        self,
        urls: Sequence[str],
        tokenizer: Any,
        model: str = "",
        token: str = "",
        timeout_s: float = 300.0,
        max_retries: int = 3,
    ) -> None:
        if not urls:
            raise ValueError("OpenAICompletionsClient needs at least one server url")
        if tokenizer is None:
            raise ValueError("OpenAICompletionsClient needs the run's tokenizer (the API returns text)")
        self.urls = [u.rstrip("/") for u in urls]
        self.tokenizer, self.model, self.max_retries = tokenizer, model, max_retries
        self._next = 0
        super().__init__(auth_headers(token), timeout_s)

    async def _post(self, url: str, route: str, body: Optional[dict] = None) -> Any:
        method = "POST" if body is not None else "GET"
        async with self._http().request(method, url + route, json=body) as resp:
            text = await resp.text()
            if resp.status >= 400:
                try:
                    err = json.loads(text).get("error", text)
                except (ValueError, AttributeError):
                    err = text
                msg = err.get("message", err) if isinstance(err, dict) else err
                raise GeneratorError(f"{url}{route}: HTTP {resp.status}: {msg}", resp.status, url)
            return json.loads(text)

    async def served_model(self, url: str) -> str:
        """`generator.served_model`, or the first model the server lists."""
        if not self.model:
            models = (await self._post(url, "/v1/models")).get("data") or []
            if not models:
                raise GeneratorError(f"{url}/v1/models lists no model; set generator.served_model")
            self.model = models[0]["id"]
        return self.model

    def _body(self, input_ids: List[int], sp: SamplingParams, model: str) -> Dict[str, Any]:
        if sp.no_stop_trim:
            raise ValueError("sampling no_stop_trim has no OpenAI equivalent; use generator.api=native")
        body: Dict[str, Any] = {
            "model": model,
            "prompt": list(input_ids),
            "max_tokens": sp.max_new_tokens,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
            "skip_special_tokens": False,  # the text is encoded again: keep every token in it
        }
        extras = {  # SGLang's and vLLM's extras, sent only when set
            "top_k": sp.top_k,
            "min_tokens": sp.min_new_tokens,
            "stop": sp.stop,
            "stop_token_ids": sp.stop_token_ids,
            "ignore_eos": sp.ignore_eos,
            "seed": sp.sampling_seed,
        }
        body.update({k: v for k, v in extras.items() if v not in (None, [], 0, False)})
        return body

    async def generate(
        self, input_ids: List[int], sampling: SamplingParams, rid: str | None = None, sticky_key: str | None = None
    ) -> GenerationResult:
        rid = rid or uuid.uuid4().hex
        for attempt in range(self.max_retries + 1):
            url = self.urls[self._next % len(self.urls)]
            self._next += 1
            try:
                body = self._body(input_ids, sampling, await self.served_model(url))
                out = await self._post(url, "/v1/completions", body)
                break
            except (TimeoutError, aiohttp.ClientError, ConnectionError) as e:
                if attempt == self.max_retries:
                    raise GeneratorError(f"request {rid}: gave up after {attempt + 1} failures: {e}") from e
                log.warning("openai generator %s failed (%d/%d): %s", url, attempt + 1, self.max_retries, e)
                await asyncio.sleep(min(2.0, 0.05 * 2 ** (attempt + 1)))
        choice = out["choices"][0]
        text = choice.get("text") or ""
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        finish = choice.get("finish_reason") or "abort"
        matched = choice.get("matched_stop", choice.get("stop_reason"))
        if finish == "stop" and isinstance(matched, int) and not isinstance(matched, bool):
            ids.append(matched)  # the stop token itself, as the native API's output ids have it
        finish = finish if finish in ("stop", "length") else "abort"
        return GenerationResult(
            output_ids=ids,
            logprobs=[0.0] * len(ids),
            versions=[-1] * len(ids),
            finish_reason=finish,
            matched_stop=matched,
            prompt_tokens=len(input_ids),
            meta={"rid": rid, "server": url, "text": text, "api": "openai"},
        )
