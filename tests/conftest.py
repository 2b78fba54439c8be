"""Shared fixtures: a small synthetic world and a tiny Qwen2 model built once per session.

Component tests live in sub-folders (tests/<component>/) with their own conftest.py.

Two tiers. A test is marked `integration` here, mechanically, when
- its own body, a function of its module that it calls by name, or a fixture it uses (directly or
  through other fixtures; defined under tests/) starts a service or a process, or builds an
  index or a learner engine: source text matching one of HEAVY; or
- it uses a fixture of INTEGRATION_FIXTURES (heavy work that HEAVY cannot see by its text); or
- its module says `pytestmark = pytest.mark.integration` (it starts processes through helpers
  of other modules).
Everything else is the fast tier, `pytest -m "not integration"` (unit tests, under two minutes).
The synthetic world (0.1 s) and the tiny random model (about 4 s, once a session) are test data,
not services: tests that only read them stay fast. scripts/test.sh runs the fast tier first, then
`-m integration`, so each test runs once.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import types

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))

HEAVY = re.compile(
    "|".join(
        [
            r"\bsubprocess\.(run|Popen|call|check_call|check_output)\(",
            r"\bPopen\(",
            r"\bstart_\w+\(",  # start_retriever, start_embedded_generator, start_generators, ...
            r"\bBufferProcess\(",
            r"\bTinyTrain\(",  # `areal-mem train`
            r"\bray\.init\(",
            r"torch\.distributed\.run",
            r"\bLearnerEngine\(",  # a DeepSpeed engine on a model
            r"\brun_sft\(",
            r"\bbuild_index\(",
        ]
    )
)

INTEGRATION_FIXTURES = frozenset(
    {
        "engine",  # learner: a DeepSpeed engine; generator: the batching engine on a model
        "searching_model",  # workflows/test_tool_replay.py: the tiny model trained by SFT
    }
)


def _source(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


@functools.cache
def _heavy(fn) -> bool:
    """`fn`'s source, or that of a function of its own module it calls by name, matches HEAVY."""
    fn = inspect.unwrap(fn)
    file = inspect.getsourcefile(fn) if isinstance(fn, types.FunctionType) else None
    if not file or not os.path.abspath(file).startswith(TESTS + os.sep):
        return False  # pytest's and plugins' fixtures (tmp_path, monkeypatch, ...)
    sources = [_source(fn)]
    module = inspect.getmodule(fn)
    for name in fn.__code__.co_names:
        helper = getattr(module, name, None)
        if isinstance(helper, types.FunctionType) and helper.__module__ == getattr(module, "__name__", None):
            sources.append(_source(helper))
    return any(HEAVY.search(src) for src in sources)


def _integration(item) -> bool:
    names = getattr(item, "fixturenames", ())
    if INTEGRATION_FIXTURES.intersection(names):
        return True
    fn = getattr(item, "function", None)
    if fn is not None and _heavy(fn):
        return True
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(_heavy(defs[name][-1].func) for name in names if defs.get(name))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not item.get_closest_marker("integration") and _integration(item):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def world_dir(tmp_path_factory):
    """A small world (about 600 passages, 600 questions) with corpus.jsonl and splits."""
    from areal_mem.app.world import build_world

    out = tmp_path_factory.mktemp("world")
    build_world(str(out), seed=0, passages=600, questions=600)
    return str(out)


@pytest.fixture(scope="session")
def tiny_model_dir(world_dir, tmp_path_factory):
    """A randomly initialised tiny Qwen2 model + BPE tokenizer in Hugging Face format."""
    from areal_mem.app.tiny_model import init_model
    from areal_mem.config.model import TinyModelConfig

    out = tmp_path_factory.mktemp("tiny_model")
    init_model(
        world_dir,
        str(out),
        TinyModelConfig(
            hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
        ),
        seed=0,
    )
    return str(out)
