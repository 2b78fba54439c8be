"""The wheel builds without build isolation against the setuptools that pyproject.toml declares as
its minimum, builds without a warning, and holds every module of the tree.

`pip wheel --no-build-isolation` uses whatever setuptools is installed, so a declared minimum too
low passes every build that happens to have a newer one (setuptools 69-76 cannot read the
`license = "Apache-2.0"` string). The declared minimum release (its newest patch) is installed
into a folder ahead of the venv's own on PYTHONPATH; the wheel says which setuptools made it.
Needs the package index (PyPI) for that setuptools, as CI has.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from typing import Dict, List, Tuple

import pytest
import setuptools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TREE = ("areal_mem", "rollout", "learner", "retriever", "setup.py", "pyproject.toml", "README.md", "LICENSE")
WARNING = re.compile(r"\b\w+Warning\b")  # a Python warning the build backend printed (category name)


def declared_minimum() -> str:
    """The release after `setuptools>=` in pyproject.toml's build requirements."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        requires = tomllib.load(f)["build-system"]["requires"]
    (spec,) = [r for r in requires if re.match(r"setuptools\b", r)]
    match = re.fullmatch(r"setuptools\s*>=\s*([\d.]+)", spec)
    assert match, f"pyproject.toml [build-system] requires {spec!r}: expected setuptools>=X"
    return match.group(1)


def build(src: str, out: str, pythonpath: str = "") -> str:
    """`pip wheel --no-build-isolation` of the tree at `src`: pip's verbose output (the backend's too)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v", "-w", out, "."]
    res = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout + res.stderr


def wheel_files(out: str) -> Tuple[List[str], Dict[str, str]]:
    """The wheel's file names, and its WHEEL and METADATA texts."""
    (name,) = os.listdir(out)
    with zipfile.ZipFile(os.path.join(out, name)) as z:
        info = [n for n in z.namelist() if n.endswith((".dist-info/WHEEL", ".dist-info/METADATA"))]
        return z.namelist(), {n.rsplit("/", 1)[1]: z.read(n).decode() for n in info}


def source_modules(src: str) -> List[str]:
    """Every .py file of the package as the wheel must hold it (a service folder under `areal_mem/`):
    a folder without an `__init__.py` is skipped by package discovery, and its modules would be
    missing from the wheel while the editable install, which maps folders, still imports them."""
    out = []
    for top in TREE[:4]:
        for folder, _, files in os.walk(os.path.join(src, top)):
            rel = os.path.relpath(folder, src).replace(os.sep, "/")
            prefix = rel if top == "areal_mem" else f"areal_mem/{rel}"
            out += [f"{prefix}/{f}" for f in files if f.endswith(".py")]
    return sorted(out)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> str:
    src = tmp_path_factory.mktemp("src")
    for name in TREE:
        path = os.path.join(ROOT, name)
        if os.path.isdir(path):
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(path, src / name)
    return str(src)


@pytest.mark.parametrize("which", ["declared minimum", "installed"])
def test_the_wheel_builds_without_isolation_and_without_warnings(tree, tmp_path, which):
    pythonpath, version = "", setuptools.__version__
    if which == "declared minimum":
        release = declared_minimum()
        assert int(release.split(".")[0]) >= 77  # the SPDX `license` string and `license-files` need 77
        target = tmp_path / "setuptools"
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
        res = subprocess.run([*cmd, f"setuptools=={release}.*"], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        (dist,) = [n for n in os.listdir(target) if n.startswith("setuptools-") and n.endswith(".dist-info")]
        pythonpath, version = str(target), dist[len("setuptools-") : -len(".dist-info")]
        assert version.startswith(release + ".") or version == release
    out = tmp_path / "wheel"
    log = build(tree, str(out), pythonpath)
    names, files = wheel_files(str(out))
    assert [m for m in source_modules(tree) if m not in names] == []
    assert f"Generator: setuptools ({version})" in files["WHEEL"]  # made by the setuptools meant
    assert "License-Expression: Apache-2.0" in files["METADATA"]
    assert [line.strip() for line in log.splitlines() if WARNING.search(line)] == []
