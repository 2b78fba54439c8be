"""ReAct on scripted outputs: one growing context holding the whole history."""

from __future__ import annotations

import asyncio

from areal_mem.rollout.workflows.base import decode_tokens, prefill_tokens, turn_lengths
from areal_mem.rollout.workflows.react import ReActWorkflow
from areal_mem.rollout.workflows.tokens import packaged_prompt

SEARCH = (
    'Look it up. </think>\n<tool_call>\n{"name": "wikipedia_search", "arguments": '
    '{"query": "The Crimson Mirror", "top_n": 50}}\n</tool_call>'
)
CALL_RAW = '{"name": "wikipedia_search", "arguments": {"query": "The Crimson Mirror", "top_n": 50}}'
DOC = '"The Crimson Mirror"\nThe Crimson Mirror is a novel that appeared in 1849.'
ANSWER = "Found it. </think> \\boxed{1849}"


def test_react_search_then_answer(tokenizer, scripted, make_ctx, task, retriever):
    gen = scripted([SEARCH, ANSWER])
    traj = asyncio.run(ReActWorkflow().run(task, make_ctx(gen), "r0"))
    enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
    p = enc(packaged_prompt("react.txt").replace("{question}", task.question))
    a1, a2 = (r.output_ids for r in gen.results)
    injected = enc(
        "\n<|im_start|>user\n<tool_response>"
        + CALL_RAW
        + "\n"
        + DOC
        + "\n</tool_response>\n<|im_end|>\n<|im_start|>assistant\n<think>"
    )
    (c,) = traj.contexts
    assert retriever.queries == [("The Crimson Mirror", 20)]  # top_n capped at max_top_n
    assert c.input_ids == p + a1 + injected + a2 and c.prompt_len == len(p)
    assert c.loss_mask == [1] * len(a1) + [0] * len(injected) + [1] * len(a2)
    assert c.versions == [7] * len(a1) + [-1] * len(injected) + [7] * len(a2)
    assert gen.calls[1]["input_ids"] == p + a1 + injected
    assert turn_lengths(traj.info) == [len(p + a1), len(c.input_ids)]
    assert traj.reward == 1.0 and traj.info["num_turns"] == 2
    # every turn prefills the whole history again
    assert prefill_tokens(traj) == len(p) + len(p + a1 + injected) == sum(len(x["input_ids"]) for x in gen.calls)
    # and decodes only what it generated, not the injected tool response
    assert decode_tokens(traj) == len(a1) + len(a2)


def test_react_turn_limit_and_growth(scripted, make_ctx, task):
    gen = scripted([SEARCH] * 3)
    traj = asyncio.run(ReActWorkflow().run(task, make_ctx(gen, max_turns=3), "r1"))
    lengths = turn_lengths(traj.info)
    assert len(lengths) == 3 and lengths[0] < lengths[1] < lengths[2]
    assert traj.info["end_reason"] == "turn_limit" and traj.reward == 0.0
