"""What the engine runs: a request and its growing output, and the small pure helpers of its
batch bookkeeping (the most likely tokens of a row, the slots rows move to when others leave)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

import torch
from transformers.cache_utils import Cache

from .sampling import SamplingSpec


class WeightLoadError(ValueError):
    pass


@dataclass
class Request:
    rid: str
    prompt_ids: List[int]
    spec: SamplingSpec
    on_done: Callable[[Request], None]  # called once, from the engine thread
    generator: Optional[torch.Generator] = None  # set for a sampling_seed; None: the engine's stream
    top_logprobs_num: int = 0  # > 0: record the k most likely tokens at every output position
    on_token: Optional[Callable[[Request], None]] = None  # after each unfinished token (streaming)
    priority: int = 0  # SGLang's: larger is admitted first; equal ones in arrival order
    lora: Optional[str] = None  # the LoRA adapter it names (`lora_path`); None: the base model
    computed: int = 0  # tokens of it whose KV a retract threw away: prefilled again on resume
    weights: int = -1  # the engine's weight load its KV began under (set at its prefill)
    output_ids: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    top_logprobs: List[List[Tuple[float, int]]] = field(default_factory=list)  # per output token
    spans: List[List] = field(default_factory=list)  # [version, start, end) over output tokens
    finish: Optional[dict] = None
    created: float = field(default_factory=time.monotonic)
    finished_at: float = 0.0
    error: Optional[str] = None  # the engine failed on it (answered 500, not a normal abort)

    @property
    def kv_tokens(self) -> int:
        """Tokens in its KV cache while it runs: the prompt and every output token but the newest
        (sampled, not yet fed back)."""
        return len(self.prompt_ids) + max(0, len(self.output_ids) - 1)

    def complete(self, finish: Optional[dict] = None) -> None:
        if finish is not None:
            self.finish = finish
        self.finished_at = time.monotonic()
        self.on_done(self)


def top_entries(logp: torch.Tensor, ks: Sequence[int]) -> List[List[Tuple[float, int]]]:
    """Row i's `ks[i]` most likely tokens as (log-prob, token id), best first ([] for k = 0)."""
    k = min(max(ks, default=0), logp.shape[-1])
    if k <= 0:
        return [[] for _ in ks]
    top = logp.topk(k, dim=-1)
    values, ids = top.values.tolist(), top.indices.tolist()
    return [list(zip(values[i][:n], ids[i][:n])) for i, n in enumerate(ks)]


def compaction(keep: Sequence[int]) -> List[int]:
    """The rows (ascending indices `keep`) in their new slots: slot i takes row `order[i]`. Rows
    below len(keep) stay in their slots and the last rows fill the holes, so a row leaving costs
    the copy of one row, not of the whole batch (its order does not matter to anyone)."""
    n, kept = len(keep), set(keep)
    order = list(range(n))
    holes = [i for i in range(n) if i not in kept]
    for hole, row in zip(holes, [i for i in keep if i >= n]):
        order[hole] = row
    return order


def pad_left(t: torch.Tensor, n: int) -> torch.Tensor:
    """`t` [B, L] with `n` zero columns on its left (an attention mask widened for longer rows)."""
    return torch.cat([t.new_zeros((t.shape[0], n)), t], dim=1) if n else t


class Running(NamedTuple):
    """The running rows' tensors, one row each: the left-padded KV cache, the attention mask
    [B, L], the next position [B] and the last sampled token [B] (what the next decode feeds)."""

    cache: Cache
    mask: torch.Tensor
    pos: torch.Tensor
    last: torch.Tensor
