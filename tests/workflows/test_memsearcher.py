"""MemSearcher on scripted model outputs: the exact rows, masks, log-probs, versions and rewards."""

from __future__ import annotations

import asyncio

from areal_mem.buffer.schema import group_to_table
from areal_mem.rollout.workflows.base import prefill_tokens, run_episode, turn_lengths
from areal_mem.rollout.workflows.memsearcher import MemSearcherWorkflow
from areal_mem.rollout.workflows.tokens import packaged_prompt
from areal_mem.trajectory import Group

PROMPT = packaged_prompt("memsearcher.txt")
SEARCH = (
    'I should look it up. </think>\n<tool_call>\n{"name": "wikipedia_search", "arguments": '
    '{"query": "The Crimson Mirror"}}\n</tool_call>'
)
CALL_RAW = '{"name": "wikipedia_search", "arguments": {"query": "The Crimson Mirror"}}'
DOC = '"The Crimson Mirror"\nThe Crimson Mirror is a novel that appeared in 1849.'
INSTRUCTION = (
    "Please read the tool response carefully and update the memory with new information that "
    "helps to answer the question, while retaining all relevant details from the previous "
    "memory. Return the updated memory within <memory> </memory> tags."
)
MEMORY = "<memory> The Crimson Mirror appeared in 1849. </memory>"
ANSWER = "The memory says 1849. </think> The answer is \\boxed{1849}."


def enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


def prompt(question, memory=""):
    return PROMPT.replace("{question}", question).replace("{memory}", memory)


def run(ctx, task, traj_id="t0"):
    return asyncio.run(MemSearcherWorkflow().run(task, ctx, traj_id))


def test_search_then_answer_rows_are_exact(tokenizer, scripted, make_ctx, task, retriever):
    gen = scripted([SEARCH, MEMORY, ANSWER])
    traj = run(make_ctx(gen), task)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    a1, m1, a2 = (r.output_ids for r in gen.results)
    assert a1[-1] == m1[-1] == a2[-1] == im_end
    injected = enc(
        tokenizer,
        "\n<|im_start|>user\n<tool_response>"
        + CALL_RAW
        + "\n"
        + DOC
        + "\n</tool_response>\n"
        + INSTRUCTION
        + "<|im_end|>\n<|im_start|>assistant\n",
    )
    p0 = enc(tokenizer, prompt(task.question))
    p1 = enc(tokenizer, prompt(task.question, "The Crimson Mirror appeared in 1849."))

    assert retriever.queries == [("The Crimson Mirror", 5)]
    assert len(traj.contexts) == 2
    c0, c1 = traj.contexts
    assert c0.input_ids == p0 + a1 + injected + m1 and c0.prompt_len == len(p0)
    assert c0.loss_mask == [1] * len(a1) + [0] * len(injected) + [1] * len(m1)
    r = gen.results
    assert c0.behav_logp == r[0].logprobs + [0.0] * len(injected) + r[1].logprobs
    assert c0.versions == [7] * len(a1) + [-1] * len(injected) + [7] * len(m1)
    assert c1.input_ids == p1 + a2 and c1.prompt_len == len(p1)
    assert c1.loss_mask == [1] * len(a2) and c1.behav_logp == r[2].logprobs
    # the generator saw exactly these contexts, with the released stops and limits
    assert [c["input_ids"] for c in gen.calls] == [p0, p0 + a1 + injected, p1]
    assert prefill_tokens(traj) == len(p0) + len(p0 + a1 + injected) + len(p1)
    assert all(c["sampling"].stop_token_ids == [im_end, im_start] for c in gen.calls)
    assert [c["sampling"].max_new_tokens for c in gen.calls] == [512, 512, 512]
    assert {c["sticky_key"] for c in gen.calls} == {"t0"}
    assert len({c["rid"] for c in gen.calls}) == 3
    assert traj.reward == 1.0
    assert traj.info["answer"] == "1849" and traj.info["em"] == 1.0 and traj.info["end_reason"] == "answered"
    assert traj.info["num_turns"] == 2 and traj.info["tool_calls"] == 1
    assert turn_lengths(traj.info) == [len(c0.input_ids), len(c1.input_ids)]
    table = group_to_table(Group("g0", [traj]))  # the buffer's schema accepts the rows and info
    assert table.num_rows == 2 and table.column("is_final").to_pylist() == [False, True]


def test_direct_answer_wrong_gets_format_score(scripted, make_ctx, task, retriever):
    gen = scripted(["I recall it. </think> \\boxed{1850}"])
    traj = run(make_ctx(gen), task)
    assert len(traj.contexts) == 1 and retriever.queries == []
    assert traj.reward == 0.1 and traj.info["f1"] == 0.0 and traj.info["end_reason"] == "answered"
    assert traj.contexts[0].loss_mask == [1] * len(gen.results[0].output_ids)


