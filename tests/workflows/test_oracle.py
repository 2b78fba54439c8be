"""The scripted oracles: MemSearcher and ReAct demonstrations through the real workflow, tool and retriever."""

from __future__ import annotations

import json

import pytest

from areal_mem.app.demonstrations import write_demonstrations
from areal_mem.config import ConfigError, load_run
from areal_mem.learner.sft_data import read_rows
from areal_mem.rollout.oracle import corpus_titles, read_context, split_documents
from areal_mem.rollout.workflows.react import ReActWorkflow


def _cfg(world_dir, tiny_model_dir, retriever_url, tmp_path, workflow="memsearcher"):
    return load_run(
        [],
        [
            f"model.path={tiny_model_dir}",
            f"world.dir={world_dir}",
            f"run_dir={tmp_path}",
            f"retriever.urls=[{retriever_url}]",
            "rollout.prompt_style=short",
            f"rollout.workflow={workflow}",
        ],
    )


def test_read_context_and_documents():
    text = (
        "<|im_start|>user\n<question> Who? </question>\n\n<memory> A: b. </memory><|im_end|>\n"
        "<|im_start|>assistant\n<think> x </think><tool_call>{}</tool_call><|im_end|>\n<|im_start|>user\n"
        '<tool_response>{}\n"T1"\nText one.\n"T2"\nText two.\n</tool_response>\nPlease ... within '
        "<memory> </memory> tags.<|im_end|>\n<|im_start|>assistant\n"
    )
    view = read_context(text)
    assert (view.question, view.memory, view.phase) == ("Who?", "A: b.", "memory")
    assert view.found == ["T1", "T2"]
    assert split_documents(view.responses[0]) == {"T1": "Text one.", "T2": "Text two."}
    assert read_context(text.rpartition("<|im_start|>user")[0]).phase == "action"


def test_oracle_demonstrations_are_correct_sft_rows(world_dir, tiny_model_dir, retriever_url, tmp_path):
    out = str(tmp_path / "demos.jsonl")
    stats = write_demonstrations(
        _cfg(world_dir, tiny_model_dir, retriever_url, tmp_path), out, limit=12, mistake_rate=0.0, progress=False
    )
    assert stats["questions"] == 12 and stats["em"] == 1.0 and stats["reward"] == 1.0
    rows = [json.loads(line) for line in open(out)]
    assert len(rows) == stats["rows"] > 12  # multi-hop questions take several contexts
    assert stats["tokens"] == sum(len(r["input_ids"]) for r in rows)  # one SFT epoch's context tokens
    assert sum(r["is_final"] for r in rows) == 12
    for r in rows:
        assert r["versions"] == [0 if m else -1 for m in r["loss_mask"]]
        assert 0 in r["loss_mask"] or r["is_final"]  # every searching context has a masked tool response
    assert len(read_rows(out)) == len(rows)  # the learner's SFT reader takes them as they are


def test_oracle_query_copies_the_question_tokens(world_dir, tiny_model_dir, retriever_url, tmp_path):
    """The searched title is the same token sequence as in the question (a plain copy)."""
    from transformers import AutoTokenizer

    out = str(tmp_path / "demos.jsonl")
    write_demonstrations(
        _cfg(world_dir, tiny_model_dir, retriever_url, tmp_path), out, limit=12, mistake_rate=0.0, progress=False
    )
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    first = [json.loads(line) for line in open(out) if json.loads(line)["turn"] == 0]
    for r in first:
        ids, pl = r["input_ids"], r["prompt_len"]
        text = tok.decode(ids[pl:])
        query = json.loads(text.split("<tool_call>\n")[1].split("\n</tool_call>")[0])["arguments"]["query"]
        q_ids = tok.encode(query)
        assert query.startswith(" ") and query.strip() in tok.decode(ids[:pl])
        response = ids[pl:]
        assert any(response[i : i + len(q_ids)] == q_ids for i in range(len(response))), query
        assert any(ids[i : i + len(q_ids)] == q_ids for i in range(pl)), query


def test_oracle_mistakes(world_dir, tiny_model_dir, retriever_url, tmp_path):
    stats = write_demonstrations(
        _cfg(world_dir, tiny_model_dir, retriever_url, tmp_path),
        str(tmp_path / "bad.jsonl"),
        limit=12,
        mistake_rate=1.0,
        progress=False,
    )
    assert stats["em"] < 0.5


