"""Next-token sampling for a batch of requests with their own parameters and random streams.

The returned log-prob is the sampled token's log-prob under the temperature-scaled
distribution (raw logits when greedy), before top-p / top-k / min-p truncation: what SGLang
returns by default and what the learner recomputes with the same temperature.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import torch

ALL_TOKENS = 1 << 30  # SGLang's top_k default: no top-k cut
# SGLang's _SAMPLING_EPS (sglang/srt/sampling/sampling_params.py): a temperature below it is
# greedy (SGLang sets top_k=1 and temperature 1.0), never a division of the logits by ~0
SAMPLING_EPS = 1e-6


@dataclass
class SamplingSpec:
    """Validated per-request sampling parameters (the server side of SGLang's sampling_params)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = ALL_TOKENS  # -1 also means all
    min_p: float = 0.0
    min_new_tokens: int = 0
    stop: List[str] = field(default_factory=list)
    stop_token_ids: List[int] = field(default_factory=list)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    sampling_seed: Optional[int] = None
    n: int = 1  # samples of the prompt (the server expands them into requests)
    stream_interval: int = 1  # tokens between two streamed chunks
    spaces_between_special_tokens: bool = True  # detokenisation, as Hugging Face's decode takes it

    def __post_init__(self) -> None:
        if 0.0 <= self.temperature < SAMPLING_EPS:  # NaN and negatives stay, for the checks to refuse
            self.temperature = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def truncates(self) -> bool:
        return self.top_p < 1.0 or 1 < self.top_k < ALL_TOKENS or self.min_p > 0.0


def scaled_logprobs(
    logits: torch.Tensor, specs: Sequence[SamplingSpec], banned: Sequence[Sequence[int]]
) -> torch.Tensor:
    """Log-probs [B, V] of the temperature-scaled distribution (raw logits when greedy), with
    `banned[i]` (eos / stop ids row i may not sample yet, before min_new_tokens) at -inf:
    what a token is sampled from and what its returned (and top-k) log-probs are."""
    logits = logits.float()
    vocab = logits.shape[-1]
    for i, ids in enumerate(banned):
        ids = [t for t in ids if 0 <= t < vocab]  # an id outside the logits bans nothing (never an IndexError)
        if ids:
            logits[i, ids] = float("-inf")
    temps = torch.tensor([s.temperature if s.temperature >= SAMPLING_EPS else 1.0 for s in specs], device=logits.device)
    return torch.log_softmax(logits / temps.unsqueeze(1), dim=-1)


def sample(
    logits: torch.Tensor,
    specs: Sequence[SamplingSpec],
    generators: Sequence[Optional[torch.Generator]],
    banned: Sequence[Sequence[int]],
    shared: Optional[torch.Generator] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """One token per row of `logits` [B, V]; returns (tokens [B], log-probs [B])."""
    return sample_from(scaled_logprobs(logits, specs, banned), specs, generators, shared)


def sample_from(
    logp: torch.Tensor,
    specs: Sequence[SamplingSpec],
    generators: Sequence[Optional[torch.Generator]],
    shared: Optional[torch.Generator] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """One token per row of `scaled_logprobs` [B, V]; returns (tokens [B], their log-probs [B]).

    A row with its own generator (a sampling_seed) draws from it alone, so its tokens do not
    depend on its batch; the other rows draw together from `shared`.
    """
    tokens = logp.argmax(dim=-1)
    rows = [i for i, s in enumerate(specs) if not s.greedy]
    if rows:
        probs = logp[rows].exp()
        trunc = [j for j, i in enumerate(rows) if specs[i].truncates]
        if trunc:
            probs[trunc] = _truncate(probs[trunc], [specs[rows[j]] for j in trunc])
        own = [j for j, i in enumerate(rows) if generators[i] is not None]
        pooled = [j for j, i in enumerate(rows) if generators[i] is None]
        for j in own:
            tokens[rows[j]] = draw(probs[j : j + 1], generators[rows[j]])[0]
        if pooled:
            tokens[[rows[j] for j in pooled]] = draw(probs[pooled], shared)
    return tokens, logp.gather(1, tokens.unsqueeze(1)).squeeze(1)


def draw(probs: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
    """One index per row of `probs` [B, V] (unnormalised, >= 0), by inverting the CDF at one
    uniform draw per row. torch.multinomial draws as exactly but costs ~18x more on a CPU
    (1 ms for 20 x 2048), which was a tenth of the embedded engine's busy time."""
    cdf = probs.double().cumsum(-1)
    u = torch.rand((probs.shape[0], 1), generator=generator, dtype=cdf.dtype, device=cdf.device)
    # right=True: the first index whose CDF exceeds u, so a zero-probability token is never drawn
    return torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=probs.shape[-1] - 1)[:, 0]


def _truncate(probs: torch.Tensor, specs: Sequence[SamplingSpec]) -> torch.Tensor:
    """Zero what top-k, top-p (nucleus, keeping the token that crosses p) and min-p cut."""
    p_sorted, idx = probs.sort(dim=-1, descending=True)
    rank = torch.arange(probs.shape[-1], device=probs.device).unsqueeze(0)
    top_k = torch.tensor(
        [s.top_k if 0 < s.top_k < ALL_TOKENS else probs.shape[-1] for s in specs], device=probs.device
    ).unsqueeze(1)
    top_p = torch.tensor([s.top_p for s in specs], device=probs.device).unsqueeze(1)
    min_p = torch.tensor([s.min_p for s in specs], device=probs.device).unsqueeze(1)
    cut = (rank >= top_k) | ((p_sorted.cumsum(-1) - p_sorted) > top_p) | (p_sorted < min_p * p_sorted[:, :1])
    p_sorted = p_sorted.masked_fill(cut, 0.0)
    return torch.zeros_like(probs).scatter(1, idx, p_sorted)
