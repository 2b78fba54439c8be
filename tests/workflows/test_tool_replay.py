"""Tool-call record and replay (#20 item 5) through the real retriever and the real embedded
generator: a recorded MemSearcher episode replays token for token with the retriever stopped."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from areal_mem.rollout.tools.base import EPISODE
from areal_mem.rollout.tools.recorder import RecordingBackend
from areal_mem.rollout.tools.replayer import ReplayBackend, ReplayMiss
from areal_mem.rollout.tools.tape import TapeError


@pytest.fixture(scope="module")
def index_dir(world_dir, tmp_path_factory):
    from areal_mem.retriever.build import build_index

    out = str(tmp_path_factory.mktemp("replay_bm25"))
    build_index(f"{world_dir}/corpus.jsonl", out, kind="bm25", show_progress=False)
    return out


@pytest.fixture(scope="module")
def searching_model(world_dir, tiny_model_dir, tmp_path_factory):
    """The tiny model taught (120 steps of plain SFT, about 6 s on one core) to open an episode with
    a `wikipedia_search` call, so that its sampled episodes really search. A random model never
    writes a valid call, and an episode without searches would replay trivially."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from areal_mem.data import read_tasks
    from areal_mem.rollout.oracle import corpus_titles, search_call
    from areal_mem.rollout.workflows.tokens import encode, packaged_prompt, render_prompt

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    titles = corpus_titles(f"{world_dir}/corpus.jsonl")
    template, end = packaged_prompt("memsearcher_short.txt"), tok.convert_tokens_to_ids("<|im_end|>")
    data = []
    for t in read_tasks(f"{world_dir}/train.jsonl")[:64]:
        title = titles[t.metadata["supporting_ids"][0]]
        action = f" I need to know about {title}. </think>\n{search_call(' ' + title)}"
        data.append((encode(tok, render_prompt(template, question=t.question, memory="")), encode(tok, action) + [end]))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    draw = random.Random(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(120):
            batch = draw.sample(data, 8)
            width = max(len(p) + len(a) for p, a in batch)
            ids, labels = torch.zeros((8, width), dtype=torch.long), torch.full((8, width), -100)
            mask = torch.zeros((8, width), dtype=torch.long)
            for i, (p, a) in enumerate(batch):
                ids[i, : len(p) + len(a)] = torch.tensor(p + a)
                labels[i, len(p) : len(p) + len(a)] = torch.tensor(a)
                mask[i, : len(p) + len(a)] = 1
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    out = str(tmp_path_factory.mktemp("searching_model"))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def generator_url(searching_model):
    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.rollout.generator.launch import start_embedded_generator

    with start_embedded_generator(
        searching_model, EmbeddedConfig(device="cpu", torch_threads=1, max_batch_size=8)
    ) as handle:
        yield handle.url


def _search_all(backend, calls, episode="ep-1"):
    async def go():
        EPISODE.set(episode)
        return [await backend.search(q, n) for q, n in calls]

    return asyncio.run(go())


def test_record_then_replay_a_search_sequence(retriever_url, tmp_path):
    from areal_mem.retriever.client import RetrieverClient

    calls = [("Crimson city", 3), ("river", 2), ("Crimson city", 3)]
    tape = tmp_path / "tools" / "worker0.jsonl"

    async def record():
        async with RecordingBackend(RetrieverClient(retriever_url, max_retries=0), str(tape)) as rec:
            EPISODE.set("group-3/1")
            got = [await rec.search(q, n) for q, n in calls]
            return got, await rec.inner.index_checksum(), rec.recorded

    live, checksum, recorded = asyncio.run(record())
    assert recorded == 3 and checksum.startswith("sha256:")
    lines = [json.loads(line) for line in tape.read_text().splitlines()]
    assert [(r["query"], r["top_n"], r["docs"]) for r in lines] == [(q, n, d) for (q, n), d in zip(calls, live)]
    assert {r["index_checksum"] for r in lines} == {checksum} and {r["episode"] for r in lines} == {"group-3/1"}
    assert all(r["latency_s"] >= 0 and r["time"] > 1.7e9 for r in lines)

    replay = ReplayBackend([str(tmp_path / "tools")])  # a folder stands for its *.jsonl
    assert replay.recorded_calls == 3
    assert _search_all(replay, calls + [("river", 2)]) == live + [live[1]]  # used up: the last again
    assert replay.replayed == 4
    with pytest.raises(ReplayMiss) as miss:
        _search_all(replay, [("river", 5)])  # recorded, but with another top_n
    assert str(miss.value) == (
        f"no recorded answer for the search 'river' (top_n=5) in {tape}; record it (rollout.record_tools) "
        f"or let misses reach the retriever (rollout.replay_fallback=true)"
    )

    async def with_fallback():
        async with ReplayBackend([str(tape)], RetrieverClient(retriever_url, max_retries=0), fallback=True) as r:
            return await r.search("river", 5), r.live, await r.index_checksum()

    docs, went_live, replay_checksum = asyncio.run(with_fallback())
    assert len(docs) == 5 and went_live == 1 and replay_checksum == checksum


def test_a_replay_miss_stops_the_episode_instead_of_becoming_a_response(tmp_path):
    from areal_mem.rollout.tools.calls import find_tool_calls
    from areal_mem.rollout.tools.execute import execute_calls
    from areal_mem.rollout.tools.wikipedia_search import WikipediaSearchTool

    tape = tmp_path / "t.jsonl"
    tape.write_text("")
    tool = WikipediaSearchTool(ReplayBackend([str(tape)]))
    calls = find_tool_calls('<tool_call>{"name": "wikipedia_search", "arguments": {"query": "Beimtim"}}</tool_call>')
    with pytest.raises(ReplayMiss, match=r"no recorded answer for the search 'Beimtim' \(top_n=5\) in .*t\.jsonl;"):
        asyncio.run(execute_calls(calls, {tool.name: tool}, 5.0))


GOOD = {"query": "q", "top_n": 1, "docs": [{"id": "1", "contents": "x"}], "index_checksum": "sha256:a"}
GOOD.update(episode="e", time=1.8e9, latency_s=0.01)


@pytest.mark.parametrize(
    "line,error",
    [
        ("{not json", r"t\.jsonl:2: not JSON \(Expecting property name enclosed in double quotes at char 1\)"),
        ("[1]", r"t\.jsonl:2: a record must be a JSON object, got list"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "docs"}), r"t\.jsonl:2: the record lacks 'docs'"),
        (json.dumps({**GOOD, "top_n": "1"}), r"t\.jsonl:2: 'top_n' has the wrong type \(str\)"),
        (json.dumps({**GOOD, "top_n": True}), r"t\.jsonl:2: 'top_n' has the wrong type \(bool\)"),
        (json.dumps({**GOOD, "docs": [{"id": "1"}]}), r"t\.jsonl:2: 'docs' must be a list of documents"),
    ],
)
def test_a_malformed_tape_is_refused_naming_file_and_line(tmp_path, line, error):
    tape = tmp_path / "t.jsonl"
    tape.write_text(json.dumps(GOOD) + "\n" + line + "\n")
    with pytest.raises(TapeError, match=error):
        ReplayBackend([str(tape)])


