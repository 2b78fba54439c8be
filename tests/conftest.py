"""Shared fixtures: a small synthetic world and a tiny Qwen2 model built once per session.

Component tests live in sub-folders (tests/<component>/) with their own conftest.py.
"""

from __future__ import annotations

import pytest


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
