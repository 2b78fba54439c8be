"""`areal-mem eval` end to end: world + tiny model + embedded generator + retriever, both methods."""

from __future__ import annotations

import json
import os

import pytest

from areal_mem.app.cli import main

FIELDS = {
    "method",
    "data",
    "questions",
    "em",
    "f1",
    "acc",
    "reward",
    "mean_turns",
    "mean_tool_calls",
    "search_rate",
    "golden_in_search_rate",
    "answer_copied_rate",
    "mean_prefill_tokens",
    "mean_decode_tokens",
    "peak_context_tokens",
    "context_tokens_by_turn",
    "by_type",
    "end_reasons",
}


def test_eval_both_methods(world_dir, tiny_model_dir, retriever_url, tmp_path, capsys):
    common = [
        "--data",
        f"{world_dir}/dev.jsonl",
        "--limit",
        "20",
        "--quiet",
        f"model.path={tiny_model_dir}",
        f"world.dir={world_dir}",
        f"run_dir={tmp_path}",
        "retriever.kind=bm25",
        "rollout.limits.max_new_tokens=48",
        "rollout.prompt_style=short",
        "generator.embedded.device=cpu",
    ]
    # memsearcher: no servers configured, so eval builds an index and starts both itself
    assert main(["eval", "--method", "memsearcher"] + common) == 0
    # react: against an already running retriever
    assert (
        main(["eval", "--method", "react"] + common + [f"retriever.urls=[{retriever_url}]", "eval.save_responses=true"])
        == 0
    )
    assert os.path.exists(tmp_path / "index" / "manifest.json")
    for method in ("memsearcher", "react"):
        out = tmp_path / "eval" / method
        summary = json.loads((out / "summary.json").read_text())
        records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        assert set(summary) == FIELDS and summary["method"] == method and summary["questions"] == 20
        assert len(records) == 20 and records[0]["id"] == "dev_0"
        assert summary["em"] == round(100 * sum(r["em"] for r in records) / 20, 2)
        assert summary["mean_turns"] == round(sum(r["num_turns"] for r in records) / 20, 3)
        assert summary["search_rate"] == round(100 * sum(r["tool_calls"] > 0 for r in records) / 20, 2)
        assert all(not r["golden_in_search"] for r in records if r["tool_calls"] == 0)  # nothing retrieved
        first = summary["context_tokens_by_turn"][0]
        assert first["turn"] == 0 and first["episodes"] == 20
        assert first["max"] == max(r["context_tokens"][0] for r in records)
        assert sum(summary["end_reasons"].values()) == 20
        assert summary["peak_context_tokens"] == max(max(r["context_tokens"]) for r in records)
        assert summary["mean_prefill_tokens"] == round(sum(r["prefill_tokens"] for r in records) / 20, 1)
        assert summary["mean_decode_tokens"] == round(sum(r["decode_tokens"] for r in records) / 20, 1)
        # every generated token was decoded once, and prefilled by the requests after it
        assert all(0 < r["decode_tokens"] < r["prefill_tokens"] for r in records)
        # the world's questions carry their type: EM by type weighs back to the whole
        types = summary["by_type"]
        assert sum(t["questions"] for t in types.values()) == 20 and set(types) <= {"single", "bridge", "comparison"}
        assert round(sum(t["em"] * t["questions"] for t in types.values()) / 20, 2) == pytest.approx(summary["em"])
        # where a two-hop chain broke: first hop's passage found (bridge questions only), second's
        for qtype, t in types.items():
            rs = [r for r in records if r["type"] == qtype]
            assert all(("first_hop_in_search" in r) == (qtype == "bridge") for r in rs)
            assert all(("hops_found" in r) == (qtype == "bridge") for r in rs)
            if qtype == "bridge":  # two hops: the first found, then the answer's passage
                assert all(0 <= r["hops_found"] <= 2 and (r["hops_found"] > 0) == r["first_hop_in_search"] for r in rs)
                assert t["mean_hops_found"] == round(sum(r["hops_found"] for r in rs) / len(rs), 2)
            assert t["golden_in_search_rate"] == round(100 * sum(r["golden_in_search"] for r in rs) / len(rs), 2)
            if qtype == "bridge":
                rate = round(100 * sum(r["first_hop_in_search"] for r in rs) / len(rs), 2)
                assert t["first_hop_in_search_rate"] == rate
            else:
                assert "first_hop_in_search_rate" not in t
        for r in records:  # every context's response only when asked for (react here)
            assert ("responses" in r) == (method == "react")
            if method == "react":
                assert len(r["responses"]) == len(r["context_tokens"])
                assert r["responses"][-1] == r["final_response"]
    assert '"method": "react", "questions": 20' in capsys.readouterr().out


def test_eval_bad_method_and_data_fail_cleanly(world_dir, tiny_model_dir, tmp_path, capsys, fresh_registry):
    base = [f"model.path={tiny_model_dir}", f"world.dir={world_dir}", f"run_dir={tmp_path}"]
    assert main(["eval", "--method", "memsercher", "--data", f"{world_dir}/dev.jsonl"] + base) == 2
    assert "no workflow named 'memsercher'; available: memsearcher, react" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q?"}\n')
    assert main(["eval", "--data", str(bad)] + base) == 2
    assert f"{bad}:1: 'golden_answers' must be a non-empty list" in capsys.readouterr().err


