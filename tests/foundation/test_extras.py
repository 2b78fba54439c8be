"""A command that needs a module outside the core install checks it before it starts anything:
exit 2 with the pip extra to install, nothing written, no process started (areal_mem.extras)."""

from __future__ import annotations

import json
import os
import sys

import psutil
import pytest

from areal_mem.app.cli import main
from areal_mem.extras import MissingExtra, missing, require

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEBUG = os.path.join(REPO, "configs", "debug_cpu.yaml")


def hide(monkeypatch, *modules: str) -> None:
    """Make `modules` unimportable in this process (as if their extra were not installed)."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def run_refused(argv, capsys, *made: str) -> str:
    """`areal-mem argv` exits 2, starts no process and creates none of `made`; its stderr."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    assert main(argv) == 2
    started = {p.pid for p in psutil.Process().children(recursive=True)} - before
    assert not started, started
    for path in made:
        assert not os.path.exists(path), path
    return capsys.readouterr().err


def test_require_names_the_extra_and_the_install_command(monkeypatch):
    require("ray", ["json", "os.path"], "anything")  # importable: no error
    hide(monkeypatch, "faiss")
    assert missing(["json", "faiss", "no_such_module_here.sub"]) == ["faiss", "no_such_module_here.sub"]
    with pytest.raises(MissingExtra) as e:
        require(("cpu", "gpu"), ["faiss"], "a dense index")
    assert str(e.value).startswith(
        "a dense index needs the `cpu` or `gpu` extra: pip install 'areal-mem[cpu]' or 'areal-mem[gpu]'"
    )
    with pytest.raises(MissingExtra, match="needs faiss, a core dependency of areal-mem"):
        require("", ["faiss"], "x")


def test_train_with_the_ray_launcher_needs_the_ray_extra(monkeypatch, capsys, tmp_path):
    hide(monkeypatch, "ray")
    run_dir = tmp_path / "run"
    err = run_refused(["train", "--config", DEBUG, f"run_dir={run_dir}", "launcher.kind=ray"], capsys, run_dir)
    assert "areal-mem train: launcher.kind=ray needs the `ray` extra: pip install 'areal-mem[ray]'" in err


@pytest.mark.parametrize("command", ["retriever build", "retriever serve", "train", "eval"])
def test_a_dense_index_needs_faiss(command, monkeypatch, capsys, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "0", "contents": '"T"\nsome text'}) + "\n")
    run_dir, out = tmp_path / "run", tmp_path / "index"
    if command == "retriever build":
        argv = ["retriever", "build", "--corpus", str(corpus), "--out", str(out), "--kind", "dense", "--quiet"]
    elif command == "retriever serve":
        from areal_mem.retriever.manifest import Manifest

        out.mkdir()
        Manifest("dense", 1, str(corpus), "sha256:x", False, dim=384).save(str(out))
        argv = ["retriever", "serve", "--index", str(out), "--port", "0"]
    else:
        argv = [command, "--config", DEBUG, f"run_dir={run_dir}", "retriever.kind=dense"]
    hide(monkeypatch, "faiss")
    err = run_refused(argv, capsys, run_dir, *([out] if command != "retriever serve" else []))
    assert f"areal-mem {command}: a dense index" in err
    assert "needs the `cpu` or `gpu` extra: pip install 'areal-mem[cpu]' or 'areal-mem[gpu]'" in err


def test_the_dev_curve_of_a_training_run_needs_matplotlib(monkeypatch, capsys, tmp_path):
    hide(monkeypatch, "matplotlib")
    run_dir = tmp_path / "run"
    err = run_refused(["train", "--config", DEBUG, f"run_dir={run_dir}", "eval.interval=10"], capsys, run_dir)
    assert (
        "areal-mem train: the curves a training run draws (training.png, eval_during/curve.png) needs matplotlib" in err
    )
    assert "a core dependency of areal-mem" in err


def test_the_core_install_draws_the_dev_curve(tmp_path):
    """matplotlib is a core dependency: the curve a training run ends with is drawn, not skipped."""
    from areal_mem.app.evaluation.during_training import plot_curve

    rows = [{"version": v, "em": 10.0 * v, "f1": 12.0 * v, "train_em": 11.0 * v, "questions": 32} for v in range(3)]
    path = plot_curve(rows, str(tmp_path / "curve.png"))
    assert path == str(tmp_path / "curve.png")
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    from areal_mem.app.evaluation.during_training import plot_training

    train = [{"step": s, "reward": 0.1 * s, "em": 5.0 * s} for s in range(1, 4)]
    assert plot_training(train, str(tmp_path / "training.png")) == str(tmp_path / "training.png")
    assert (tmp_path / "training.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_training([], str(tmp_path / "none.png")) is None
