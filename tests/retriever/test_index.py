"""Index building and loading: manifest contents, mismatch refusals, every faiss type, recall@5."""

import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from areal_mem.config.retriever import EncoderConfig, FaissIndexType, Pooling, RetrieverConfig
from areal_mem.retriever.build import build_index
from areal_mem.retriever.corpus import CorpusReader, corpus_checksum
from areal_mem.retriever.encoder import default_encoder_path
from areal_mem.retriever.index import load_index
from areal_mem.retriever.manifest import IndexMismatchError, Manifest


def _recall_at_5(index, title_queries):
    hits = index.search([q for q, _ in title_queries], 5)
    return sum(any(d["id"] == pid for d, _ in h) for h, (_, pid) in zip(hits, title_queries)) / len(title_queries)


def _head(corpus_path, out, n):
    with open(corpus_path) as f, open(out, "w") as g:
        g.writelines(line for _, line in zip(range(n), f))
    return str(out)


def test_manifest_records_what_the_index_was_built_from(dense_dir, bm25_dir, corpus_path):
    checksum, count = corpus_checksum(corpus_path)
    dense, bm25 = Manifest.load(dense_dir), Manifest.load(bm25_dir)
    assert (dense.kind, dense.count, dense.corpus_checksum, dense.dim) == ("dense", count, checksum, 384)
    assert dense.encoder["path"] == default_encoder_path() and dense.encoder["pooling"] == "mean"
    assert dense.encoder["fingerprint"].startswith("sha256:")
    assert dense.index == {"type": "flat", "factory": "Flat", "ntotal": count}
    assert (bm25.kind, bm25.count, bm25.corpus_checksum) == ("bm25", count, checksum)


@pytest.mark.parametrize("kind", ["dense", "bm25"])
def test_recall_at_5_of_title_queries_on_dev(kind, dense_dir, bm25_dir, title_queries):
    index = load_index(dense_dir if kind == "dense" else bm25_dir)
    recall = _recall_at_5(index, title_queries)
    print(f"{kind} recall@5 on {len(title_queries)} dev title queries: {recall:.3f}")
    assert recall >= 0.9


@pytest.mark.parametrize("kind", ["dense", "bm25"])
def test_a_batch_answers_like_its_queries_alone(kind, dense_dir, bm25_dir, title_queries):
    """A batch goes through other kernels (dense: one matrix product, not faiss) than one query."""
    index = load_index(dense_dir if kind == "dense" else bm25_dir)
    queries = [q for q, _ in title_queries[:24]]
    together = index.search(queries, 5)
    for q, hits in zip(queries, together):
        [alone] = index.search([q], 5)
        assert [d["id"] for d, _ in hits] == [d["id"] for d, _ in alone]
        assert [s for _, s in hits] == pytest.approx([s for _, s in alone], abs=1e-5)


def test_bfloat16_queries_on_a_float32_index(dense_dir, title_queries):
    """dtype is precision, not identity: the fingerprint is of the float32 weights, so it loads."""
    fp32 = load_index(dense_dir)
    bf16 = load_index(dense_dir, dtype="bfloat16")
    assert bf16.searcher.encoder.model.dtype == torch.bfloat16
    queries = [q for q, _ in title_queries[:16]]
    a, b = fp32.searcher.encoder.encode_queries(queries), bf16.searcher.encoder.encode_queries(queries)
    assert (a * b).sum(1).min() > 0.99
    assert _recall_at_5(bf16, title_queries) >= 0.9


def test_corpus_mismatch_is_refused(bm25_dir, corpus_path, tmp_path):
    assert load_index(bm25_dir, corpus_path=corpus_path).count == Manifest.load(bm25_dir).count
    other = _head(corpus_path, tmp_path / "other.jsonl", 10)
    with pytest.raises(IndexMismatchError, match="corpus mismatch.*10 passages"):
        load_index(bm25_dir, corpus_path=other)


def test_encoder_setting_mismatch_is_refused(dense_dir):
    with pytest.raises(IndexMismatchError, match="encoder mismatch on 'pooling'"):
        load_index(dense_dir, encoder=EncoderConfig(pooling=Pooling.cls))
    with pytest.raises(IndexMismatchError, match="encoder mismatch on 'query_prefix'"):
        load_index(dense_dir, encoder=EncoderConfig(query_prefix="query: ", passage_prefix="passage: "))


def test_changed_weights_at_the_encoder_path_are_refused(corpus_path, tmp_path):
    enc_dir = shutil.copytree(default_encoder_path(), tmp_path / "minilm")
    corpus = _head(corpus_path, tmp_path / "small.jsonl", 40)
    cfg = RetrieverConfig(encoder=EncoderConfig(path=str(enc_dir)))
    build_index(corpus, str(tmp_path / "idx"), "dense", cfg, show_progress=False)
    weights = load_file(str(enc_dir / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name] = weights[name] + 0.01
    save_file(weights, str(enc_dir / "model.safetensors"))
    with pytest.raises(IndexMismatchError, match="encoder mismatch on 'fingerprint'.*has changed"):
        load_index(str(tmp_path / "idx"))


@pytest.mark.parametrize("ftype", [FaissIndexType.hnsw, FaissIndexType.ivfpq])
def test_approximate_faiss_types_find_title_passages(ftype, corpus_path, tmp_path):
    corpus = _head(corpus_path, tmp_path / "head.jsonl", 120)
    queries = [(p.title, p.id) for p in list(CorpusReader(corpus))[::3]]
    cfg = RetrieverConfig(chunk_size=64)
    cfg.faiss.type = ftype
    cfg.faiss.pq_m, cfg.faiss.pq_nbits, cfg.faiss.train_size = 16, 4, 80  # small: trains in seconds
    m = build_index(corpus, str(tmp_path / "idx"), "dense", cfg, show_progress=False)
    assert m.index["type"] == ftype.value and m.index["ntotal"] == m.count == 120
    if ftype == FaissIndexType.ivfpq:
        assert m.index["factory"] == "IVF2,PQ16x4"  # nlist = 80 training vectors // 39
    index = load_index(str(tmp_path / "idx"), faiss=cfg.faiss)
    assert _recall_at_5(index, queries) >= 0.8


def test_interrupted_build_leaves_no_loadable_index(tmp_path, corpus_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(open(corpus_path).readline() + "{broken\n")
    out = tmp_path / "idx"
    build_index(corpus_path, str(out), "bm25", show_progress=False)
    with pytest.raises(Exception, match="bad.jsonl:2"):
        build_index(str(bad), str(out), "bm25", show_progress=False)
    assert not os.path.exists(out / "manifest.json")
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        load_index(str(out))


def test_bm25_returns_only_documents_that_hold_a_query_word(bm25_dir, corpus_path):
    """As Lucene (Pyserini) does: no document of score 0 for a word no document holds, and a word
    held by one document finds that one alone, however many were asked for."""
    import collections
    import json
    import re

    with open(corpus_path) as f:
        docs = [json.loads(line) for line in f]
    holders = collections.defaultdict(set)
    for d in docs:
        for word in set(re.findall(r"[a-z]{4,}", d["contents"].lower())):
            holders[word].add(d["id"])
    rare = next(w for w, ids in sorted(holders.items()) if len(ids) == 1)
    index = load_index(bm25_dir)
    [none, one] = index.search(["qqqzzzxxy", rare], 5)
    assert none == []
    assert [doc["id"] for doc, _ in one] == list(holders[rare]) and one[0][1] > 0
