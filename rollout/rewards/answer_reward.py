"""MemSearcher's reward on the final message, with the answer metric and format score configurable.

reward = 0 when the format is broken (see `format_error`); otherwise the metric
(F1 as released, or EM) of the `\\boxed{}` answer against the golden answers
when above 0, else `format_score` (0.1 as released).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from areal_mem.config.rollout import RolloutConfig

from ..tools.calls import CLOSE, OPEN, find_tool_calls, tags_balanced
from .answer import extract_boxed
from .metrics import exact_match, f1_score

EOS = "<|im_end|>"


def format_error(message: str) -> Optional[str]:
    """Why the final assistant message breaks the format, or None.

    `message` is the decoded assistant turn with special tokens kept, starting
    with the `<think>` of the assistant prefix when the prompt supplied one.
    """
    if not message.endswith(EOS):
        return "does not end with <|im_end|>"
    if not tags_balanced(message, "<think>", "</think>"):
        return "unbalanced <think> tags"
    if not tags_balanced(message, OPEN, CLOSE):
        return "unbalanced <tool_call> tags"
    if any(call.name is None or call.error for call in find_tool_calls(message)):
        return "a tool call lacks name or arguments"
    if extract_boxed(message) is None:
        return "no \\boxed{} answer"
    return None


@dataclass
class AnswerReward:
    metric: str = "f1"  # f1 | em
    format_score: float = 0.1

    def __call__(self, message: str, task: Any) -> float:
        if format_error(message) is not None:
            return 0.0
        answer = extract_boxed(message) or ""
        score_fn: Callable[..., float] = f1_score if self.metric == "f1" else exact_match
        score = score_fn(answer, task.golden_answers)
        return score if score > 0 else self.format_score


def from_config(rollout: RolloutConfig) -> AnswerReward:
    return AnswerReward(metric=rollout.reward_metric.value, format_score=rollout.format_score)
