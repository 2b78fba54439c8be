"""Rewards and answer metrics: MemSearcher's reward, EM, F1, substring accuracy, the format check."""

from .answer import extract_boxed
from .answer_reward import AnswerReward, format_error
from .metrics import exact_match, f1_score, normalize_answer, substring_match

__all__ = [
    "AnswerReward",
    "exact_match",
    "extract_boxed",
    "f1_score",
    "format_error",
    "normalize_answer",
    "substring_match",
]
