"""Run import-linter's layer contracts (.importlinter) on the tree as it installs.

The service folders `rollout/`, `learner/`, `retriever/` install as `areal_mem.rollout`,
`areal_mem.learner`, `areal_mem.retriever` (setup.py's package_dir). import-linter finds a
package's modules by walking its folder, so it cannot follow that mapping in the source tree;
this script lays the tree out as the wheel does (copies, in a temporary folder) and lints that.

    python scripts/lint_imports.py [--root TREE] [lint-imports options...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

SERVICES = ("rollout", "learner", "retriever")
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def installed_layout(root: str, dest: str) -> str:
    """Copy `root`'s packages into `dest` as they install: `dest/areal_mem/<service>/...`."""
    ignore = shutil.ignore_patterns("__pycache__")
    pkg = os.path.join(dest, "areal_mem")
    shutil.copytree(os.path.join(root, "areal_mem"), pkg, ignore=ignore)
    for service in SERVICES:
        shutil.copytree(os.path.join(root, service), os.path.join(pkg, service), ignore=ignore)
    return dest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=HERE, help="the source tree to lint (default: this checkout)")
    args, rest = parser.parse_known_args(argv)
    lint = os.path.join(os.path.dirname(sys.executable), "lint-imports")
    with tempfile.TemporaryDirectory(prefix="areal-mem-layers-") as tmp:
        installed_layout(os.path.abspath(args.root), tmp)
        env = dict(os.environ, PYTHONPATH=tmp)  # the laid-out copy before the installed package
        cmd = [lint, "--config", os.path.join(HERE, ".importlinter"), "--no-cache", *rest]
        return subprocess.run(cmd, cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
