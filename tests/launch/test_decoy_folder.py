"""A run started from a folder that holds a `rollout.py`, a `learner/` and a `retriever.py` of the
user's own uses the installed packages in every process, and a shadowed install is refused by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

AREAL_MEM = os.path.join(os.path.dirname(sys.executable), "areal-mem")
DECOYS = {"rollout.py": "rollout", "retriever.py": "retriever", os.path.join("learner", "__init__.py"): "learner"}


@pytest.fixture
def decoy_dir(tmp_path):
    """Each decoy leaves a marker file and exits the process that imported it."""
    folder = tmp_path / "work"
    (folder / "learner").mkdir(parents=True)
    for rel, name in DECOYS.items():
        marker = tmp_path / f"imported-{name}"
        (folder / rel).write_text(
            f"open({str(marker)!r}, 'w').close()\nraise SystemExit('decoy {name} imported')\n", encoding="utf-8"
        )
    return folder


def _markers(decoy_dir):
    return sorted(p.name for p in decoy_dir.parent.glob("imported-*"))


def test_eval_from_a_decoy_folder_runs_the_installed_packages(decoy_dir, world_dir, tiny_model_dir, tmp_path):
    """`areal-mem eval` starts a generator and a retriever as children (python -P -m ...): none of
    the three processes imports the user's files."""
    run_dir = tmp_path / "run"
    res = subprocess.run(
        [
            AREAL_MEM, "eval", "--data", f"{world_dir}/dev.jsonl", "--limit", "2", "--quiet",
            f"model.path={tiny_model_dir}", f"world.dir={world_dir}", f"run_dir={run_dir}",
            f"retriever.index_dir={tmp_path / 'index'}", "retriever.kind=bm25",
            "rollout.limits.max_new_tokens=8", "rollout.prompt_style=short", "generator.embedded.device=cpu",
        ],
        cwd=decoy_dir, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert _markers(decoy_dir) == []
    summary = json.loads((run_dir / "eval" / "memsearcher" / "summary.json").read_text())
    assert summary["questions"] == 2


@pytest.mark.parametrize("how", ["python -m", "PYTHONPATH"])
def test_a_shadowed_install_is_refused_by_name(decoy_dir, how):
    """The two ways a folder still gets ahead of the install: `python -m` from it, or PYTHONPATH."""
    env = dict(os.environ)
    if how == "python -m":
        cmd = [sys.executable, "-m", "areal_mem.app.cli", "config"]
    else:
        cmd, env["PYTHONPATH"] = [AREAL_MEM, "config"], str(decoy_dir)
    res = subprocess.run(cmd, cwd=decoy_dir, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert _markers(decoy_dir) == []  # refused before anything imported them
    for name in ("rollout", "learner", "retriever"):
        assert f"{name!r} would be imported from {decoy_dir / name}" in res.stderr
    assert "not from this installation of areal-mem" in res.stderr


def test_an_install_of_linked_files_is_not_taken_for_a_shadow(tmp_path):
    """Real folders holding links to the files (setuptools' strict editable mode, Bazel or pex
    trees): the packages and areal_mem resolve to the same root, so nothing is refused."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tree = tmp_path / "tree"
    for pkg in ("areal_mem", "rollout", "learner", "retriever"):
        for folder, dirs, files in os.walk(os.path.join(repo, pkg)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            out = tree / os.path.relpath(folder, repo)
            out.mkdir(parents=True, exist_ok=True)
            for name in files:
                (out / name).symlink_to(os.path.join(folder, name))
    code = "from areal_mem.app.installation import shadowed; import areal_mem; print(areal_mem.__file__, shadowed())"
    env = dict(os.environ, PYTHONPATH=str(tree))
    res = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(tree / "areal_mem" / "__init__.py"), "[]"]
