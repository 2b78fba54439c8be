"""A run started from a folder that holds a `rollout.py`, a `learner/` and a `retriever.py` of the
user's own uses the installed packages in every process: areal-mem installs one namespace,
`areal_mem`, so a user's generic module names never meet its own."""

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
