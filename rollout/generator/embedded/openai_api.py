"""The OpenAI-compatible routes SGLang and vLLM serve, over the embedded engine.

`/v1/models`, `/v1/completions` and `/v1/chat/completions` (the served model's chat template)
with `max_tokens` (chat: also `max_completion_tokens`), `temperature`, `top_p`, `n`, `stop`,
`seed`, `logprobs` (completions: the top-k count; chat: a flag with `top_logprobs`),
`stream` (SSE chunks of text deltas, `data: [DONE]`, usage with `stream_options.include_usage`)
and usage counts. The bodies are pydantic models that refuse unknown fields by name, so a
field this server does not implement (a penalty, `logit_bias`, `echo`, tools...) is never
silently dropped; the sampling extras SGLang and vLLM accept (`top_k`, `min_p`, `ignore_eos`,
`min_tokens`, `stop_token_ids`, `skip_special_tokens`) are honoured.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import BadRequest
from .protocol import INT64, ParsedGenerate
from .request import Request
from .sampling import ALL_TOKENS, SamplingSpec

MAX_TOP_LOGPROBS = 20  # OpenAI's bound


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    max_tokens: Optional[int] = Field(None, ge=0, le=INT64)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=128)
    stop: Optional[Union[str, List[str]]] = None
    seed: Optional[int] = Field(None, ge=0, lt=2**64)
    stream: bool = False
    stream_options: Optional[Dict[Literal["include_usage"], bool]] = None
    user: Optional[str] = None  # an end-user id for the caller's own records; nothing to do here
    presence_penalty: float = Field(0.0, ge=0.0, le=0.0)  # only the neutral value
    frequency_penalty: float = Field(0.0, ge=0.0, le=0.0)
    # SGLang's and vLLM's sampling extras (sent by clients through extra_body)
    top_k: int = Field(-1, ge=-INT64, le=INT64)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    min_tokens: int = Field(0, ge=0, le=INT64)
    ignore_eos: bool = False
    stop_token_ids: List[int] = []
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True


class CompletionBody(_Sampling):
    prompt: Union[str, List[str], List[int], List[List[int]]]
    logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Union[str, List[Dict[str, Any]], None] = None
    name: Optional[str] = None


class ChatBody(_Sampling):
    messages: List[ChatMessage] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=0, le=INT64)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)


def parse(model, body: Any):
    """The body as `model`, or a 400 naming the first bad field (OpenAI's error shape)."""
    try:
        return model.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        if err["type"] == "extra_forbidden":
            raise BadRequest(f"{where}: not supported by the embedded generator") from None
        raise BadRequest(f"{where}: {err['msg']}") from None


def spec_of(b: _Sampling, max_tokens: Optional[int], default_max: int) -> SamplingSpec:
    stop = [b.stop] if isinstance(b.stop, str) else list(b.stop or [])
    if not all(stop) or len(stop) > 4:
        raise BadRequest("stop: up to 4 non-empty strings")
    if b.top_k == 0 or b.top_k < -1:
        raise BadRequest("top_k: -1 (all) or >= 1")
    return SamplingSpec(
        max_new_tokens=default_max if max_tokens is None else max_tokens,
        temperature=b.temperature,
        top_p=b.top_p,
        top_k=ALL_TOKENS if b.top_k == -1 else b.top_k,
        min_p=b.min_p,
        min_new_tokens=b.min_tokens,
        stop=stop,
        stop_token_ids=list(b.stop_token_ids),
        ignore_eos=b.ignore_eos,
        skip_special_tokens=b.skip_special_tokens,
        sampling_seed=b.seed,
        spaces_between_special_tokens=b.spaces_between_special_tokens,
    )


def items_of(prompts: List[List[int]], spec: SamplingSpec, n: int, top_k: Optional[int]) -> List[ParsedGenerate]:
    """OpenAI's choice order: prompt i's n choices at i*n .. i*n+n-1 (seeds seed, seed+1, ...)."""
    out = []
    for prompt in prompts:
        for j in range(n):
            seed = None if spec.sampling_seed is None else (spec.sampling_seed + j) % 2**64
            s = SamplingSpec(**{**spec.__dict__, "sampling_seed": seed})
            out.append(ParsedGenerate(None, prompt, s, top_k is not None, -1, top_k or 0, origin=""))
    return out


# the OpenAI names of the engine's fields, for the shared checks' messages (`RequestValidator.items`)
COMPLETION_NAMES = {
    "max_new_tokens": "max_tokens",
    "min_new_tokens": "min_tokens",
    "sampling_seed": "seed",
    "top_logprobs_num": "logprobs",
}
CHAT_NAMES = {**COMPLETION_NAMES, "top_logprobs_num": "top_logprobs"}


def finish_reason(req: Request) -> Optional[str]:
    kind = (req.finish or {}).get("type")
    return {"stop": "stop", "length": "length", "abort": "abort"}.get(kind) if kind else None


def finish_fields(req: Request) -> Dict[str, Any]:
    """`finish_reason`, and SGLang's `matched_stop` (the stop token id or string) when one ended it."""
    out: Dict[str, Any] = {"finish_reason": finish_reason(req)}
    matched = (req.finish or {}).get("matched")
    if matched is not None:
        out["matched_stop"] = matched
    return out


def usage(prompts: List[List[int]], reqs: List[Request]) -> Dict[str, int]:
    p, c = sum(len(x) for x in prompts), sum(len(r.output_ids) for r in reqs)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def envelope(kind: str, model: str, rid: str, created: int, choices: list) -> Dict[str, Any]:
    return {"id": rid, "object": kind, "created": created, "model": model, "choices": choices}


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())