def test_partial_answer_gets_f1(scripted, make_ctx):
    from areal_mem.data.task import Task

    gen = scripted(["</think> \\boxed{Toustyl}"])
    traj = run(make_ctx(gen), Task("q", "Who founded it?", ["Toustyl Tailhun"]))
    assert abs(traj.reward - 2 / 3) < 1e-9  # precision 1, recall 1/2


def test_unbalanced_think_tags_score_zero(scripted, make_ctx, task):
    traj = run(make_ctx(scripted(["</think> </think> \\boxed{1849}"])), task)
    assert traj.reward == 0.0 and traj.info["em"] == 1.0
    assert traj.info["format_error"] == "unbalanced <think> tags"


def test_unclosed_tool_call_ends_with_zero(scripted, make_ctx, task, retriever):
    gen = scripted(['</think> <tool_call>{"name": "wikipedia_search", "arguments": {"query": "x"}}'])
    traj = run(make_ctx(gen), task)
    assert retriever.queries == [] and len(gen.calls) == 1
    assert traj.reward == 0.0 and traj.info["format_error"] == "unbalanced <tool_call> tags"


def test_broken_tool_json_becomes_response_text(tokenizer, scripted, make_ctx, task, retriever):
    gen = scripted(["</think> <tool_call>{'name': wikipedia_search}</tool_call>", MEMORY, ANSWER])
    traj = run(make_ctx(gen), task)
    assert retriever.queries == []
    seen = tokenizer.decode(gen.calls[1]["input_ids"], skip_special_tokens=False)
    assert (
        "<tool_response>{'name': wikipedia_search}\nError: the tool call is not valid JSON "
        "(Expecting property name enclosed in double quotes at char 1).\n</tool_response>\n"
    ) in seen
    assert len(traj.contexts) == 2 and traj.reward == 1.0


def test_missing_memory_ends_trajectory(scripted, make_ctx, task):
    gen = scripted([SEARCH, "I found the year."])
    traj = run(make_ctx(gen), task)
    assert len(traj.contexts) == 1 and len(gen.calls) == 2
    assert traj.info["end_reason"] == "no_memory" and traj.reward == 0.0
    assert traj.info["format_error"] == "no \\boxed{} answer"


def test_memory_over_limit_ends_trajectory(scripted, make_ctx, task):
    traj = run(make_ctx(scripted([SEARCH, MEMORY]), max_memory_tokens=3), task)
    assert traj.info["end_reason"] == "memory_too_long" and len(traj.contexts) == 1 and traj.reward == 0.0


def test_action_cut_by_token_limit(scripted, make_ctx, task):
    gen = scripted([(ANSWER, "length")])
    traj = run(make_ctx(gen, max_new_tokens=6), task)
    (c,) = traj.contexts
    assert gen.calls[0]["sampling"].max_new_tokens == 6
    assert c.response_len == 6 and c.loss_mask == [1] * 6
    assert traj.info["end_reason"] == "action_truncated" and traj.reward == 0.0
    assert traj.info["format_error"] == "does not end with <|im_end|>"


def test_memory_cut_by_token_limit(scripted, make_ctx, task):
    traj = run(make_ctx(scripted([SEARCH, (MEMORY, "length")])), task)
    assert traj.info["end_reason"] == "memory_truncated" and traj.reward == 0.0


def test_turn_limit(scripted, make_ctx, task, retriever):
    gen = scripted([SEARCH, MEMORY, SEARCH])
    traj = run(make_ctx(gen, max_turns=2), task)
    assert len(traj.contexts) == 2 and len(gen.calls) == 3
    assert retriever.queries == [("The Crimson Mirror", 5)]  # the last turn's search is not run
    assert traj.info["end_reason"] == "turn_limit" and traj.reward == 0.0
    assert traj.info["format_error"] == "no \\boxed{} answer"


def test_context_limit_caps_generation(tokenizer, scripted, make_ctx, task):
    p0 = len(enc(tokenizer, prompt(task.question)))
    gen = scripted([(ANSWER, "length")])
    traj = run(make_ctx(gen, max_context_tokens=p0 + 4), task)
    assert gen.calls[0]["sampling"].max_new_tokens == 4 and traj.contexts[0].response_len == 4


def test_prompt_template_is_configurable(tokenizer, scripted, make_ctx, task):
    template = "<|im_start|>user\nQ: {question}\nM: {memory}<|im_end|>\n<|im_start|>assistant\n"
    gen = scripted(["\\boxed{1849}"])
    traj = run(make_ctx(gen, prompt_template=template), task)
    assert gen.calls[0]["input_ids"] == enc(
        tokenizer, template.replace("{question}", task.question).replace("{memory}", "")
    )
    assert traj.reward == 1.0  # no <think> prefix in this template: none needed in the answer


def test_run_episode_releases_server_affinity(scripted, make_ctx, task):
    gen = scripted([ANSWER])
    traj = asyncio.run(run_episode(MemSearcherWorkflow(), task, make_ctx(gen), "t9"))
    assert traj.reward == 1.0 and gen.forgotten == ["t9"]
