"""Both oracles on bridges of 3 and 4 hops: each hop searched in order, one fact a hop in
MemSearcher's memory, the golden answer; through the real workflow, tool and retriever."""

from __future__ import annotations

import json
import os

import pytest

from areal_mem.app.demonstrations import write_demonstrations
from areal_mem.app.world import build_world
from areal_mem.config import load_run
from areal_mem.data import read_tasks
from areal_mem.rollout.oracle import corpus_titles, read_context, response_documents

QUESTIONS = 10


def _searches(row, tok):
    """The queries of a row's tool calls, in order."""
    text = tok.decode(row["input_ids"][row["prompt_len"] :])
    return [
        json.loads(c.split("\n</tool_call>")[0])["arguments"]["query"].strip() for c in text.split("<tool_call>\n")[1:]
    ]


@pytest.fixture(scope="module", params=[3, 4])
def hop_world(request, world_dir, tmp_path_factory):
    """The session world's corpus (same seed and sizes: the same passages, so its retriever
    serves it) with bridges of `hops` hops."""
    folder = str(tmp_path_factory.mktemp(f"h{request.param}"))
    build_world(folder, seed=0, passages=600, questions=600, hops=request.param)
    with (
        open(os.path.join(folder, "corpus.jsonl"), "rb") as a,
        open(os.path.join(world_dir, "corpus.jsonl"), "rb") as b,
    ):
        assert a.read() == b.read()
    return request.param, folder


def _demos(hop_world, tiny_model_dir, retriever_url, tmp_path, workflow):
    hops, folder = hop_world
    cfg = load_run(
        [],
        [
            f"model.path={tiny_model_dir}",
            f"world.dir={folder}",
            f"run_dir={tmp_path}",
            f"retriever.urls=[{retriever_url}]",
            "rollout.prompt_style=short",
            f"rollout.workflow={workflow}",
            # the horizon's turn and token limits (benchmarks.harness.recipe.horizon_overrides)
            f"rollout.limits.max_turns={hops + 2}",
            f"rollout.limits.max_new_tokens={48 * hops}",
            f"rollout.limits.max_memory_tokens={48 * hops}",
        ],
    )
    out = str(tmp_path / f"{workflow}.jsonl")
    stats = write_demonstrations(cfg, out, limit=QUESTIONS, mistake_rate=0.0, progress=False, question_type="bridge")
    assert stats["questions"] == QUESTIONS and stats["em"] == 1.0
    rows: dict = {}
    for line in open(out):
        r = json.loads(line)
        rows.setdefault(r["group_id"], []).append(r)
    tasks = {t.id: t for t in read_tasks(os.path.join(folder, "train.jsonl"))}
    titles = corpus_titles(os.path.join(folder, "corpus.jsonl"))
    return hops, rows, tasks, titles


def test_memsearcher_oracle_searches_every_hop_in_order_and_keeps_a_fact_each(
    hop_world, tiny_model_dir, retriever_url, tmp_path
):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    hops, rows, tasks, titles = _demos(hop_world, tiny_model_dir, retriever_url, tmp_path, "memsearcher")
    assert len(rows) == QUESTIONS
    for qid, rs in rows.items():
        task = tasks[qid]
        plan = [titles[p] for p in task.metadata["supporting_ids"]]
        assert task.metadata["hops"] == hops and plan[1:] == task.metadata["chain"]
        rs.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in rs] == list(range(hops + 1))  # a turn a hop, then the answer
        assert [s for r in rs for s in _searches(r, tok)] == plan
        final = tok.decode(rs[-1]["input_ids"])
        assert f"\\boxed{{{task.golden_answers[0]}}}" in final and rs[-1]["is_final"]
        memory = read_context(final).memory
        # one fact a hop, in order, each naming the next hop's entity; the last the answer
        starts = [memory.index(f"{t}: ") for t in plan]
        assert starts == sorted(starts) and starts[0] == 0
        facts = [memory[a:b] for a, b in zip(starts, [*starts[1:], len(memory)])]
        for fact, nxt in zip(facts, plan[1:]):
            assert nxt in fact.split(": ", 1)[1], (fact, nxt)
        assert task.golden_answers[0] in facts[-1]


def test_react_oracle_searches_every_hop_in_order_in_one_context(hop_world, tiny_model_dir, retriever_url, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    hops, rows, tasks, titles = _demos(hop_world, tiny_model_dir, retriever_url, tmp_path, "react")
    assert len(rows) == QUESTIONS
    full = 0
    for qid, (row,) in rows.items():
        task = tasks[qid]
        plan = [titles[p] for p in task.metadata["supporting_ids"]]
        text = tok.decode(row["input_ids"])
        searched = _searches(row, tok)
        # the search after each response is the first hop not yet in any tool response: a hop
        # an earlier search already returned is not searched again
        found: set = set()
        responses = text.split("<tool_response>")[1:]
        assert len(responses) == len(searched)
        for query, response in zip(searched, responses):
            assert query == next(t for t in plan if t not in found)
            found |= {title for title, _ in response_documents("<tool_response>" + response)}
        assert set(plan) <= found
        full += searched == plan
        assert text.rstrip().endswith(f"\\boxed{{{task.golden_answers[0]}}}.<|im_end|>")
        spans = sum(1 for i, m in enumerate(row["loss_mask"]) if m and (i == 0 or not row["loss_mask"][i - 1]))
        assert spans == len(searched) + 1
    assert full > 0  # chains that needed every search (a small world returns a next hop early more often)
