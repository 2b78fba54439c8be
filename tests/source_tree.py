"""The Python files of the four packages, for the tests that read the source (security, typing)."""

import os
from typing import Iterator, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("areal_mem", "rollout", "learner", "retriever")


def package_sources() -> Iterator[Tuple[str, str]]:
    """(path relative to the repository, absolute path) of every .py file of the packages."""
    for pkg in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, pkg)):
            for name in sorted(files):
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    yield os.path.relpath(path, ROOT), path