def test_eval_refuses_a_dead_server_by_key(world_dir, tiny_model_dir, retriever_url, tmp_path, capsys):
    """A url left from a finished run (its config.yaml) is refused by key before the first
    question, not retried into a traceback; a live one passes the check."""
    from areal_mem.net import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    base = ["eval", "--quiet", "--limit", "2", f"model.path={tiny_model_dir}", f"world.dir={world_dir}"]
    base.append(f"run_dir={tmp_path}")
    assert main([*base, f"generator.urls=[{dead}]", f"retriever.urls=[{retriever_url}]"]) == 2
    err = capsys.readouterr().err
    assert f"config error: generator.urls[0]={dead}: nothing answers there (Connection refused)" in err
    assert "Traceback" not in err
    assert main([*base, f"retriever.urls=[{retriever_url},{dead}]"]) == 2
    assert f"retriever.urls[1]={dead}: nothing answers there" in capsys.readouterr().err
    assert not (tmp_path / "eval").exists()  # refused before any question ran


def test_eval_through_an_openai_compatible_server(world_dir, tiny_model_dir, retriever_url, tmp_path):
    """`generator.api=openai`: `areal-mem eval` drives any OpenAI-compatible `/v1/completions` (here
    the embedded server's); greedy answers equal the native API's. Training refuses the API."""
    from areal_mem.config import ConfigError, load_run
    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.rollout.generator.client import client_from_config
    from areal_mem.rollout.generator.launch import start_embedded_generator

    with start_embedded_generator(tiny_model_dir, EmbeddedConfig(device="cpu", torch_threads=1)) as gen:
        common = [
            "--data",
            f"{world_dir}/dev.jsonl",
            "--limit",
            "12",
            "--quiet",
            "--method",
            "memsearcher",
            f"model.path={tiny_model_dir}",
            f"world.dir={world_dir}",
            f"retriever.urls=[{retriever_url}]",
            f"generator.urls=[{gen.url}]",
            "rollout.limits.max_new_tokens=32",
            "rollout.prompt_style=short",
            "eval.save_responses=true",
        ]
        assert main(["eval", *common, f"run_dir={tmp_path / 'native'}"]) == 0
        assert main(["eval", *common, f"run_dir={tmp_path / 'openai'}", "generator.api=openai"]) == 0

    def records(run):
        path = tmp_path / run / "eval" / "memsearcher" / "results.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    native, via_openai = records("native"), records("openai")
    assert [r["id"] for r in native] == [r["id"] for r in via_openai]
    # the first generation of every question starts from the same prompt: the same greedy text
    assert [r["responses"][0] for r in native] == [r["responses"][0] for r in via_openai]
    cfg = load_run([], [f"model.path={tiny_model_dir}", "generator.api=openai", "generator.urls=[http://127.0.0.1:9]"])
    with pytest.raises(ConfigError, match="generator.api=openai is for evaluation only"):
        client_from_config(cfg.generator)


def test_a_generator_giving_out_mid_way_stops_eval_in_one_line_and_keeps_the_answers(
    world_dir, tiny_model_dir, retriever_url, tmp_path, capsys
):
    """A generator that stops answering after some questions (a proxy answering 503 after its
    6th /generate) ends `areal-mem eval` with one line that says how many questions were
    answered and why it stopped, not a traceback; the answered ones are kept beside
    `results.jsonl`, which with its summary is written only for a whole evaluation; a whole
    evaluation later answers them alike and removes the partial file."""
    import re

    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.rollout.generator.launch import start_embedded_generator
    from tests.workflows._proxy import GeneratorProxy

    base = ["eval", "--quiet", "--data", f"{world_dir}/dev.jsonl", "--limit", "8", "--method", "react"]
    base += [f"model.path={tiny_model_dir}", f"world.dir={world_dir}", f"run_dir={tmp_path}"]
    base += [f"retriever.urls=[{retriever_url}]", "rollout.limits.max_new_tokens=24", "rollout.prompt_style=short"]
    base += ["eval.max_turns=2", "eval.concurrency=1"]  # at most 2 requests a question: 8 need more than 6
    out = tmp_path / "eval" / "react"
    with start_embedded_generator(tiny_model_dir, EmbeddedConfig(device="cpu", torch_threads=1)) as gen:
        proxy = GeneratorProxy(gen.url, fail_after=6)
        assert main([*base, f"generator.urls=[{proxy.url}]"]) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err
        said = re.search(r"areal-mem eval: stopped after (\d) of 8 questions: GeneratorUnavailable: .*HTTP 503", err)
        assert said, err
        partial = [json.loads(line) for line in (out / "results.partial.jsonl").read_text().splitlines()]
        assert 3 <= len(partial) == int(said.group(1)) < 8  # 6 requests answer at least 3 questions
        assert not (out / "results.jsonl").exists() and not (out / "summary.json").exists()
        assert main([*base, f"generator.urls=[{gen.url}]"]) == 0
    whole = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["id"], r["answer"], r["em"]) for r in partial] == [
        (r["id"], r["answer"], r["em"]) for r in whole[: len(partial)]
    ]
    assert not (out / "results.partial.jsonl").exists()
