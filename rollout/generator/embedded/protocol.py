"""SGLang's `/generate` request and response shapes, checked and built for the embedded server.

Checks follow SGLang 0.5.23's published contract (sglang/api/v1/api_types.py): unknown
`sampling_params` keys are refused with serde's text, the top level ignores keys it does
not know. Features the embedded server does not implement (streaming, batches, grammars,
penalties, n > 1, ...) are refused by name instead of being silently ignored.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from .errors import BadRequest
from .request import Request
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
_NEUTRAL = {"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0}
_UNSUPPORTED = (
    "stop_regex",
    "json_schema",
    "regex",
    "ebnf",
    "structural_tag",
    "logit_bias",
    "beam_width",
    "watermark",
    "choice",
)
INT64 = 2**63 - 1  # SGLang's integer fields are int64
# Top-level fields of SGLang's GenerateRequest the embedded server does not implement: each is
# refused by name unless absent or at its neutral value (`tests/generator/test_generate_fields.py`
# walks SGLang's schema so that a new field cannot slip through unclassified).
REFUSED_TOP = (
    "token_ids_logprob",
    "return_hidden_states",
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
    "bootstrap_pair_key",
    "decode_tp_size",
    "routed_dp_rank",
    "disagg_prefill_dp_rank",
    "image_data",
    "mm_hashes",
    "video_data",
    "audio_data",
    "require_reasoning",
    "session_params",
    "kv_hints",
    "routing_key",
    "max_thinking_tokens",
    "session_id",
    "custom_logit_processor",
    "custom_labels",
    "images_config",
    "return_sampling_mask",
    "modalities",
    "routed_experts_start_len",
)
# Prefix-cache namespaces: honoured trivially, this server shares no KV across requests.
CACHE_KEYS = ("extra_key", "cache_salt")
MAX_SEQUENCES = 1024  # n of one prompt (prompts x n: generator.embedded.max_sequences_per_request)
NO_PROMPT_LOGPROBS = -1  # SGLang's logprob_start_len default: output log-probs only


def _typed(d: dict, key: str, kind, what: str, default=None):
    v = d.get(key)
    if v is None:
        return default
    ok = isinstance(v, kind) and not (isinstance(v, bool) and kind in (int, float, (int, float)))
    if not ok:
        raise BadRequest(f"{key}: expected {what}, got {type(v).__name__} {v!r:.60}")
    return v


def _number(d: dict, key: str, default: float, where: str = "sampling_params") -> float:
    """A finite float (JSON's NaN/Infinity and ints too large for a float are refused)."""
    v = _typed(d, key, (int, float), "a number", default)
    try:
        v = float(v)
    except OverflowError:
        raise BadRequest(f"{where}.{key}: {v} is too large") from None
    if not math.isfinite(v):
        raise BadRequest(f"{where}.{key}: expected a finite number, got {v}")
    return v


def _bounded_int(d: dict, key: str, default, lo: int, hi: int, where: str = "sampling_params"):
    v = _typed(d, key, int, "an integer", default)
    if v is not None and not lo <= v <= hi:
        raise BadRequest(f"{where}.{key}: {v} is outside {lo}..{hi}")
    return v


def parse_sampling(sp: Any, where: str = "sampling_params") -> SamplingSpec:
    if sp is None:
        return SamplingSpec()
    if not isinstance(sp, dict):
        raise BadRequest(f"{where}: expected an object, got {type(sp).__name__}")
    for key in sp:
        if key not in SGLANG_SAMPLING_KEYS:
            listed = ", ".join(f"`{f}`" for f in SGLANG_SAMPLING_KEYS)
            raise BadRequest(f"{where}: unknown field `{key}`, expected one of {listed}")
    for key in _UNSUPPORTED:
        if sp.get(key) not in (None, [], {}):
            raise BadRequest(f"{where}.{key} is not supported by the embedded generator")
    for key, neutral in _NEUTRAL.items():
        if sp.get(key) is not None and sp[key] != neutral:
            raise BadRequest(f"{where}.{key}={sp[key]!r} is not supported by the embedded generator (only {neutral})")
    # SGLang's custom_params only feed a custom logit processor (`custom_logit_processor`, refused
    # by name: this server runs none) and its own reasoning/grammar accounting (whose fields are
    # refused too): a JSON object is accepted as SGLang accepts it, and has no effect here either
    _typed(sp, "custom_params", dict, "a JSON object")
    stop = _typed(sp, "stop", (str, list), "a string or a list of strings", [])
    stop = [stop] if isinstance(stop, str) else stop
    if not all(isinstance(s, str) and s for s in stop):
        raise BadRequest(f"{where}.stop: expected non-empty strings")
    stop_ids = _typed(sp, "stop_token_ids", list, "a list of token ids", [])
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_ids):
        raise BadRequest(f"{where}.stop_token_ids: expected integers")
    spec = SamplingSpec(
        max_new_tokens=_bounded_int(sp, "max_new_tokens", 128, -INT64, INT64, where),
        temperature=_number(sp, "temperature", 1.0, where),
        top_p=_number(sp, "top_p", 1.0, where),
        top_k=_bounded_int(sp, "top_k", ALL_TOKENS, -INT64, INT64, where),
        min_p=_number(sp, "min_p", 0.0, where),
        min_new_tokens=_bounded_int(sp, "min_new_tokens", 0, -INT64, INT64, where),
        stop=stop,
        stop_token_ids=stop_ids,
        ignore_eos=_typed(sp, "ignore_eos", bool, "a boolean", False),
        skip_special_tokens=_typed(sp, "skip_special_tokens", bool, "a boolean", True),
        no_stop_trim=_typed(sp, "no_stop_trim", bool, "a boolean", False),
        sampling_seed=_bounded_int(sp, "sampling_seed", None, 0, 2**64 - 1, where),  # torch's seed range
        n=_bounded_int(sp, "n", 1, 1, MAX_SEQUENCES, where),
        stream_interval=_bounded_int(sp, "stream_interval", 1, 1, INT64, where),
        spaces_between_special_tokens=_typed(sp, "spaces_between_special_tokens", bool, "a boolean", True),
    )
    return spec


