"""What a generator is sent and answers (SGLang's native API), and its error.

Message types of the base layer: the rollout's client and workflows, and the learner's
weight publishers (through its own admin protocol), speak them without importing each other.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Union

# The SGLang priority (larger first) of the generation requests made in this context; None: the
# client's own. A rollout group sets it for its episodes (`rollout.oldest_first`), so that a
# generator scheduling by priority serves the groups closest to the staleness bound first.
REQUEST_PRIORITY: ContextVar[Optional[int]] = ContextVar("request_priority", default=None)


@dataclass
class SamplingParams:
    """Only keys that SGLang's `/generate` accepts; `None` means "server default", not sent."""

    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: Optional[int] = None
    min_new_tokens: Optional[int] = None
    stop: Optional[List[str]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: Optional[bool] = None
    skip_special_tokens: Optional[bool] = None
    no_stop_trim: Optional[bool] = None
    sampling_seed: Optional[int] = None

    def to_sglang(self) -> Dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class GenerationResult:
    output_ids: List[int]
    logprobs: List[float]  # behaviour log-prob of each output token
    versions: List[int]  # weight version that sampled each output token
    finish_reason: str  # "stop" | "length" | "abort"
    matched_stop: Optional[Union[int, str]] = None
    prompt_tokens: int = 0
    meta: Dict[str, Any] = field(default_factory=dict)


class GeneratorError(RuntimeError):
    """A generator answered with an error that resending will not fix (4xx), or gave up."""

    def __init__(self, message: str, status: int = 0, url: str = ""):
        super().__init__(message)
        self.status, self.url = status, url
