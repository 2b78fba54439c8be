"""Indexes of the synthetic world's corpus and real retrieval services on 127.0.0.1, built once."""
from __future__ import annotations

import json
import os

import pytest

from retriever.build import build_index
from retriever.corpus import split_title
from retriever.launch import start_retriever


@pytest.fixture(scope="session")
def corpus_path(world_dir):
    return os.path.join(world_dir, "corpus.jsonl")


@pytest.fixture(scope="session")
def title_queries(world_dir, corpus_path):
    """(query, passage id) per dev question: the title of its first supporting passage."""
    with open(corpus_path) as f:
        contents = {d["id"]: d["contents"] for d in map(json.loads, f)}
    with open(os.path.join(world_dir, "dev.jsonl")) as f:
        dev = [json.loads(line) for line in f]
    return [(split_title(contents[q["supporting_ids"][0]])[0], q["supporting_ids"][0]) for q in dev]


@pytest.fixture(scope="session")
def dense_dir(corpus_path, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("dense_index"))
    build_index(corpus_path, out, "dense", show_progress=False)
    return out


@pytest.fixture(scope="session")
def bm25_dir(corpus_path, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("bm25_index"))
    build_index(corpus_path, out, "bm25", show_progress=False)
    return out


@pytest.fixture(scope="session")
def dense_server(dense_dir):
    with start_retriever(dense_dir, overrides=["retriever.batch_window_ms=20"]) as handle:
        yield handle


@pytest.fixture(scope="session")
def bm25_server(bm25_dir):
    with start_retriever(bm25_dir) as handle:
        yield handle
