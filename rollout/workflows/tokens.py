"""Token-level building blocks shared by the workflows: chat markup, prompts, one context row."""

from __future__ import annotations

import dataclasses
import hashlib
from importlib import resources
from typing import Any, Dict, List, Optional, Tuple

from areal_mem.generation import GenerationResult
from areal_mem.trajectory import Context

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
ASSISTANT_HEADER = IM_START + "assistant\n"


def packaged_prompt(name: str) -> str:
    """A template shipped in `rollout/prompts/`."""
    return resources.files("areal_mem.rollout").joinpath("prompts", name).read_text(encoding="utf-8")


def render_prompt(template: str, **values: str) -> str:
    """Fill `{question}`-style slots by plain replacement (the templates hold JSON braces)."""
    for key, value in values.items():
        template = template.replace("{" + key + "}", value)
    return template


def assistant_prefix(prompt_text: str) -> str:
    """What the prompt already wrote of the assistant turn (`<think>` in the released prompt)."""
    head, sep, tail = prompt_text.rpartition(ASSISTANT_HEADER)
    return tail if sep else ""


def encode(tokenizer: Any, text: str) -> List[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def request_seed(seed: int, rid: str) -> int:
    """A sampling seed of one request: a hash of the run seed and the request id (stable across
    processes and Python hash seeds), so a rerun samples the same tokens for the same request
    whatever else the generator was batching."""
    digest = hashlib.sha256(f"{seed}:{rid}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1  # < 2**63: SGLang's int64 field


def decode(tokenizer: Any, ids: List[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False)


def markup_ids(tokenizer: Any) -> Dict[str, int]:
    """The ids of the ChatML tokens the workflows write and stop on; ValueError naming the missing."""
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (IM_START, IM_END)}
    missing = [t for t, i in ids.items() if i is None or i == tokenizer.unk_token_id]
    if missing:
        raise ValueError(
            f"the tokenizer has no single token for {', '.join(missing)}: the MemSearcher and ReAct workflows "
            "write ChatML contexts (<|im_start|>role ... <|im_end|>) and stop on <|im_end|>"
        )
    return ids


def stop_token_ids(tokenizer: Any) -> List[int]:
    ids = markup_ids(tokenizer)
    return [ids[IM_END], ids[IM_START]]


class ContextBuilder:
    """One context row under construction: prompt, then generated and injected spans."""

    def __init__(self, prompt_ids: List[int]) -> None:
        self.input_ids = list(prompt_ids)
        self.prompt_len = len(prompt_ids)
        self.loss_mask: List[int] = []
        self.behav_logp: List[float] = []
        self.versions: List[int] = []

    def __len__(self) -> int:
        return len(self.input_ids)

    def add_generated(self, result: GenerationResult) -> None:
        n = len(result.output_ids)
        if len(result.logprobs) != n or len(result.versions) != n:
            raise ValueError(
                f"generator returned {n} tokens but {len(result.logprobs)} log-probs and "
                f"{len(result.versions)} versions"
            )
        self.input_ids += result.output_ids
        self.loss_mask += [1] * n
        self.behav_logp += [float(x) for x in result.logprobs]
        self.versions += [int(v) for v in result.versions]

    def add_injected(self, ids: List[int]) -> None:
        self.input_ids += ids
        self.loss_mask += [0] * len(ids)
        self.behav_logp += [0.0] * len(ids)
        self.versions += [-1] * len(ids)

    def build(self) -> Context:
        return Context(
            input_ids=list(self.input_ids),
            prompt_len=self.prompt_len,
            loss_mask=list(self.loss_mask),
            behav_logp=list(self.behav_logp),
            versions=list(self.versions),
        )


async def generate_into(
    ctx: Any, builder: ContextBuilder, rid: str, sticky_key: str
) -> Optional[Tuple[GenerationResult, str]]:
    """Generate onto `builder` within the per-generation and per-context token limits.

    Returns the result and its decoded text, or None when the context has no room left.
    """
    budget = min(ctx.limits.max_new_tokens, ctx.limits.max_context_tokens - len(builder))
    if budget <= 0:
        return None
    sampling = dataclasses.replace(ctx.sampling, max_new_tokens=budget, stop_token_ids=stop_token_ids(ctx.tokenizer))
    if ctx.seed is not None and sampling.sampling_seed is None:
        sampling.sampling_seed = request_seed(ctx.seed, rid)
    result = await ctx.generator.generate(builder.input_ids, sampling, rid=rid, sticky_key=sticky_key)
    builder.add_generated(result)
    return result, decode(ctx.tokenizer, result.output_ids)
