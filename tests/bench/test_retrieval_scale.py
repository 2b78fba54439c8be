"""`python -m benchmarks retrieval`: the vector codec, the stored and query vectors, the exact
answer it grades against, and one whole small run through the real service."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from benchmarks.harness import retrieval
from benchmarks.harness.command import main
from benchmarks.harness.vector_service import VectorQueries, encode_vector


def settings(**kw) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    retrieval.add_arguments(parser)
    args = parser.parse_args([])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def test_a_query_carries_its_vector_at_float16_precision():
    v = retrieval.unit(np.random.default_rng(1).standard_normal((3, 768), dtype=np.float32))
    texts = [encode_vector(x) for x in v]
    assert len(texts[0]) == 4 + 2048  # under retriever.max_query_chars (4096)
    got = VectorQueries(768).encode_queries(texts)
    assert np.abs(got - v).max() < 1e-3
    with pytest.raises(ValueError, match="query 1 is not a `vec:` vector query"):
        VectorQueries(768).encode_queries([texts[0], "who wrote Hamlet?"])
    with pytest.raises(ValueError, match="query 0 carries 768 values, the index has dimension 64"):
        VectorQueries(64).encode_queries(texts[:1])


def test_stored_vectors_are_unit_and_the_same_in_every_pass():
    a = np.concatenate([x for _, x in retrieval.chunks(250_000, 8, seed=3)])
    b = np.concatenate([x for _, x in retrieval.chunks(250_000, 8, seed=3)])
    assert a.shape == (250_000, 8) and np.array_equal(a, b)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert not np.array_equal(a[:100_000], a[100_000:200_000])  # chunks differ


def test_planted_queries_sit_at_the_asked_cosine_and_the_exact_answer_is_brute_force(tmp_path):
    args = settings(dim=128, queries=40, planted_cos=0.7, seed=2)
    rows = 150_000  # two chunks
    q = retrieval.make_queries(rows, args)
    stored = np.concatenate([x for _, x in retrieval.chunks(rows, 128, seed=2)])
    cos = np.sum(q["planted"] * stored[q["planted_rows"]], axis=1)
    assert np.all(np.abs(cos - 0.7) < 0.25) and abs(cos.mean() - 0.7) < 0.05
    queries = np.concatenate([q["uniform"], q["planted"]])
    exact = retrieval.exact_top(str(tmp_path), rows, queries, 10, args)
    brute = np.argsort(-(queries @ stored.T), axis=1)[:, :10]
    assert np.array_equal(np.sort(exact, axis=1), np.sort(brute, axis=1))
    assert all(r in e for r, e in zip(q["planted_rows"], exact[20:]))  # the planted row ranks first


def test_recall_counts_the_exact_rows_found():
    assert retrieval.recall(np.array([[1, 2, 3, 4]]), np.array([[4, 3, 9, 8]])) == 0.5
    assert retrieval.recall([[1, 2, 3, 4], [4]], np.array([[4, 3, 9, 8], [4, 1, 2, 3]])) == 0.375  # fewer returned


@pytest.mark.integration
def test_a_small_run_serves_every_index_type_and_grades_it(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["retrieval", "--rows", "3000", "--dim", "32", "--queries", "64", "--concurrency", "4,16"]
    argv += ["--nlist", "16", "--pq-m", "8", "--train-size", "1000", "--ef-sweep", "16,128", "--nprobe-sweep", "4,16"]
    argv += ["--threads", "1", "--repeats", "2", "--work-dir", str(tmp_path / "work"), "--run-dir", str(out)]
    assert main(argv) == 0
    data = json.loads((out / "retrieval.json").read_text())
    by = {r["type"]: r for r in data["results"]}
    assert [r["factory"] for r in data["results"]] == ["Flat", "IVF16,PQ8x8", "HNSW64"]
    for c in ("4", "16"):
        flat = by["flat"]["cells"][c]
        assert flat["recall_uniform"] == flat["recall_planted"] == flat["planted_row_found"] == 1.0
    # what the service answers is what faiss answers in process at the same setting
    hnsw_128 = next(p for p in by["hnsw"]["sweep"] if p["value"] == 128)
    ivf_16 = next(p for p in by["ivfpq"]["sweep"] if p["value"] == 16)
    assert by["hnsw"]["cells"]["16"]["recall_uniform"] == hnsw_128["recall_uniform"]
    assert by["ivfpq"]["cells"]["16"]["recall_planted"] == ivf_16["recall_planted"]
    assert len(by["hnsw"]["cells"]["4"]["qps_runs"]) == 2
    assert 1 <= by["flat"]["cells"]["4"]["mean_batch"] <= 4 and 1 <= by["flat"]["cells"]["16"]["mean_batch"] <= 16
    assert by["flat"]["rss_gb"] > 0 and by["flat"]["file_gb"] == pytest.approx(3000 * 32 * 4 / 1e9, rel=0.01)
    assert "| 3,000 | HNSW64 |" in (out / "retrieval.md").read_text()
    # a second run keeps the indexes it built
    assert main(argv[:-2] + ["--types", "flat", "--run-dir", str(out)]) == 0
    assert "flat: kept index" in capsys.readouterr().out
    assert len(list((tmp_path / "work" / "r3000_d32_s0").glob("exact_top10_*.npy"))) == 1  # reused
