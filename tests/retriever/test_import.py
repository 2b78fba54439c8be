"""`areal-mem retriever import`: faiss files built the way Search-R1 builds wiki-18's, served by offset.

Search-R1's `search_r1/search/index_builder.py`: mean-pooled, L2-normalised embeddings of
`"passage: " + contents`, `faiss.index_factory(dim, "Flat" | "HNSW32", METRIC_INNER_PRODUCT)`,
`add`, `write_index`; row i is line i of the jsonl. Here the packaged MiniLM plays e5.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os

import faiss
import numpy as np
import pytest

from areal_mem.app.cli import main
from areal_mem.config.retriever import EncoderConfig, FaissConfig
from areal_mem.retriever import importer
from areal_mem.retriever.client import RetrieverClient
from areal_mem.retriever.corpus import corpus_checksum, split_title
from areal_mem.retriever.docstore import OffsetDocStore
from areal_mem.retriever.encoder import Encoder
from areal_mem.retriever.index import load_index
from areal_mem.retriever.launch import start_retriever
from areal_mem.retriever.manifest import IndexMismatchError, Manifest

PASSAGES = 120
E5 = ["--passage-prefix", "passage: ", "--query-prefix", "query: "]


@pytest.fixture(scope="module")
def wiki(corpus_path, tmp_path_factory):
    """A small corpus in wiki-18's layout and its Search-R1-style Flat and HNSW32 faiss files."""
    d = tmp_path_factory.mktemp("searchr1")
    with open(corpus_path) as f:
        rows = [json.loads(line) for line in f][:PASSAGES]
    corpus = d / "wiki-18.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "contents": r["contents"]}) + "\n" for i, r in enumerate(rows)))
    vectors = Encoder(EncoderConfig(passage_prefix="passage: ")).encode_passages([r["contents"] for r in rows])
    files = {}
    for spec in ("Flat", "HNSW32"):
        index = faiss.index_factory(vectors.shape[1], spec, faiss.METRIC_INNER_PRODUCT)
        index.add(vectors)
        files[spec] = str(d / f"e5_{spec}.index")
        faiss.write_index(index, files[spec])
    return {"corpus": str(corpus), "rows": rows, "dir": d, **files}


def _import(wiki, out, *extra, spec="Flat"):
    argv = ["retriever", "import", "--faiss", wiki[spec], "--corpus", wiki["corpus"], "--out", str(out), "--quiet"]
    return main([*argv, *extra, "retriever.threads=1"])


@pytest.mark.parametrize("spec", ["Flat", "HNSW32"])
def test_import_and_serve_over_http(wiki, tmp_path, spec, capsys):
    out = tmp_path / "idx"
    assert _import(wiki, out, *E5, spec=spec) == 0
    assert f"imported {'Flat' if spec == 'Flat' else 'HNSW32'} index of {PASSAGES} passages" in capsys.readouterr().out
    m = Manifest.load(str(out))
    assert m.docstore == "offsets" and m.count == PASSAGES and m.encoder["passage_prefix"] == "passage: "
    assert m.imported["index"]["ntotal"] == PASSAGES and m.imported["index"]["metric"] == "inner_product"
    assert m.imported["corpus"]["checksum"] == corpus_checksum(wiki["corpus"])[0] == m.corpus_checksum
    # never a copy: the index and the corpus in the folder are the very files (one inode)
    assert os.path.samefile(out / "faiss.index", wiki[spec]) and os.path.samefile(out / "corpus.jsonl", wiki["corpus"])
    assert not (out / "docs.arrow").exists()
    assert os.path.getsize(out / "offsets.u64") == 8 * PASSAGES

    picks = [0, 37, 80, PASSAGES - 1]
    titles = [split_title(wiki["rows"][i]["contents"])[0] for i in picks]
    with start_retriever(str(out), overrides=["retriever.threads=1"]) as r:
        assert r.health()["documents"] == PASSAGES

        async def go():
            async with RetrieverClient(r.url) as c:
                one = await c.search(titles[0], top_n=3)
                many = await c.batch_search(titles, top_n=1)
                retrieved = await c._post("/retrieve", {"queries": titles[:2], "topk": 2, "return_scores": True})
                return one, many, retrieved

        one, many, retrieved = asyncio.run(go())
    assert one[0] == {"id": "0", "contents": wiki["rows"][0]["contents"]}
    assert [docs[0]["id"] for docs in many] == [str(i) for i in picks]
    assert retrieved["result"][1][0]["document"]["id"] == "37" and retrieved["result"][1][0]["score"] > 0.5


