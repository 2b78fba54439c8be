"""Indexes of the synthetic world's corpus and real retrieval services on 127.0.0.1, built once."""

from __future__ import annotations

import json
import os

import pytest

from areal_mem.retriever.build import build_index
from areal_mem.retriever.corpus import split_title
from areal_mem.retriever.encoder import set_threads
from areal_mem.retriever.launch import start_retriever


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """torch/faiss at one thread here: on the shared 2-core CI host, more threads run 10x slower."""
    import faiss
    import torch

    before = torch.get_num_threads(), faiss.omp_get_max_threads()
    set_threads(1)
    yield
    torch.set_num_threads(before[0])
    faiss.omp_set_num_threads(before[1])


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
    with start_retriever(dense_dir, overrides=["retriever.batch_window_ms=20", "retriever.threads=1"]) as handle:
        yield handle


@pytest.fixture(scope="session")
def bm25_server(bm25_dir):
    with start_retriever(bm25_dir, overrides=["retriever.threads=1"]) as handle:
        yield handle