def test_tapes_of_two_indexes_missing_tapes_and_two_recorders_are_refused(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps(GOOD) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps({**GOOD, "index_checksum": "sha256:b"}) + "\n")
    with pytest.raises(TapeError, match=r"b\.jsonl was recorded against index 'sha256:b', .*a\.jsonl against"):
        ReplayBackend([str(tmp_path)])
    with pytest.raises(TapeError, match="no such tool recording"):
        ReplayBackend([str(tmp_path / "nope.jsonl")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(TapeError, match=r"empty: no \*\.jsonl tool recordings"):
        ReplayBackend([str(tmp_path / "empty")])
    first = RecordingBackend(ReplayBackend([str(tmp_path / "a.jsonl")]), str(tmp_path / "rec.jsonl"))
    with pytest.raises(RuntimeError, match="another process is recording tool calls into this file"):
        RecordingBackend(ReplayBackend([str(tmp_path / "a.jsonl")]), str(tmp_path / "rec.jsonl"))
    asyncio.run(first.close())


def _episodes(generator_url, tokenizer, world_dir, backend, n=6):
    """`n` MemSearcher episodes of two dev questions at temperature 1, each request seeded from the
    run seed and its id, as a training rollout runs them (concurrently)."""
    from areal_mem.config.generator import GeneratorConfig
    from areal_mem.config.rollout import PromptStyle, RolloutConfig, RolloutLimits
    from areal_mem.data import read_tasks
    from areal_mem.rollout.generator.client import client_from_config
    from areal_mem.rollout.workflows import build_context, build_workflow, run_episode

    rollout = RolloutConfig(prompt_style=PromptStyle.short, limits=RolloutLimits(max_turns=3, max_new_tokens=64))
    tasks = read_tasks(f"{world_dir}/dev.jsonl")[:2]
    workflow = build_workflow("memsearcher")

    async def go():
        async with client_from_config(GeneratorConfig(urls=[generator_url])) as generator:
            ctx = build_context(rollout, workflow, generator, tokenizer, backend, seed=1234)
            return await asyncio.gather(*(run_episode(workflow, tasks[j % 2], ctx, f"g{j % 2}/{j}") for j in range(n)))

    return asyncio.run(go())


def test_a_recorded_episode_replays_token_for_token(generator_url, tokenizer, world_dir, index_dir, tmp_path):
    from areal_mem.retriever.client import RetrieverClient
    from areal_mem.retriever.launch import start_retriever

    tape = tmp_path / "tools" / "worker0.jsonl"
    with start_retriever(index_dir, overrides=["retriever.threads=1"]) as service:
        recorder = RecordingBackend(RetrieverClient(service.url, max_retries=0), str(tape))
        recorded = _episodes(generator_url, tokenizer, world_dir, recorder)
        asyncio.run(recorder.close())
    assert service.child.proc.poll() is not None  # the retriever is down from here on
    lines = [json.loads(line) for line in tape.read_text().splitlines()]
    assert len(lines) >= 2  # the episodes really searched (a call with bad JSON is answered without a search)
    assert sum(t.info["tool_calls"] for t in recorded) >= len(lines)
    assert {r["episode"] for r in lines} <= {t.traj_id for t in recorded}

    replay = ReplayBackend([str(tape)])
    replayed = _episodes(generator_url, tokenizer, world_dir, replay)
    assert replay.replayed == len(lines)
    for a, b in zip(recorded, replayed):
        assert [c.input_ids for c in a.contexts] == [c.input_ids for c in b.contexts]  # tool responses included
        # log-probs to float noise: which requests share a forward pass (the batch's shape) moves
        # the last bits on CPU (measured up to 2e-6); the sampled tokens do not depend on it
        for c, d in zip(a.contexts, b.contexts):
            assert c.behav_logp == pytest.approx(d.behav_logp, abs=1e-5, rel=0)
        assert [c.loss_mask for c in a.contexts] == [c.loss_mask for c in b.contexts]
        assert (a.reward, a.info) == (b.reward, b.info)
    # the live client against the stopped retriever: every search fails, so the episodes differ
    dead = _episodes(generator_url, tokenizer, world_dir, RetrieverClient(service.url, max_retries=0))
    ids = lambda trajs: [[c.input_ids for c in t.contexts] for t in trajs]  # noqa: E731
    assert ids(dead) != ids(recorded)


def test_eval_records_then_replays_with_the_retriever_down(
    world_dir, searching_model, generator_url, index_dir, tmp_path
):
    """The composition's wiring: `areal-mem eval rollout.record_tools=true` writes
    <run_dir>/tools/eval.jsonl; `rollout.replay_tools=[that file]` gives the same results with
    the retriever stopped."""
    from areal_mem.app.cli import main
    from areal_mem.retriever.launch import start_retriever

    common = [
        *("--data", f"{world_dir}/dev.jsonl", "--limit", "4", "--quiet", "--method", "memsearcher"),
        f"model.path={searching_model}",
        f"world.dir={world_dir}",
        f"generator.urls=[{generator_url}]",
        "rollout.limits.max_new_tokens=64",
        "rollout.prompt_style=short",
        "eval.save_responses=true",
    ]
    with start_retriever(index_dir, overrides=["retriever.threads=1"]) as service:
        urls = f"retriever.urls=[{service.url}]"
        assert main(["eval", *common, urls, f"run_dir={tmp_path / 'rec'}", "rollout.record_tools=true"]) == 0
    tape = tmp_path / "rec" / "tools" / "eval.jsonl"
    assert len(tape.read_text().splitlines()) >= 2
    assert main(["eval", *common, urls, f"run_dir={tmp_path / 'rep'}", f"rollout.replay_tools=[{tape}]"]) == 0
    # no retriever.urls at all: nothing is built or started for a replay
    assert main(["eval", *common, f"run_dir={tmp_path / 'alone'}", f"rollout.replay_tools=[{tape}]"]) == 0
    assert not (tmp_path / "alone" / "index").exists()

    def results(run):
        return (tmp_path / run / "eval" / "memsearcher" / "results.jsonl").read_text()

    assert results("rep") == results("rec") == results("alone")
    assert not (tmp_path / "rep" / "tools").exists()


def test_which_backend_the_config_gives(tmp_path):
    from areal_mem.config import ConfigError
    from areal_mem.config.rollout import RolloutConfig
    from areal_mem.rollout.tools.backend import record_path, search_backend

    assert [record_path(s, "run", "worker1") for s in ("", "False", "true", "out", "out/x.jsonl")] == [
        "",
        "",
        "run/tools/worker1.jsonl",
        "out/worker1.jsonl",
        "out/x.jsonl",
    ]
    tape = tmp_path / "a.jsonl"
    tape.write_text(json.dumps(GOOD) + "\n")
    assert search_backend(RolloutConfig(), None, str(tmp_path), "eval") is None
    backend = search_backend(
        RolloutConfig(record_tools="true", replay_tools=[str(tape)]), None, str(tmp_path), "worker0"
    )
    assert isinstance(backend, RecordingBackend) and isinstance(backend.inner, ReplayBackend)
    assert _search_all(backend, [("q", 1)]) == [GOOD["docs"]]
    asyncio.run(backend.close())
    (line,) = (tmp_path / "tools" / "worker0.jsonl").read_text().splitlines()
    assert json.loads(line)["index_checksum"] == "sha256:a"  # recording a replay keeps naming its index
    with pytest.raises(ConfigError, match="rollout.record_tools needs a retriever"):
        search_backend(RolloutConfig(record_tools="true"), None, str(tmp_path), "eval")
    with pytest.raises(ConfigError, match="rollout.replay_fallback needs a retriever"):
        search_backend(RolloutConfig(replay_tools=[str(tape)], replay_fallback=True), None, str(tmp_path), "eval")
