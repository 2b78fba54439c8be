"""The CPU Flat search scores a batch block by block and merges: the same rows and scores as one
matrix product over every vector, with memory of one block's scores."""

import faiss
import numpy as np
import torch

from areal_mem.config.retriever import FaissConfig
from areal_mem.retriever import dense
from areal_mem.retriever.dense import FAISS_FILE, DenseSearcher, topk_over_blocks


def vectors(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_blocks_of_any_size_give_the_one_product_answer():
    x, q = torch.from_numpy(vectors(1003, 16, 0)), torch.from_numpy(vectors(9, 16, 1))
    whole = torch.topk(q @ x.T, 10, dim=1)
    for size in (1, 7, 100, 1003, 5000):  # blocks smaller than k, uneven last blocks, one block
        rows, scores = topk_over_blocks(q, ((i, x[i : i + size]) for i in range(0, len(x), size)), 10)
        assert np.array_equal(rows, whole.indices.numpy()), size
        assert np.allclose(scores, whole.values.numpy(), atol=1e-6)
    rows, scores = topk_over_blocks(q, iter(()), 10)
    assert rows.shape == (9, 0) and scores.shape == (9, 0)


class Given:
    """An encoder stand-in that returns fixed query vectors."""

    def __init__(self, q: np.ndarray):
        self.q = q

    def encode_queries(self, texts):
        return self.q[: len(texts)]


def test_a_batch_on_a_flat_index_answers_as_faiss_across_block_edges(tmp_path, monkeypatch):
    x, q = vectors(2500, 32, 2), vectors(16, 32, 3)
    index = faiss.IndexFlatIP(32)
    index.add(x)
    faiss.write_index(index, str(tmp_path / FAISS_FILE))
    monkeypatch.setattr(dense, "SCORE_BLOCK_ROWS", 600)  # five blocks, the last of 100 rows
    searcher = DenseSearcher(str(tmp_path), Given(q), FaissConfig(mmap=True))
    rows, scores = searcher.search(["q"] * 16, 5)  # >= MATMUL_MIN_QUERIES: the blocked product
    want_scores, want_rows = index.search(q, 5)
    assert np.array_equal(rows, want_rows)
    assert np.allclose(scores, want_scores, atol=1e-5)


def test_a_lone_query_on_a_large_index_takes_the_product_and_the_file_is_read_first(tmp_path, monkeypatch, capsys):
    x, q = vectors(3000, 32, 4), vectors(1, 32, 5)
    index = faiss.IndexFlatIP(32)
    index.add(x)
    faiss.write_index(index, str(tmp_path / FAISS_FILE))
    monkeypatch.setattr(dense, "MATMUL_MIN_ROWS", 2000)
    monkeypatch.setattr(dense, "SCORE_BLOCK_ROWS", 700)
    searcher = DenseSearcher(str(tmp_path), Given(q), FaissConfig(mmap=True))
    assert f"reading {tmp_path / FAISS_FILE} (0.0 GB) into the page cache" in capsys.readouterr().out
    used = []
    monkeypatch.setattr(dense, "topk_over_blocks", lambda *a: used.append(1) or topk_over_blocks(*a))
    rows, scores = searcher.search(["q"], 3)
    want_scores, want_rows = index.search(q, 3)
    assert used == [1] and np.array_equal(rows, want_rows) and np.allclose(scores, want_scores, atol=1e-5)
