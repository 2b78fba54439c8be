"""SGLang's `/generate` request and response shapes, checked and built for the embedded server.

Checks follow SGLang 0.5.23's published contract (sglang/api/v1/api_types.py): unknown
`sampling_params` keys are refused with serde's text, the top level ignores keys it does
not know. Features the embedded server does not implement (streaming, batches, grammars,
penalties, n > 1, ...) are refused by name instead of being silently ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

from .engine import Request
from .sampling import ALL_TOKENS, SamplingSpec

# The fields of SGLang's SamplingParams, in the schema's order (serde lists them in errors).
SGLANG_SAMPLING_KEYS = (
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "stop_regex",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_new_tokens",
    "n",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "ignore_eos",
    "skip_special_tokens",
    "spaces_between_special_tokens",
    "no_stop_trim",
    "stream_interval",
    "logit_bias",
    "sampling_seed",
    "custom_params",
    "beam_width",
    "watermark",
    "choice",
)
# Accepted only at their neutral value.
_NEUTRAL = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0, "n": 1}
_UNSUPPORTED = (
    "stop_regex",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "logit_bias",
    "custom_params",
    "beam_width",
    "watermark",
    "choice",
)
INT64 = 2**63 - 1  # SGLang's integer fields are int64
_UNSUPPORTED_TOP = (
    "image_data",
    "video_data",
    "audio_data",
    "lora_path",
    "return_hidden_states",
    "token_ids_logprob",
    "session_params",
    "custom_logit_processor",
)


class BadRequest(ValueError):
    """Answered as HTTP 400 (or `status`) with SGLang's error shape."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def error_body(message: str, code: int = 400) -> Dict[str, Any]:
    return {"error": {"message": message, "code": code}}


def _typed(d: dict, key: str, kind, what: str, default=None):
    v = d.get(key)
    if v is None:
        return default
    ok = isinstance(v, kind) and not (isinstance(v, bool) and kind in (int, float, (int, float)))
    if not ok:
        raise BadRequest(f"{key}: expected {what}, got {type(v).__name__} {v!r:.60}")
    return v


def _number(d: dict, key: str, default: float) -> float:
    """A finite float (JSON's NaN/Infinity and ints too large for a float are refused)."""
    v = _typed(d, key, (int, float), "a number", default)
    try:
        v = float(v)
    except OverflowError:
        raise BadRequest(f"sampling_params.{key}: {v} is too large") from None
    if not math.isfinite(v):
        raise BadRequest(f"sampling_params.{key}: expected a finite number, got {v}")
    return v


def _bounded_int(d: dict, key: str, default, lo: int, hi: int):
    v = _typed(d, key, int, "an integer", default)
    if v is not None and not lo <= v <= hi:
        raise BadRequest(f"sampling_params.{key}: {v} is outside {lo}..{hi}")
    return v


def parse_sampling(sp: Any) -> SamplingSpec:
    if sp is None:
        return SamplingSpec()
    if not isinstance(sp, dict):
        raise BadRequest(f"sampling_params: expected an object, got {type(sp).__name__}")
    for key in sp:
        if key not in SGLANG_SAMPLING_KEYS:
            listed = ", ".join(f"`{f}`" for f in SGLANG_SAMPLING_KEYS)
            raise BadRequest(f"sampling_params: unknown field `{key}`, expected one of {listed}")
    for key in _UNSUPPORTED:
        if sp.get(key) not in (None, [], {}):
            raise BadRequest(f"sampling_params.{key} is not supported by the embedded generator")
    for key, neutral in _NEUTRAL.items():
        if sp.get(key) is not None and sp[key] != neutral:
            raise BadRequest(
                f"sampling_params.{key}={sp[key]!r} is not supported by the embedded generator (only {neutral})"
            )
    stop = _typed(sp, "stop", (str, list), "a string or a list of strings", [])
    stop = [stop] if isinstance(stop, str) else stop
    if not all(isinstance(s, str) and s for s in stop):
        raise BadRequest("sampling_params.stop: expected non-empty strings")
    stop_ids = _typed(sp, "stop_token_ids", list, "a list of token ids", [])
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise BadRequest("sampling_params.stop_token_ids: expected integers")
    spec = SamplingSpec(
        max_new_tokens=_bounded_int(sp, "max_new_tokens", 128, -INT64, INT64),
        temperature=_number(sp, "temperature", 1.0),
        top_p=_number(sp, "top_p", 1.0),
        top_k=_bounded_int(sp, "top_k", ALL_TOKENS, -INT64, INT64),
        min_p=_number(sp, "min_p", 0.0),
        min_new_tokens=_bounded_int(sp, "min_new_tokens", 0, -INT64, INT64),
        stop=stop,
        stop_token_ids=stop_ids,
        ignore_eos=_typed(sp, "ignore_eos", bool, "a boolean", False),
        skip_special_tokens=_typed(sp, "skip_special_tokens", bool, "a boolean", True),
        no_stop_trim=_typed(sp, "no_stop_trim", bool, "a boolean", False),
        sampling_seed=_bounded_int(sp, "sampling_seed", None, 0, 2**64 - 1),  # torch's seed range
    )
    _typed(sp, "spaces_between_special_tokens", bool, "a boolean")
    _typed(sp, "stream_interval", int, "an integer")
    if spec.max_new_tokens < 0:
        raise BadRequest("sampling_params.max_new_tokens must be >= 0")
    if spec.temperature < 0:
        raise BadRequest("sampling_params.temperature must be >= 0")
    if not 0.0 < spec.top_p <= 1.0:
        raise BadRequest("sampling_params.top_p must be in (0, 1]")
    if spec.top_k == 0 or spec.top_k < -1:
        raise BadRequest("sampling_params.top_k must be -1 (all) or >= 1")
    if not 0.0 <= spec.min_p <= 1.0:
        raise BadRequest("sampling_params.min_p must be in [0, 1]")
    if spec.min_new_tokens < 0:
        raise BadRequest("sampling_params.min_new_tokens must be >= 0")
    return spec


