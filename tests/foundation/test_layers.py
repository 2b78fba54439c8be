"""The import contract of docs/architecture.md, checked with import-linter on the real tree, and
shown to fail on a copy of the tree with one deliberate wrong import per contract."""

import configparser
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("areal_mem", "rollout", "learner", "retriever")
LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def _lint(cwd: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=cwd)  # the copy's packages before the installed ones
    return subprocess.run(
        [LINT, "--config", os.path.join(ROOT, ".importlinter"), "--no-cache", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_keeps_every_contract():
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "3 kept, 0 broken" in res.stdout


def test_the_base_contract_lists_every_base_module():
    """A new module of areal_mem/ outside app/ must be named in the base contract, or it is unchecked."""
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, ".importlinter"))
    listed = set(cfg["importlinter:contract:base"]["source_modules"].split())
    present = {
        "areal_mem." + (name[:-3] if name.endswith(".py") else name)
        for name in os.listdir(os.path.join(ROOT, "areal_mem"))
        if name not in ("__init__.py", "app", "__pycache__")
        and (name.endswith(".py") or os.path.isfile(os.path.join(ROOT, "areal_mem", name, "__init__.py")))
    }
    assert listed == present


@pytest.mark.parametrize(
    "module, wrong_import, contract",
    [
        ("areal_mem/staleness.py", "import rollout.worker", "base"),
        ("areal_mem/config/run.py", "import areal_mem.app.cli", "base"),
        ("learner/loss.py", "import rollout.generator.client", "services"),
        ("retriever/corpus.py", "from areal_mem.app.train import TrainPipeline", "composition"),
    ],
)
def test_a_wrong_import_breaks_its_contract(tmp_path, module, wrong_import, contract):
    for pkg in PACKAGES:
        shutil.copytree(os.path.join(ROOT, pkg), tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / module, "a", encoding="utf-8") as f:
        f.write(f"\n\ndef _wrong():\n    {wrong_import}\n")  # a lazy import counts too
    res = _lint(str(tmp_path), "--contract", contract)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Contracts: 0 kept, 1 broken." in res.stdout
    assert module[:-3].replace("/", ".") in res.stdout  # the report names the importer
    shutil.rmtree(tmp_path / module.split("/")[0])
    shutil.copytree(os.path.join(ROOT, module.split("/")[0]), tmp_path / module.split("/")[0])
    assert _lint(str(tmp_path), "--contract", contract).returncode == 0  # the copy itself was clean
