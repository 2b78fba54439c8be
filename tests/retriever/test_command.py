"""`areal-mem retriever build|serve` through the real command line entry point."""

import pytest

from areal_mem.app.cli import main
from areal_mem.retriever.manifest import Manifest


def test_build_bm25_from_the_command_line(corpus_path, tmp_path, capsys):
    out = str(tmp_path / "idx")
    assert (
        main(
            [
                "retriever",
                "build",
                "--corpus",
                corpus_path,
                "--out",
                out,
                "--kind",
                "bm25",
                "--quiet",
                "retriever.bm25.k1=1.2",
                "retriever.chunk_size=100",
            ]
        )
        == 0
    )
    m = Manifest.load(out)
    assert m.kind == "bm25" and m.index["k1"] == 1.2
    assert f"built bm25 index of {m.count} passages" in capsys.readouterr().out


def test_malformed_corpus_and_bad_config_are_reported(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "0", "contents": "x"}\n{"id": "1"}\n')
    assert (
        main(["retriever", "build", "--corpus", str(bad), "--out", str(tmp_path / "i"), "--kind", "bm25", "--quiet"])
        == 2
    )
    assert f"{bad}:2: field 'contents'" in capsys.readouterr().err
    assert (
        main(
            ["retriever", "build", "--corpus", str(bad), "--out", str(tmp_path / "i"), "retriever.max_batch_size=lots"]
        )
        == 2
    )
    assert "retriever.max_batch_size" in capsys.readouterr().err


def test_serve_refuses_a_public_bind_without_token(bm25_dir, capsys, monkeypatch):
    monkeypatch.delenv("AREAL_MEM_RETRIEVER_TOKEN", raising=False)
    assert main(["retriever", "serve", "--index", bm25_dir, "--host", "0.0.0.0", "--port", "0"]) == 2
    assert "refusing to bind '0.0.0.0' without a shared token" in capsys.readouterr().err


def test_serve_refuses_an_index_of_another_corpus(bm25_dir, tmp_path, capsys):
    other = tmp_path / "other.jsonl"
    other.write_text('{"id": "0", "contents": "x"}\n')
    assert main(["retriever", "serve", "--index", bm25_dir, "--corpus", str(other)]) == 2
    assert "corpus mismatch" in capsys.readouterr().err


def test_help_names_both_actions(capsys):
    with pytest.raises(SystemExit):
        main(["retriever", "--help"])
    out = capsys.readouterr().out
    assert "build" in out and "serve" in out
