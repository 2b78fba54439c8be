"""Type-check the tree as it installs: mypy with pyproject.toml's [tool.mypy].

mypy resolves `areal_mem.rollout`, `areal_mem.learner`, `areal_mem.retriever` by walking folders,
and the editable install maps them with an import hook that mypy does not run. So, as
scripts/lint_imports.py does for the layer contracts, this lays the checkout out as the wheel does
(copies, in build/typecheck/tree, mtimes kept so that mypy's cache in build/typecheck/cache stays
valid), runs mypy there and prints its messages with the checkout's paths.

    python scripts/typecheck.py [mypy options...]
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from lint_imports import HERE, SERVICES, installed_layout

WORK = os.path.join(HERE, "build", "typecheck")
BACK = re.compile(r"(^|\s)areal_mem/(" + "|".join(SERVICES) + r")/", re.M)


def main(argv=None) -> int:
    tree = os.path.join(WORK, "tree")
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    installed_layout(HERE, tree)
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        os.path.join(HERE, "pyproject.toml"),
        "--cache-dir",
        os.path.join(WORK, "cache"),
        *(sys.argv[1:] if argv is None else argv),
    ]
    res = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    sys.stdout.write(BACK.sub(r"\1\2/", res.stdout))
    sys.stderr.write(res.stderr)
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
