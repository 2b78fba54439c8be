"""One installation: `rollout`, `learner` and `retriever` must come from where `areal_mem` does.

The four top-level names are short, so a user's own `rollout.py` or `learner/` can shadow them
when its folder comes first on `sys.path` (`python -m ...` from that folder, or `PYTHONPATH`).
Children are started with `-P` (`areal_mem.process.cli_command`); this check catches the rest
before any of the packages is imported, so the user's file never runs in place of ours.
"""

from __future__ import annotations

import importlib.util
import os
from typing import List

SERVICE_PACKAGES = ("rollout", "learner", "retriever")


def _location(name: str) -> str:
    """The file or folder `import name` would load, without importing it ('' if none)."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        return ""
    if spec.submodule_search_locations:
        return os.path.realpath(list(spec.submodule_search_locations)[0])
    return os.path.realpath(spec.origin or "")


def shadowed() -> List[str]:
    """One line per service package that would be imported from outside this installation."""
    # the folder holding the package folders, resolved the same way on both sides (a tree of real
    # folders with linked files, as setuptools' strict editable mode builds, must still match)
    root = os.path.dirname(_location("areal_mem"))
    problems = []
    for name in SERVICE_PACKAGES:
        where = _location(name)
        if where != os.path.join(root, name):
            problems.append(
                f"{name!r} would be imported from {where or '(nowhere)'}, not from this installation of "
                f"areal-mem ({root})"
            )
    return problems
