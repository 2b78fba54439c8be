"""The import contract of docs/architecture.md, checked with import-linter on the real tree, and
shown to fail on a copy of the tree with one deliberate wrong import per contract."""

import configparser
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("areal_mem", "rollout", "learner", "retriever")  # the source folders
SCRIPT = os.path.join(ROOT, "scripts", "lint_imports.py")


def _lint(root: str, *args: str) -> subprocess.CompletedProcess:
    """lint-imports on `root` laid out as it installs (scripts/lint_imports.py)."""
    return subprocess.run([sys.executable, SCRIPT, "--root", root, *args], capture_output=True, text=True, timeout=120)


def test_the_tree_keeps_every_contract():
    res = _lint(ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "4 kept, 0 broken" in res.stdout


def test_the_base_contract_lists_every_base_module():
    """A new module of areal_mem/ outside app/ must be named in the base contract, or it is unchecked.
    `api` is not base: it re-exports the rollout service's plugin classes (its own contract keeps
    it off the composition layer)."""
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, ".importlinter"))
    listed = set(cfg["importlinter:contract:base"]["source_modules"].split())
    present = {
        "areal_mem." + (name[:-3] if name.endswith(".py") else name)
        for name in os.listdir(os.path.join(ROOT, "areal_mem"))
        if name not in ("__init__.py", "app", "api.py", "__pycache__")
        and (name.endswith(".py") or os.path.isfile(os.path.join(ROOT, "areal_mem", name, "__init__.py")))
    }
    assert listed == present


@pytest.mark.parametrize(
    "module, wrong_import, contract",
    [
        ("areal_mem/staleness.py", "import areal_mem.rollout.worker", "base"),
        ("areal_mem/config/run.py", "import areal_mem.app.cli", "base"),
        ("learner/loss.py", "import areal_mem.rollout.generator.client", "services"),
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
    installed = module[:-3].replace("/", ".")
    installed = installed if installed.startswith("areal_mem.") else "areal_mem." + installed
    assert installed in res.stdout  # the report names the importer by its installed name
    shutil.rmtree(tmp_path / module.split("/")[0])
    shutil.copytree(os.path.join(ROOT, module.split("/")[0]), tmp_path / module.split("/")[0])
    assert _lint(str(tmp_path), "--contract", contract).returncode == 0  # the copy itself was clean