def check_sampling(spec: SamplingSpec, where: str, names: Optional[Dict[str, str]] = None) -> None:
    """The value ranges of sampling parameters, whichever route carried them (`names`: the
    route's own names of the fields, e.g. OpenAI's `max_tokens` for `max_new_tokens`)."""
    names = names or {}

    def at(key: str) -> str:
        key = names.get(key, key)
        return f"{where}.{key}" if where else key

    if spec.max_new_tokens < 0:
        raise BadRequest(f"{at('max_new_tokens')} must be >= 0")
    if not math.isfinite(spec.temperature) or spec.temperature < 0:
        raise BadRequest(f"{at('temperature')} must be >= 0")
    if not 0.0 < spec.top_p <= 1.0:
        raise BadRequest(f"{at('top_p')} must be in (0, 1]")
    if spec.top_k == 0 or spec.top_k < -1:
        raise BadRequest(f"{at('top_k')} must be -1 (all) or >= 1")
    if not 0.0 <= spec.min_p <= 1.0:
        raise BadRequest(f"{at('min_p')} must be in [0, 1]")
    if spec.min_new_tokens < 0:
        raise BadRequest(f"{at('min_new_tokens')} must be >= 0")


@dataclass
class ParsedGenerate:
    """One sequence to generate: a prompt of the request, or one of its `n` samples."""

    rid: Optional[str]
    input_ids: List[int]
    spec: SamplingSpec
    return_logprob: bool = False
    logprob_start_len: int = NO_PROMPT_LOGPROBS
    top_logprobs_num: int = 0
    return_text_in_logprobs: bool = False
    return_prompt_token_ids: bool = False
    priority: int = 0  # SGLang's request priority (larger first); none counts as 0
    origin: str = "sampling_params"  # where its sampling parameters came from, for error messages
    lora: Optional[str] = None  # `lora_path`: the name of a loaded LoRA adapter (SGLang's lora_name)


@dataclass
class ParsedBatch:
    items: List[ParsedGenerate]
    batched: bool  # the answer is a list (a batch of prompts, or n > 1), in `items` order
    stream: bool


def _per_prompt(body: dict, key: str, n: int, check: Callable[[Any, str], Any], default) -> list:
    """SGLang's value-or-list fields: one value for every prompt, or a list of one per prompt."""
    v = body.get(key)
    if isinstance(v, list):
        if len(v) != n:
            raise BadRequest(f"{key}: a list of {len(v)} values for {n} prompt(s)")
        return [default if x is None else check(x, f"{key}[{i}]") for i, x in enumerate(v)]
    return [default if v is None else check(v, key)] * n


def _expect(kind, what: str):
    def check(v, where):
        if not isinstance(v, kind) or (isinstance(v, bool) and kind is int):
            raise BadRequest(f"{where}: expected {what}, got {type(v).__name__} {v!r:.60}")
        return v

    return check