def test_oracle_demonstrations_do_not_depend_on_concurrency(world_dir, tiny_model_dir, retriever_url, tmp_path):
    """Mistakes are drawn per request (seed and request id), so one episode at a time and 16 at
    once write the same demonstrations: before, one shared random stream was consumed in the
    order concurrent episodes happened to ask."""
    cfg = _cfg(world_dir, tiny_model_dir, retriever_url, tmp_path)
    outs = []
    for concurrency in (1, 16):
        out = tmp_path / f"demos{concurrency}.jsonl"
        write_demonstrations(cfg, str(out), limit=40, mistake_rate=0.3, seed=5, concurrency=concurrency, progress=False)
        outs.append(sorted(out.read_text().splitlines()))
    assert outs[0] == outs[1] and len(outs[0]) >= 40


def _searches(row, tok):
    text = tok.decode(row["input_ids"][row["prompt_len"] :])
    return [
        json.loads(c.split("\n</tool_call>")[0])["arguments"]["query"].strip() for c in text.split("<tool_call>\n")[1:]
    ]


def test_react_oracle_follows_the_same_plan_in_one_growing_context(world_dir, tiny_model_dir, retriever_url, tmp_path):
    """ReAct's demonstrations: one context row per question, every hop searched (or already in a
    tool response of the context), the right answer; the same searches as MemSearcher's oracle
    except a title that an earlier search already returned."""
    from transformers import AutoTokenizer

    from areal_mem.data import read_tasks

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = {}
    for workflow in ("memsearcher", "react"):
        out = str(tmp_path / f"{workflow}.jsonl")
        stats = write_demonstrations(
            _cfg(world_dir, tiny_model_dir, retriever_url, tmp_path, workflow),
            out,
            limit=16,
            mistake_rate=0.0,
            progress=False,
        )
        assert stats["questions"] == 16 and stats["em"] == 1.0
        rows[workflow] = [json.loads(line) for line in open(out)]
    react = rows["react"]
    assert len(react) == 16 and all(r["is_final"] for r in react)
    assert len(rows["memsearcher"]) > 16
    tasks = {t.id: t for t in read_tasks(f"{world_dir}/train.jsonl")}
    titles = corpus_titles(f"{world_dir}/corpus.jsonl")
    multi = 0
    for r in react:
        task = tasks[r["group_id"]]
        searched = _searches(r, tok)
        # before its answer, the context holds every supporting passage, and it searched for them
        view = read_context(tok.decode(r["input_ids"]).rpartition("The search results hold")[0])
        assert {titles[pid] for pid in task.metadata["supporting_ids"]} <= set(view.found)
        assert searched and searched[0] == titles[task.metadata["supporting_ids"][0]]
        ms = [s for m in rows["memsearcher"] if m["group_id"] == r["group_id"] for s in _searches(m, tok)]
        assert set(searched) <= set(ms) and searched == [s for s in ms if s in searched]
        multi += len(ms) > 1
        assert f"\\boxed{{{task.golden_answers[0]}}}" in tok.decode(r["input_ids"])
        # generated spans: one per search and the answer; the tool responses between are masked
        spans = sum(1 for i, m in enumerate(r["loss_mask"]) if m and (i == 0 or not r["loss_mask"][i - 1]))
        assert spans == len(searched) + 1
    assert multi > 0  # the sample holds multi-hop questions


class CalcWorkflow(ReActWorkflow):
    name = "calc"


def test_oracles_are_found_by_the_workflows_name(world_dir, tiny_model_dir, retriever_url, tmp_path):
    """A path to a built-in workflow finds its oracle; a plugin workflow without one is refused by name."""
    from areal_mem.app.demonstrations import oracle_class
    from areal_mem.rollout.oracle import ReActOraclePolicy

    path = _cfg(world_dir, tiny_model_dir, retriever_url, tmp_path, "areal_mem.rollout.workflows.react:ReActWorkflow")
    assert oracle_class(path) is ReActOraclePolicy
    cfg = _cfg(world_dir, tiny_model_dir, retriever_url, tmp_path, f"{__name__}:CalcWorkflow")
    with pytest.raises(
        ConfigError, match="rollout.workflow=.*no scripted oracle writes demonstrations for workflow 'calc'"
    ):
        write_demonstrations(cfg, str(tmp_path / "x.jsonl"), limit=1, progress=False)
