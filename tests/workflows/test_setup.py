"""Building a workflow's context from config: prompt choice, sampling, limits, errors."""

from __future__ import annotations

import pytest

from areal_mem.config import ConfigError, load_run
from areal_mem.rollout.workflows import build_context, build_workflow
from areal_mem.rollout.workflows.tokens import packaged_prompt


def _rollout(*overrides):
    return load_run([], ["model.path=unused", *overrides]).rollout


def test_prompt_style_and_file(tmp_path, tokenizer, retriever):
    ms, react = build_workflow("memsearcher"), build_workflow("react")
    assert build_context(_rollout(), ms, None, tokenizer, retriever).prompt_template == ""  # released default
    short = build_context(_rollout("rollout.prompt_style=short"), react, None, tokenizer, retriever)
    assert short.prompt_template == packaged_prompt("react_short.txt")
    own = tmp_path / "p.txt"
    own.write_text("<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n")
    ctx = build_context(_rollout(f"rollout.prompt_file={own}"), ms, None, tokenizer, retriever)
    assert ctx.prompt_template == own.read_text()
    with pytest.raises(ConfigError, match="rollout.prompt_file '/nope.txt' does not exist"):
        build_context(_rollout("rollout.prompt_file=/nope.txt"), ms, None, tokenizer, retriever)


def test_sampling_limits_and_eval_overrides(tokenizer, retriever):
    ms = build_workflow("memsearcher")
    ctx = build_context(_rollout("rollout.limits.max_memory_tokens=64"), ms, None, tokenizer, retriever)
    assert (ctx.sampling.temperature, ctx.sampling.top_p) == (1.0, 0.99)
    assert (ctx.limits.max_turns, ctx.limits.max_memory_tokens) == (5, 64)
    assert set(ctx.tools) == {"wikipedia_search"} and ctx.tools["wikipedia_search"].default_top_n == 5
    greedy = build_context(_rollout(), ms, None, tokenizer, retriever, max_turns=20, temperature=0.0)
    assert (greedy.sampling.temperature, greedy.sampling.top_p, greedy.limits.max_turns) == (0.0, 1.0, 20)
    with pytest.raises(ValueError, match="key 'rollout.limits.max_turns' is 0; allowed: >= 1"):
        build_context(_rollout("rollout.limits.max_turns=0"), ms, None, tokenizer, retriever)
    with pytest.raises(ValueError, match="the wikipedia_search tool needs a retriever"):
        build_context(_rollout(), ms, None, tokenizer, None)


def test_workflow_texts_are_the_prompt_with_empty_slots_and_the_injected_instructions():
    from areal_mem.rollout.workflows.memsearcher import MEMORY_INSTRUCTION
    from areal_mem.rollout.workflows.setup import workflow_texts

    prompt, instruction = workflow_texts(_rollout("rollout.prompt_style=short"))
    assert prompt == packaged_prompt("memsearcher_short.txt").replace("{question}", "").replace("{memory}", "")
    assert "{question}" not in prompt and instruction == MEMORY_INSTRUCTION
    released = workflow_texts(_rollout())  # no prompt configured: the workflow's own
    assert released[0] == packaged_prompt("memsearcher.txt").replace("{question}", "").replace("{memory}", "")
    assert workflow_texts(_rollout("rollout.workflow=react", "rollout.prompt_style=short")) == [
        packaged_prompt("react_short.txt").replace("{question}", "")
    ]
