"""Every numeric config key has a declared range, checked at load time naming the key and where
it was set (finding 14: 13 of 15 out-of-range values used to pass `areal-mem config`)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing

import pytest

from areal_mem.config import ConfigError, load_config
from areal_mem.config.ranges import RANGES
from areal_mem.config.run import RunConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEBUG = os.path.join(ROOT, "configs", "debug_cpu.yaml")


def numeric_fields(typ=RunConfig, prefix=""):
    """(dotted key, int|float) of every numeric field of the schema; `*` for a mapping's keys."""
    for f in dataclasses.fields(typ):
        if dataclasses.is_dataclass(f.type):
            yield from numeric_fields(f.type, f"{prefix}{f.name}.")
        elif typing.get_origin(f.type) is dict and dataclasses.is_dataclass(typing.get_args(f.type)[1]):
            yield from numeric_fields(typing.get_args(f.type)[1], f"{prefix}{f.name}.*.")
        elif f.type in (int, float):
            yield prefix + f.name, f.type


FIELDS = dict(numeric_fields())


def test_every_numeric_field_has_a_range_and_every_range_a_field():
    assert set(FIELDS) - set(RANGES) == set(), "declare a range in areal_mem/config/ranges.py"
    assert set(RANGES) - set(FIELDS) == set()


def out_of_range(key: str):
    r, typ = RANGES[key], FIELDS[key]
    values = []
    if r.min is not None:
        values.append(r.min - 1 if typ is int else r.min - 0.5)
    if r.gt is not None:
        values.append(r.gt if typ is int else r.gt - 1e-3)
    if r.max is not None:
        values.append(r.max + 1 if typ is int else r.max + 0.5)
    if typ is float:
        values += [float("nan"), float("inf")]
    return values


@pytest.mark.parametrize("key", sorted(FIELDS))
def test_every_numeric_key_refuses_out_of_range_values_by_name(key):
    values = out_of_range(key)
    assert values, f"{key} has no bound at all"
    concrete = key.replace("*", "learner")
    for v in values:
        item = f"{concrete}={v}"
        with pytest.raises(ConfigError) as e:
            load_config([DEBUG], [item], optional=["model.path"])
        assert f"command-line override {item!r}" in str(e.value) and f"key {concrete!r}" in str(e.value), str(e.value)


def test_defaults_and_every_shipped_config_are_in_range():
    load_config([], [], optional=["model.path"])
    for name in sorted(os.listdir(os.path.join(ROOT, "configs"))):
        files = [DEBUG, os.path.join(ROOT, "configs", name)]
        load_config(files, [], optional=["model.path"])


def test_a_file_value_out_of_range_is_named_with_its_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("learner:\n  steps: 3\n  checkpoint_interval: 0\n")
    with pytest.raises(ConfigError, match=rf"{path}:3: key 'learner.checkpoint_interval' is 0; allowed: >= 1"):
        load_config([DEBUG, str(path)], [], optional=["model.path"])


PROBE = [  # the hostile probe's 13 accepted values (and the two it found refused)
    "buffer.batch_groups=0",
    "rollout.group_size=0",
    "rollout.group_size=1",
    "learner.mini_batches=0",
    "learner.lr=-1",
    "buffer.max_staleness=-1",
    "learner.micro_batch_tokens=0",
    "generator.num_servers=0",
    "learner.steps=-5",
    "eval.interval=-1",
    "learner.checkpoint_interval=0",
]


def test_the_command_refuses_the_probes_values_before_anything_starts():
    cmd = [sys.executable, "-m", "areal_mem.app.cli", "config", "--config", DEBUG]
    for item in PROBE:
        p = subprocess.run([*cmd, item], capture_output=True, text=True, timeout=120, cwd=ROOT)
        key = item.split("=")[0]
        assert p.returncode != 0 and f"key {key!r}" in p.stderr, (item, p.stderr[-500:])