def test_reference_leaves_no_file_in_the_folder(wiki, tmp_path):
    out = tmp_path / "idx"
    assert _import(wiki, out, *E5, "--reference") == 0
    m = Manifest.load(str(out))
    assert m.imported["index"]["file"] == os.path.abspath(wiki["Flat"]) and m.imported["index"]["linked"] == "reference"
    assert sorted(os.listdir(out)) == ["manifest.json", "offsets.u64"]
    index = load_index(str(out))
    [[(doc, score)]] = index.search([split_title(wiki["rows"][5]["contents"])[0]], 1)
    assert doc["id"] == "5" and score > 0.5
    # retriever.faiss.mmap: the vectors mapped, not read; one query through faiss, 8+ through the matrix product
    mapped = load_index(str(out), faiss=FaissConfig(mmap=True))
    titles = [split_title(wiki["rows"][i]["contents"])[0] for i in range(8)]
    assert [h[0][0]["id"] for h in mapped.search(titles, 1)] == [str(i) for i in range(8)]
    assert mapped.search(titles[:1], 1)[0][0][0]["id"] == "0"


@pytest.mark.parametrize(
    "flags, cause",
    [
        ([], "likely built with --passage-prefix 'passage: '"),  # the e5 prefix forgotten
        ([*E5, "--pooling", "cls"], "likely built with --pooling mean"),
    ],
)
def test_wrong_prefix_or_pooling_is_refused_naming_the_fix(wiki, tmp_path, flags, cause, capsys):
    out = tmp_path / "idx"
    assert _import(wiki, out, *flags) == 2
    err = capsys.readouterr().err
    assert "self-retrieval check failed" in err and cause in err, err
    assert not (out / "manifest.json").exists()


def test_another_encoder_is_refused(wiki, tmp_path, capsys):
    """Vectors of the right dimension that no setting of this encoder reproduces."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((PASSAGES, 384)).astype("float32")
    faiss.normalize_L2(vectors)
    index = faiss.index_factory(384, "Flat", faiss.METRIC_INNER_PRODUCT)
    index.add(vectors)
    path = str(tmp_path / "other.index")
    faiss.write_index(index, path)
    assert main(["retriever", "import", "--faiss", path, "--corpus", wiki["corpus"], "--out", str(tmp_path / "i")]) == 2
    err = capsys.readouterr().err
    assert "No other prefix, pooling or max length fixes it: the index was likely built with another encoder" in err

    index = faiss.index_factory(768, "Flat", faiss.METRIC_INNER_PRODUCT)
    index.add(np.zeros((PASSAGES, 768), "float32"))
    faiss.write_index(index, path)
    assert main(["retriever", "import", "--faiss", path, "--corpus", wiki["corpus"], "--out", str(tmp_path / "i")]) == 2
    assert "holds 768-dimensional vectors, encoder" in capsys.readouterr().err


def test_count_mismatch_and_gzip_are_refused(wiki, tmp_path, capsys):
    longer = tmp_path / "longer.jsonl"
    longer.write_text(open(wiki["corpus"]).read() + '{"id": "x", "contents": "\\"X\\"\\nextra"}\n')
    argv = ["retriever", "import", "--faiss", wiki["Flat"], "--out", str(tmp_path / "i"), *E5, "--quiet"]
    assert main([*argv, "--corpus", str(longer)]) == 2
    err = capsys.readouterr().err
    assert f"count mismatch: {wiki['Flat']} holds {PASSAGES} vectors but {longer} has {PASSAGES + 1} passages" in err
    gz = tmp_path / "wiki.jsonl.gz"
    gz.write_bytes(gzip.compress(open(wiki["corpus"], "rb").read()))
    assert main([*argv, "--corpus", str(gz)]) == 2
    assert "gzip-compressed" in capsys.readouterr().err


def test_serve_refuses_a_changed_or_missing_file(wiki, tmp_path):
    src = tmp_path / "e5_Flat.index"
    src.write_bytes(open(wiki["Flat"], "rb").read())
    out = tmp_path / "idx"
    assert main(["retriever", "import", "--faiss", str(src), "--corpus", wiki["corpus"], "--out", str(out), *E5]) == 0
    with open(src, "ab") as f:  # the linked file grows: refused before anything is read
        f.write(b"\0")
    with pytest.raises(IndexMismatchError, match="the index file changed since"):
        load_index(str(out))
    os.remove(out / "faiss.index")
    os.remove(src)
    with pytest.raises(FileNotFoundError, match="is gone"):
        load_index(str(out))


def test_scan_corpus_offsets_across_blocks_and_blank_lines(tmp_path, monkeypatch):
    lines = [b'{"id": "a", "contents": "one"}', b"", b"   ", b' {"id": "b", "contents": "two\\u00e9", "url": "u"}']
    lines += [b'{"id": "c", "contents": "' + b"x" * 50 + b'"}', b"\t", b'{"id": "d", "contents": "last"}']
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\n".join(lines))  # no newline at the end
    monkeypatch.setattr(importer, "BLOCK", 7)  # lines and blank runs straddle block boundaries
    checksum, count = importer.scan_corpus(str(path), str(tmp_path / "off"))
    assert (checksum, count) == corpus_checksum(str(path))
    monkeypatch.setattr(OffsetDocStore, "READ", 5)  # a line longer than one read
    store = OffsetDocStore(str(path), str(tmp_path / "off"))
    assert [d["id"] for d in store.get(range(4))] == ["a", "b", "c", "d"]
    assert store.get([1]) == [{"url": "u", "id": "b", "contents": "two\u00e9"}]
    with pytest.raises(IndexError):
        store.get([4])


def test_built_index_checksum_does_not_move():
    """The fields imports added leave a built index's checksum (cited by recorded tool calls) alone."""
    import hashlib

    m = Manifest(kind="bm25", count=3, corpus_path="/c", corpus_checksum="sha256:x", split_title=False)
    identity = {"kind": "bm25", "count": 3, "corpus_checksum": "sha256:x", "split_title": False, "dim": 0}
    identity.update(encoder={}, index={}, format_version=1)
    want = "sha256:" + hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    assert m.checksum() == want


