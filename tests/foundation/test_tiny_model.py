"""The tiny model and tokenizer load with plain transformers and round-trip text exactly."""

import os
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from areal_mem.app.tiny_model import SPECIAL_TOKENS, TAG_TOKENS, memsearcher_prompt


def test_tokenizer_round_trips_prompt_and_special_tokens(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = (
        memsearcher_prompt().replace("{question}", "Who founded Velkor Dynamics?").replace("{memory}", "")
        + ' I should search.</think>\n<tool_call>\n{"name": "x"}\n</tool_call><|im_end|>'
    )
    ids = tok.encode(prompt, add_special_tokens=False)
    assert tok.decode(ids) == prompt
    for t in SPECIAL_TOKENS + TAG_TOKENS:
        one = tok.encode(t, add_special_tokens=False)
        assert len(one) == 1 and tok.decode(one) == t, t
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert tok.decode(tok.encode("  two  spaces\n\ttab", add_special_tokens=False)) == "  two  spaces\n\ttab"


def test_model_loads_and_gives_vocab_sized_logits(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    ids = torch.tensor([tok.encode("Where was Moldin Tedy born?", add_special_tokens=False)])
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok))
    assert torch.isfinite(logits).all()
    assert model.config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")


def test_cli_writes_a_loadable_model(world_dir, tmp_path):
    out = tmp_path / "m"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "areal_mem.app.cli",
            "init-model",
            "--world",
            world_dir,
            "--out",
            str(out),
            "--hidden",
            "32",
            "--intermediate",
            "64",
            "--layers",
            "1",
            "--heads",
            "2",
            "--kv-heads",
            "1",
            "--vocab",
            "600",
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert "parameters" in res.stdout
    assert os.path.exists(out / "model.safetensors") and os.path.exists(out / "tokenizer.json")
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert model.config.hidden_size == 32
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "areal_mem.app.cli",
            "init-model",
            "--world",
            str(tmp_path / "none"),
            "--out",
            str(tmp_path / "x"),
        ],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "build the world first" in missing.stdout


def test_packaged_prompt_is_the_released_one():
    """The default MemSearcher prompt must stay byte-identical to the released text."""
    import pytest

    released = os.path.join(
        os.path.dirname(__file__), "..", "..", "..", "shared", "reference", "memsearcher_prompt.txt"
    )
    if not os.path.exists(released):
        pytest.skip("shared/reference is not beside this checkout")
    with open(released, encoding="utf-8") as f:
        assert memsearcher_prompt() == f.read()


def test_workflow_text_repeats_make_the_fixed_text_whole_words(world_dir, tmp_path):
    """The prompt and the memory instruction, trained on 100 times more, take under half the
    tokens together and still round-trip; 0 repeats give the tokenizer of before, byte for byte; the key
    is not written into the model's config."""
    import json

    from areal_mem.app.tiny_model import init_model, train_tokenizer
    from areal_mem.config.model import TinyModelConfig
    from rollout.workflows.memsearcher import MEMORY_INSTRUCTION
    from rollout.workflows.tokens import packaged_prompt

    prompt = packaged_prompt("memsearcher_short.txt").replace("{question}", "").replace("{memory}", "")
    texts = [prompt, MEMORY_INSTRUCTION]
    shape = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    kw = dict(num_key_value_heads=1, vocab_size=1024)
    init_model(world_dir, str(tmp_path / "once"), TinyModelConfig(**shape, **kw), 0, texts)
    init_model(world_dir, str(tmp_path / "many"), TinyModelConfig(**shape, **kw, workflow_text_repeats=100), 0, texts)
    once = AutoTokenizer.from_pretrained(str(tmp_path / "once"))
    many = AutoTokenizer.from_pretrained(str(tmp_path / "many"))
    counts = []
    for text in texts:
        ids = many.encode(text, add_special_tokens=False)
        counts.append((len(ids), len(once.encode(text, add_special_tokens=False))))
        assert many.decode(ids) == text
    assert all(n < n_once for n, n_once in counts) and 2 * sum(n for n, _ in counts) < sum(m for _, m in counts), counts
    before = train_tokenizer(world_dir, 1024)  # what init_model trained before the key existed
    assert once.get_vocab() == before.get_vocab()
    with open(tmp_path / "many" / "config.json", encoding="utf-8") as f:
        assert "workflow_text_repeats" not in json.load(f)


def test_a_negative_workflow_text_repeats_is_refused_by_name():
    import pytest

    from areal_mem.config import ConfigError, load_run

    with pytest.raises(ConfigError, match="model.init.workflow_text_repeats must be >= 0"):
        load_run(overrides=["model.path=m", "model.init.workflow_text_repeats=-1"])
