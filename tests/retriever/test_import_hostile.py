"""`areal-mem retriever import` and serving against careless or hostile corpora: every row is
checked once at import (a JSON object, within `retriever.max_passage_bytes`), a corpus rewritten
in place after the import is refused at serve naming the file, and a relative symlink is
resolved before it is linked."""

from __future__ import annotations

import json
import os
import time

import pytest

from areal_mem.app.cli import main
from areal_mem.retriever.index import load_index
from areal_mem.retriever.manifest import IndexMismatchError, Manifest

from .test_import import E5, PASSAGES, wiki  # noqa: F401  (the module's fixture)


def _corpus_with(wiki, tmp_path, row: int, line: str):  # noqa: F811
    lines = open(wiki["corpus"]).read().splitlines()
    lines[row] = line
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _import(wiki, corpus, out, *extra):  # noqa: F811
    argv = ["retriever", "import", "--faiss", wiki["Flat"], "--corpus", str(corpus), "--out", str(out), "--quiet"]
    return main([*argv, *E5, *extra, "retriever.threads=1"])


def test_a_huge_passage_is_refused_at_import_and_at_serve(wiki, tmp_path, capsys):  # noqa: F811
    big = json.dumps({"id": "99", "contents": "x" * 200_000})
    corpus = _corpus_with(wiki, tmp_path, 99, big)
    assert _import(wiki, corpus, tmp_path / "idx", "retriever.max_passage_bytes=100000") == 2
    err = capsys.readouterr().err
    assert f"{corpus} row 99: a passage of {len(big) + 1} bytes, over retriever.max_passage_bytes = 100000" in err
    assert not (tmp_path / "idx" / "manifest.json").exists()
    # imported under a higher limit (the self-retrieval sample misses row 99), then served under a lower one
    assert _import(wiki, corpus, tmp_path / "idx", "--sample", "4") == 0
    t0 = time.monotonic()
    with pytest.raises(IndexMismatchError, match=r"row 99: a passage of 200\d\d\d bytes, over .* = 100000"):
        load_index(str(tmp_path / "idx"), max_passage_bytes=100_000)
    assert time.monotonic() - t0 < 30


def test_a_row_that_is_not_a_json_object_is_refused_at_import(wiki, tmp_path, capsys):  # noqa: F811
    corpus = _corpus_with(wiki, tmp_path, 57, "id 57 lost its braces")
    assert _import(wiki, corpus, tmp_path / "idx") == 2
    assert f"{corpus} row 57 (byte " in capsys.readouterr().err


def test_a_corpus_rewritten_in_place_at_the_same_size_is_refused_at_serve(wiki, tmp_path):  # noqa: F811
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(open(wiki["corpus"], "rb").read())
    assert _import(wiki, corpus, tmp_path / "idx") == 0
    assert load_index(str(tmp_path / "idx")).docs.get([3])[0]["id"] == "3"
    time.sleep(0.05)  # past the file system's timestamp granularity
    data = corpus.read_bytes()
    with open(corpus, "r+b") as f:  # two digits of row 3's id swapped in place: same size, other bytes
        at = data.index(b'{"id": "3"')
        f.seek(at + 8)
        f.write(b"4")
    with pytest.raises(IndexMismatchError, match=r"corpus.jsonl: modified since `areal-mem retriever import`"):
        load_index(str(tmp_path / "idx"))


def test_a_relative_symlink_is_resolved_before_linking(wiki, tmp_path, capsys):  # noqa: F811
    links = tmp_path / "links"
    links.mkdir()
    os.symlink(os.path.relpath(wiki["corpus"], links), links / "wiki.jsonl")
    os.symlink(os.path.relpath(wiki["Flat"], links), links / "e5.index")
    out = tmp_path / "idx"
    argv = ["retriever", "import", "--faiss", str(links / "e5.index"), "--corpus", str(links / "wiki.jsonl")]
    assert main([*argv, "--out", str(out), "--quiet", *E5, "retriever.threads=1"]) == 0
    assert "(hardlink faiss.index, corpus hardlink corpus.jsonl)" in capsys.readouterr().out
    assert os.path.samefile(out / "corpus.jsonl", wiki["corpus"]) and not os.path.islink(out / "corpus.jsonl")
    index = load_index(str(out))  # was refused at serve as "gone"
    assert len(index.docs) == PASSAGES and index.docs.get([5])[0]["id"] == "5"
    assert Manifest.load(str(out)).imported["corpus"]["linked"] == "hardlink"