def _rss_kb(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as f:
        return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f) if k in ("VmRSS", "RssAnon")}


def test_serving_a_large_imported_corpus_keeps_memory_flat(tmp_path):
    """200,000 lines: the server's memory grows by a small fraction of the corpus while serving."""
    n, dim = 200_000, 384
    rng = np.random.default_rng(1)
    words = np.array("alpha beta gamma delta river stone city north south bridge hall field".split())
    corpus = tmp_path / "big.jsonl"
    with open(corpus, "w") as f:
        for i in range(n):
            text = " ".join(rng.choice(words, 48))
            f.write(json.dumps({"id": str(i), "contents": f'"Place {i}"\n{text}'}) + "\n")
    vectors = rng.standard_normal((n, dim)).astype("float32")
    faiss.normalize_L2(vectors)
    rows = importer.sample_rows(n)  # the rows the import check samples carry real encodings
    with open(corpus) as f:
        contents = {i: json.loads(line)["contents"] for i, line in enumerate(f) if i in set(rows)}
    vectors[rows] = Encoder(EncoderConfig()).encode_passages([contents[i] for i in rows])
    index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    del vectors
    faiss.write_index(index, str(tmp_path / "big.index"))
    del index
    out = tmp_path / "idx"
    assert (
        main(
            ["retriever", "import", "--faiss", str(tmp_path / "big.index"), "--corpus", str(corpus)]
            + ["--out", str(out), "--quiet"]
        )
        == 0
    )
    size_kb = os.path.getsize(corpus) // 1024

    queries = [f"Place {i} " + " ".join(rng.choice(words, 3)) for i in rng.integers(0, n, 400)]
    with start_retriever(str(out), overrides=["retriever.threads=1"]) as r:
        pid = r.child.proc.pid

        async def go(qs):
            async with RetrieverClient(r.url, timeout_s=120) as c:
                for i in range(0, len(qs), 20):
                    await c.batch_search(qs[i : i + 20], top_n=100)

        asyncio.run(go(queries[:100]))  # warm: allocator pools, first pages of the offsets
        before = _rss_kb(pid)
        asyncio.run(go(queries[100:]))  # 30,000 documents read from the corpus file
        after = _rss_kb(pid)
    grown = after["VmRSS"] - before["VmRSS"]
    print(
        f"corpus {size_kb} kB; server RSS {before['VmRSS']} -> {after['VmRSS']} kB (+{grown}), anon +{after['RssAnon'] - before['RssAnon']} kB"
    )
    assert grown < 0.15 * size_kb, (before, after, size_kb)
