"""The folder mapping pyproject.toml cannot express: one import namespace, `areal_mem`.

The service folders stay at the top of the tree (the layout the project is specified with) and
install under the brand: `rollout/` as `areal_mem.rollout`, `learner/` as `areal_mem.learner`,
`retriever/` as `areal_mem.retriever`. The wheel therefore has one top-level package, and no
generic name (`retriever` is also another distribution's) is written into site-packages.
"""

from setuptools import find_packages, setup

SERVICES = ("rollout", "learner", "retriever")


def _packages():
    packages = find_packages(include=["areal_mem", "areal_mem.*"])
    package_dir = {}
    for service in SERVICES:
        package_dir[f"areal_mem.{service}"] = service
        packages += [f"areal_mem.{name}" for name in find_packages(include=[service, f"{service}.*"])]
    return packages, package_dir


PACKAGES, PACKAGE_DIR = _packages()

setup(
    packages=PACKAGES,
    package_dir=PACKAGE_DIR,
    package_data={"areal_mem.rollout": ["prompts/*.txt"], "areal_mem": ["app/world/phrasings.json"]},
)
