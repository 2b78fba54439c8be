"""`launcher.cpu_affinity`: carried on the process specs, applied (or refused) at process start."""

import os

import pytest

from areal_mem.app.cli import main, pin_cpus
from areal_mem.app.launch.plan import AFFINITY_ENV, Addresses, learner_specs, service_specs, worker_specs
from areal_mem.config import ConfigError, load_run
from benchmarks.harness import arms


def _cfg(*overrides):
    return load_run([], ["model.path=m", *overrides])


def test_specs_carry_the_cpus_of_their_role():
    cfg = _cfg("launcher.cpu_affinity.generator=[0]", "launcher.cpu_affinity.learner=[1,2]", "generator.num_servers=2")
    env = {s.name: s.env.get(AFFINITY_ENV) for s in service_specs(cfg, "c.yaml")}
    assert env == {"retriever": None, "generator0": "0", "generator1": "0", "buffer": None}
    assert learner_specs(cfg, "c.yaml", Addresses(), "127.0.0.1", 1)[0].env[AFFINITY_ENV] == "1,2"
    assert AFFINITY_ENV not in worker_specs(cfg, "c.yaml", Addresses())[0].env
    assert all(AFFINITY_ENV not in s.env for s in service_specs(_cfg(), "c.yaml"))  # default: no pinning


def test_an_unknown_role_is_refused_with_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"launcher.cpu_affinity: unknown role\(s\) \['gen'\]; allowed: retriever"):
        service_specs(_cfg("launcher.cpu_affinity.gen=[0]"), "c.yaml")


def test_a_cpu_that_does_not_exist_stops_the_process_with_a_clear_error(monkeypatch, capsys):
    missing = max(os.sched_getaffinity(0)) + 1000
    monkeypatch.setenv(AFFINITY_ENV, str(missing))
    assert main(["config", "model.path=m"]) == 2
    err = capsys.readouterr().err
    assert f"launcher.cpu_affinity: CPU(s) [{missing}] do not exist or are not usable here" in err


def test_the_process_pins_itself(monkeypatch):
    before = os.sched_getaffinity(0)
    cpu = min(before)
    monkeypatch.setenv(AFFINITY_ENV, str(cpu))
    try:
        pin_cpus()
        assert os.sched_getaffinity(0) == {cpu}
    finally:
        os.sched_setaffinity(0, before)


def test_bench_affinity_spec():
    assert arms.affinity_overrides("none") == []
    assert arms.affinity_overrides("generator:0,learner:1+2") == [
        "launcher.cpu_affinity.generator=[0]",
        "launcher.cpu_affinity.learner=[1,2]",
    ]
    with pytest.raises(ConfigError, match="expected role:cpu"):
        arms.affinity_overrides("generator")