def texts_of(body: dict) -> Optional[List[str]]:
    """The `text` prompts of a `/generate` body when they are well-typed (else None: `_prompts`
    names the problem), for the validator to check and tokenise before parsing."""
    text = body.get("text")
    if body.get("input_ids") is not None or text is None:
        return None
    texts = text if isinstance(text, list) else [text]
    return texts if texts and all(isinstance(t, str) for t in texts) else None


def sequence_count(body: dict) -> int:
    """Prompts x n of a `/generate` body, read from its shape alone (no prompt parsed, no item
    built), so the sequence cap refuses 20,000 prompts x n 128 before any work; 0 where the
    shape is wrong (the parse names the problem)."""
    prompts = body.get("input_ids") if body.get("input_ids") is not None else body.get("text")
    m = len(prompts) if isinstance(prompts, list) and prompts and isinstance(prompts[0], (list, str)) else 1
    sp = body.get("sampling_params")
    first = sp[0] if isinstance(sp, list) and sp else sp
    n = first.get("n") if isinstance(first, dict) else None
    return m * n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else m


def _prompts(body: dict, encoded: Optional[List[List[int]]]) -> Tuple[List[List[int]], bool]:
    """The prompts as token ids (`encoded`: the `text` prompts tokenised), and whether they
    came as a batch (a list)."""
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise BadRequest("exactly one of `text` and `input_ids` must be given")
    if text is not None:
        batched = isinstance(text, list)
        texts = text if batched else [text]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise BadRequest("text: expected a string or a non-empty list of strings")
        if encoded is None:
            raise BadRequest("text: this model has no tokenizer; send input_ids")
        return encoded, batched
    if not isinstance(ids, list):
        raise BadRequest(f"input_ids: expected a list of token ids, got {type(ids).__name__}")
    batched = bool(ids) and isinstance(ids[0], list)
    prompts = ids if batched else [ids]
    if batched and not all(isinstance(p, list) for p in prompts):
        raise BadRequest("input_ids: a batch must be a list of lists of token ids")
    return prompts, batched


def check_prompt(ids: List[int], where: str, vocab_size: int, max_context_len: int) -> None:
    if not ids:
        raise BadRequest(f"{where}: the prompt is empty")
    for i, t in enumerate(ids):
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size:
            raise BadRequest(f"{where}[{i}] = {t!r} is not a token id of this model (vocabulary size {vocab_size})")
    if len(ids) >= max_context_len:
        raise BadRequest(
            f"{where}: the prompt has {len(ids)} tokens; the model's context is {max_context_len} tokens "
            f"(prompt and output)"
        )


