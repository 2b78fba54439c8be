"""EM / F1 / accuracy with SQuAD normalisation, the boxed answer and MemSearcher's reward."""

from __future__ import annotations

import pytest

from areal_mem.data.task import Task
from areal_mem.rollout.rewards import (
    AnswerReward,
    exact_match,
    extract_boxed,
    f1_score,
    format_error,
    normalize_answer,
    substring_match,
)

CASES = [
    # prediction, golden, em, f1, acc
    ("The Eiffel Tower", ["eiffel tower"], 1.0, 1.0, 1.0),  # case and article
    ("Paris, France.", ["paris france"], 1.0, 1.0, 1.0),  # punctuation
    ("an  apple", ["APPLE"], 1.0, 1.0, 1.0),  # article + white space
    ("New York City", ["New York"], 0.0, 0.8, 1.0),  # p 2/3, r 1 -> 0.8
    ("York", ["New York"], 0.0, 2 / 3, 0.0),
    ("yes", ["no"], 0.0, 0.0, 0.0),
    ("yes sir", ["yes"], 0.0, 0.0, 1.0),  # yes/no must match exactly for F1
    ("noanswer", ["noanswer"], 1.0, 1.0, 1.0),
    ("Lisbon", ["Porto", "lisbon"], 1.0, 1.0, 1.0),  # best of several golden answers
    ("1849", ["1848"], 0.0, 0.0, 0.0),
    ("", ["x"], 0.0, 0.0, 0.0),
]


@pytest.mark.parametrize("pred,golden,em,f1,acc", CASES)
def test_metric_table(pred, golden, em, f1, acc):
    assert exact_match(pred, golden) == em
    assert f1_score(pred, golden) == pytest.approx(f1)
    assert substring_match(pred, golden) == acc


def test_normalize():
    assert normalize_answer("  The  Crimson-Mirror!  ") == "crimsonmirror"
    assert normalize_answer("A theatre") == "theatre"


@pytest.mark.parametrize(
    "text,answer",
    [
        ("x \\boxed{a} y \\boxed{b}", "b"),
        ("\\boxed{ \\text{New {York}} }", "\\text{New {York}}"),
        ("\\boxed{a} then \\boxed{unclosed", "a"),
        ("no box", None),
    ],
)
def test_extract_boxed(text, answer):
    assert extract_boxed(text) == answer


TASK = Task("q", "?", ["New York"])


@pytest.mark.parametrize(
    "message,reward,error",
    [
        ("<think> r </think> \\boxed{New York City}<|im_end|>", 0.8, None),
        ("<think> r </think> \\boxed{Boston}<|im_end|>", 0.1, None),
        ("<think> r </think> \\boxed{New York}", 0.0, "does not end with <|im_end|>"),
        ("<think> r \\boxed{New York}<|im_end|>", 0.0, "unbalanced <think> tags"),
        (
            "<think> r </think> <tool_call>{}</tool_call> \\boxed{New York}<|im_end|>",
            0.0,
            "a tool call lacks name or arguments",
        ),
        ("<think> r </think> New York<|im_end|>", 0.0, "no \\boxed{} answer"),
    ],
)
def test_memsearcher_reward(message, reward, error):
    assert format_error(message) == error
    assert AnswerReward()(message, TASK) == pytest.approx(reward)


def test_em_reward_and_format_weight():
    em = AnswerReward(metric="em", format_score=0.0)
    assert em("<think></think>\\boxed{New York City}<|im_end|>", TASK) == 0.0
    assert em("<think></think>\\boxed{new york}<|im_end|>", TASK) == 1.0