@dataclass
class ParsedGenerate:
    rid: Optional[str]
    input_ids: List[int]
    spec: SamplingSpec
    return_logprob: bool


def parse_generate(
    body: Any, vocab_size: int, max_context_len: int, encode: Optional[Callable[[str], List[int]]]
) -> ParsedGenerate:
    if not isinstance(body, dict):
        raise BadRequest(f"expected a JSON object, got {type(body).__name__}")
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise BadRequest("exactly one of `text` and `input_ids` must be given")
    if _typed(body, "stream", bool, "a boolean", False):
        raise BadRequest("stream=true is not supported by the embedded generator")
    for key in _UNSUPPORTED_TOP:
        if body.get(key) not in (None, False, [], {}):
            raise BadRequest(f"{key} is not supported by the embedded generator")
    if _typed(body, "top_logprobs_num", int, "an integer", 0):
        raise BadRequest("top_logprobs_num is not supported by the embedded generator")
    if text is not None:
        if not isinstance(text, str):
            raise BadRequest("text: batched requests are not supported; send one prompt per request")
        if encode is None:
            raise BadRequest("text: this model has no tokenizer; send input_ids")
        ids = encode(text)
    elif not isinstance(ids, list) or (ids and isinstance(ids[0], list)):
        raise BadRequest("input_ids: expected one list of token ids (batches are not supported)")
    if not ids:
        raise BadRequest("input_ids: the prompt is empty")
    for i, t in enumerate(ids):
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size:
            raise BadRequest(f"input_ids[{i}] = {t!r} is not a token id of this model (vocabulary size {vocab_size})")
    if len(ids) >= max_context_len:
        raise BadRequest(
            f"the prompt has {len(ids)} tokens; the model's context is {max_context_len} tokens (prompt and output)"
        )
    rid = _typed(body, "rid", str, "a string", None)
    spec = parse_sampling(body.get("sampling_params"))
    for t in spec.stop_token_ids:  # the engine indexes logits with them
        if not 0 <= t < vocab_size:
            raise BadRequest(
                f"sampling_params.stop_token_ids: {t} is not a token id of this model (vocabulary size {vocab_size})"
            )
    return ParsedGenerate(rid, ids, spec, _typed(body, "return_logprob", bool, "a boolean", False))


def build_response(req: Request, return_logprob: bool, version: str, text: str) -> Dict[str, Any]:
    meta: Dict[str, Any] = {
        "id": req.rid,
        "finish_reason": req.finish,
        "prompt_tokens": len(req.prompt_ids),
        "completion_tokens": len(req.output_ids),
        "cached_tokens": 0,
        "weight_version": req.spans[-1][0] if req.spans else version,
        "e2e_latency": req.finished_at - req.created,
    }
    if len(req.spans) > 1:
        meta["weight_versions"] = [{"version": v, "start": s, "end": e} for v, s, e in req.spans]
    if return_logprob:
        meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(req.logprobs, req.output_ids)]
    return {"text": text, "output_ids": list(req.output_ids), "meta_info": meta}
