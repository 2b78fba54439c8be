"""`python -m benchmarks wiki` end to end on a small wiki world: indexes built and served by the
product, recalls computed from the service's answers and written to the report."""

from __future__ import annotations

import json

import pytest

from areal_mem.app.world.wiki import build_wiki_world
from benchmarks.harness.command import main

pytestmark = pytest.mark.integration  # builds indexes and starts retrieval services


def test_wiki_bench_on_a_small_world(tmp_path):
    world = tmp_path / "world"
    build_wiki_world(str(world), limit=60)
    args = ["wiki", "--world", str(world), "--retrievers", "bm25,minilm", "--types", "flat,hnsw", "--full", "bm25"]
    args += ["--subset", "40", "--work-dir", str(tmp_path / "work"), "--run-dir", str(tmp_path)]
    assert main(args) == 0
    data = json.loads((tmp_path / "wiki_retrieval.json").read_text())
    cells = [(r["corpus"], r["retriever"], r["index"]) for r in data["results"]]
    assert cells == [("full", "bm25", "bm25s"), ("first 40", "bm25", "bm25s"), ("first 40", "minilm", "Flat")] + [
        ("first 40", "minilm", "HNSW32")
    ]
    full, _, flat, hnsw = data["results"]
    tests = [json.loads(line) for line in (world / "test.jsonl").read_text().splitlines()]
    assert full["questions"] == len(tests) and full["answer@5"] == 1.0  # the world's own filter rule
    assert all(0 <= r[f"answer@{k}"] <= r[f"answer@{k + 2}"] <= 1 for r in data["results"] for k in (1, 3))
    assert hnsw["recall@10_vs_flat"] == 1.0  # 40 vectors: HNSW is exact here
    assert (flat["answer@5"], flat["evidence@5"]) == (hnsw["answer@5"], hnsw["evidence@5"])
    assert "| first 40 | minilm | HNSW32 |" in (tmp_path / "wiki_retrieval.md").read_text()
    # MiniLM encoded once into its cache folder, read again by the HNSW build
    assert sum(1 for _ in (tmp_path / "work" / "vectors").rglob("keys.txt")) == 1