def parse_generate(
    body: Any, vocab_size: int, max_context_len: int, encoded: Optional[List[List[int]]] = None
) -> ParsedBatch:
    """A `/generate` body as SGLang reads it: one prompt or a batch, `n` samples per prompt
    (in SGLang's order: prompt i's samples at i*n .. i*n+n-1), value-or-list fields. Types and
    shapes are checked here; the value limits every route shares, by `RequestValidator.items`."""
    if not isinstance(body, dict):
        raise BadRequest(f"expected a JSON object, got {type(body).__name__}")
    for key in REFUSED_TOP:
        if body.get(key) not in (None, False, [], {}, 0):
            raise BadRequest(f"{key} is not supported by the embedded generator")
    for key in CACHE_KEYS:
        v = body.get(key)
        if v is not None and not isinstance(v, (str, list)):
            raise BadRequest(f"{key}: expected a string or a list of strings")
    stream = _typed(body, "stream", bool, "a boolean", False)
    text_in = _typed(body, "return_text_in_logprobs", bool, "a boolean", False)
    prompt_ids_out = _typed(body, "return_prompt_token_ids", bool, "a boolean", False)
    priority = _bounded_int(body, "priority", 0, -INT64 - 1, INT64, "request")
    prompts, batched = _prompts(body, encoded)
    where = "input_ids" if body.get("input_ids") is not None else "text"
    for i, p in enumerate(prompts):
        check_prompt(p, f"{where}[{i}]" if batched else where, vocab_size, max_context_len)
    m = len(prompts)
    rids = (
        _per_prompt(body, "rid", m, _expect(str, "a string"), None)
        if batched
        else [_typed(body, "rid", str, "a string", None)]
    )
    sp = body.get("sampling_params")
    origins = [f"sampling_params[{i}]" for i in range(m)] if isinstance(sp, list) else ["sampling_params"] * m
    specs = _per_prompt(body, "sampling_params", m, lambda v, w: parse_sampling(v, w), None)
    specs = [parse_sampling(None) if s is None else s for s in specs]
    want_lp = _per_prompt(body, "return_logprob", m, _expect(bool, "a boolean"), False)
    starts = _per_prompt(body, "logprob_start_len", m, _expect(int, "an integer"), NO_PROMPT_LOGPROBS)
    tops = _per_prompt(body, "top_logprobs_num", m, _expect(int, "an integer"), 0)
    loras = _per_prompt(body, "lora_path", m, _expect(str, "an adapter name (a string)"), None)
    n = specs[0].n
    if any(s.n != n for s in specs):
        raise BadRequest("sampling_params.n must be the same for every prompt of a batch (as SGLang requires)")
    items = []
    for i, prompt in enumerate(prompts):
        if not NO_PROMPT_LOGPROBS <= starts[i] < len(prompt):
            raise BadRequest(
                f"logprob_start_len: {starts[i]} is outside -1..{len(prompt) - 1} for a {len(prompt)}-token prompt"
            )
        if tops[i] < 0:
            raise BadRequest(f"top_logprobs_num: {tops[i]} must be >= 0")
        for j in range(n):
            spec = specs[i]
            if n > 1 and spec.sampling_seed is not None:  # independent samples: seed, seed+1, ...
                spec = dataclasses.replace(spec, sampling_seed=(spec.sampling_seed + j) % 2**64)
            rid = rids[i] if n == 1 or rids[i] is None else f"{rids[i]}-{j}"
            items.append(
                ParsedGenerate(
                    rid,
                    prompt,
                    spec,
                    want_lp[i],
                    starts[i],
                    tops[i],
                    text_in,
                    prompt_ids_out,
                    priority,
                    origins[i],
                    loras[i],
                )
            )
    return ParsedBatch(items, batched or n > 1, stream)


def dumps(obj: Any) -> str:
    """JSON text of an answer, never with the non-JSON tokens NaN / Infinity: a non-finite float
    is written as null, as SGLang's orjson responses write it."""
    try:
        return json.dumps(obj, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


PromptLogprobs = Tuple[List[float], List[List[Tuple[float, int]]]]  # Engine.prompt_logprobs


def build_response(
    req: Request,
    item: ParsedGenerate,
    version: str,
    text: str,
    token_text: Callable[[int], str],
    prompt_lp: Optional[PromptLogprobs] = None,
    index: Optional[int] = None,
) -> Dict[str, Any]:
    """SGLang's response object for one sequence (a streamed chunk too: cumulative so far)."""
    meta: Dict[str, Any] = {
        "id": req.rid,
        "finish_reason": req.finish,
        "prompt_tokens": len(req.prompt_ids),
        "completion_tokens": len(req.output_ids),
        "cached_tokens": 0,
        "weight_version": req.spans[-1][0] if req.spans else version,
        "e2e_latency": (req.finished_at or time.monotonic()) - req.created,
    }
    if len(req.spans) > 1:
        meta["weight_versions"] = [{"version": v, "start": s, "end": e} for v, s, e in req.spans]
    if item.return_logprob:
        text_of = token_text if item.return_text_in_logprobs else (lambda _: None)

        def entries(pairs):
            return [[lp, t, text_of(t)] for lp, t in pairs]

        meta["output_token_logprobs"] = entries(zip(req.logprobs, req.output_ids))
        if item.top_logprobs_num:
            meta["output_top_logprobs"] = [entries(row) for row in req.top_logprobs]
        if prompt_lp is not None:  # logprob_start_len >= 0: the prompt's tokens from there on
            chosen, tops = prompt_lp
            ids, start = req.prompt_ids, item.logprob_start_len
            meta["input_token_logprobs"] = [
                [None if k == 0 else chosen[k - 1], ids[k], text_of(ids[k])] for k in range(start, len(ids))
            ]
            if item.top_logprobs_num:
                meta["input_top_logprobs"] = [None if k == 0 else entries(tops[k - 1]) for k in range(start, len(ids))]
    out: Dict[str, Any] = {"text": text, "output_ids": list(req.output_ids), "meta_info": meta}
    if index is not None:
        out["index"] = index
    if item.return_prompt_token_ids:
        out["prompt_token_ids"] = list(req.prompt_ids)
    return out
