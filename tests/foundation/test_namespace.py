"""One import namespace: the wheel installs `areal_mem` and nothing else at the top level, with the
service folders mapped under it (setup.py's package_dir), and every module imports from the wheel.

The wheel is built from a copy of the tree with pip (no build isolation: the venv's setuptools,
no index needed), unpacked into a folder, and imported with the working directory kept off
sys.path, so nothing but the wheel's own layout can answer `import areal_mem.rollout...`.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERIC = ("rollout", "learner", "retriever")
TREE = ("areal_mem", *GENERIC, "setup.py", "pyproject.toml", "README.md", "LICENSE")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    src = tmp_path_factory.mktemp("src")
    for name in TREE:
        path = os.path.join(ROOT, name)
        if os.path.isdir(path):
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out), "."]
    res = subprocess.run(cmd, cwd=src, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (name,) = os.listdir(out)
    return str(out / name)


def test_the_wheel_has_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"areal_mem"}
    for service in GENERIC:
        assert f"areal_mem/{service}/__init__.py" in names
    assert "areal_mem/rollout/prompts/memsearcher.txt" in names  # package data follows the mapping
    assert "areal_mem/app/world/phrasings.json" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(meta).decode()


def test_every_module_imports_from_the_unpacked_wheel(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    modules = sorted(
        n[:-3].replace("/", ".").removesuffix(".__init__")
        for n in zipfile.ZipFile(wheel).namelist()
        if n.endswith(".py") and not n.endswith("__main__.py")
    )
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    mod = importlib.import_module(m)\n"
        f"    assert mod.__file__.startswith({str(site)!r}), (m, mod.__file__)\n"
        "for generic in ('rollout', 'learner', 'retriever'):\n"
        "    try:\n"
        "        importlib.import_module(generic)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    sys.exit(f'{generic} is importable at the top level')\n"
        "print(len(sys.modules))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    res = subprocess.run(
        [sys.executable, "-P", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert len(modules) > 150


def _generic_imports(path: str):
    tree = ast.parse(open(path, encoding="utf-8").read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] in GENERIC:
                yield f"{os.path.relpath(path, ROOT)}:{node.lineno}: {name}"


def test_no_file_imports_a_service_by_its_folder_name():
    """Only `areal_mem.<service>` exists once installed; a bare `import rollout` would work from a
    checkout's root (the folder is there) and fail for every user."""
    found = []
    for top in ("areal_mem", *GENERIC, "tests", "benchmarks", "examples", "scripts"):
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            found += [hit for f in files if f.endswith(".py") for hit in _generic_imports(os.path.join(folder, f))]
    assert found == []
