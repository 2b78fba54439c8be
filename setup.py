"""The folder mapping pyproject.toml cannot express: one import namespace, `areal_mem`.

The service folders stay at the top of the tree (the layout the project is specified with) and
install under the brand: `rollout/` as `areal_mem.rollout`, `learner/` as `areal_mem.learner`,
`retriever/` as `areal_mem.retriever`. The wheel therefore has one top-level package, and no
generic name (`retriever` is also another distribution's) is written into site-packages.

A folder of data files inside a package (the prompts) is listed as a package of its own: a folder
Python can import that is missing from `packages` is ambiguous to setuptools, which warns on
every build ("Package 'areal_mem.rollout.prompts' is absent from the `packages` configuration").
"""

from setuptools import find_packages, setup

SERVICES = ("rollout", "learner", "retriever")
# package data, {package: file patterns}; a folder of data files (no __init__.py) is a package here too
DATA = {"areal_mem.rollout.prompts": ["*.txt"], "areal_mem": ["app/world/phrasings.json"]}


def _packages():
    packages = find_packages(include=["areal_mem", "areal_mem.*"])
    package_dir = {}
    for service in SERVICES:
        package_dir[f"areal_mem.{service}"] = service
        packages += [f"areal_mem.{name}" for name in find_packages(include=[service, f"{service}.*"])]
    packages += [name for name in DATA if name not in packages]
    return packages, package_dir


PACKAGES, PACKAGE_DIR = _packages()

setup(
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    package_data=DATA,
)
