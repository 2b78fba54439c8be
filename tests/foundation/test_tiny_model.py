"""The tiny model and tokenizer load with plain transformers and round-trip text exactly."""

import os
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from areal_mem.app.tiny_model import SPECIAL_TOKENS, TAG_TOKENS, memsearcher_prompt

# the smallest model the CLI builds quickly
SMALL = [
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
    "1024",
]


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
        [sys.executable, "-m", "areal_mem.app.cli", "init-model", "--world", world_dir, "--out", str(out), *SMALL],
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


# sha256 of the prompt the released MemSearcher-3B was trained with (its system message, the user
# message with {question} and {memory}, the assistant prefix <think>), as MemSearcher's code released it
RELEASED_PROMPT_SHA256 = "6bb9463b09e01e059765d7c96b3b1f9884b5b0a94541bc00e24673c428c98205"


def test_packaged_prompt_is_the_released_one():
    """The default MemSearcher prompt must stay byte-identical to the released text (the published
    weights expect it): pinned by its hash, so the check needs nothing beside the checkout."""
    import hashlib

    assert hashlib.sha256(memsearcher_prompt().encode("utf-8")).hexdigest() == RELEASED_PROMPT_SHA256


def test_workflow_text_repeats_make_the_fixed_text_whole_words(world_dir, tmp_path):
    """The prompt and the memory instruction, trained on 100 times more, take under half the
    tokens together and still round-trip; 0 repeats give the tokenizer of before, byte for byte; the key
    is not written into the model's config."""
    import json

    from areal_mem.app.tiny_model import init_model, train_tokenizer
    from areal_mem.config.model import TinyModelConfig
    from areal_mem.rollout.workflows.memsearcher import MEMORY_INSTRUCTION
    from areal_mem.rollout.workflows.tokens import packaged_prompt

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

    with pytest.raises(ConfigError, match="key 'model.init.workflow_text_repeats' is -1; allowed: >= 0"):
        load_run(overrides=["model.path=m", "model.init.workflow_text_repeats=-1"])


def test_a_built_model_records_what_it_was_built_from_and_refuses_another_config(world_dir, tmp_path, capsys):
    """`init-model --workflow-text-repeats N --config RUN.yaml` learns that config's workflow text;
    the folder records shape, seed and text, and `check_built_model` names whatever differs."""
    import pytest

    from areal_mem.app.cli import main
    from areal_mem.app.tiny_model import check_built_model
    from areal_mem.config import load_run
    from areal_mem.config.model import TinyModelConfig
    from areal_mem.rollout.workflows.setup import workflow_texts

    recipe = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "debug_cpu.yaml")
    out = str(tmp_path / "m")
    argv = ["init-model", "--world", world_dir, "--out", out, *SMALL]
    assert main([*argv, "--workflow-text-repeats", "100", "--config", recipe]) == 0
    rollout = load_run([recipe], optional=["model.path"]).rollout
    texts = workflow_texts(rollout)
    prompt_ids = AutoTokenizer.from_pretrained(out).encode(texts[0], add_special_tokens=False)
    default_texts = workflow_texts(load_run(optional=["model.path"]).rollout)  # the released prompt
    assert texts[0] != default_texts[0] and len(prompt_ids) < 80  # the short prompt, whole words
    shape = TinyModelConfig(1024, 32, 64, 1, 2, 1, workflow_text_repeats=100)
    check_built_model(out, shape, 0, texts)  # what it was built from
    with pytest.raises(
        ValueError, match="model.init.workflow_text_repeats: the model in .* was built with 100, the config asks for 0"
    ):
        check_built_model(out, TinyModelConfig(1024, 32, 64, 1, 2, 1), 0)
    with pytest.raises(ValueError, match="model.init.hidden_size: .* built with 32, the config asks for 64"):
        check_built_model(out, TinyModelConfig(1024, 64, 64, 1, 2, 1, workflow_text_repeats=100), 0, texts)
    with pytest.raises(ValueError, match="seed: the model in .* was built from seed 0, the run's is 1"):
        check_built_model(out, shape, 1, texts)
    with pytest.raises(ValueError, match="learned another workflow text .*rollout.prompt_style"):
        check_built_model(out, shape, 0, default_texts)
    os.remove(os.path.join(out, "areal_mem_init.json"))  # a model built before the record: not checked
    check_built_model(out, TinyModelConfig(), 5)
    capsys.readouterr()
    assert main([*argv, "--config", recipe]) == 2  # a config only the workflow text would use
    assert "--config gives the workflow text" in capsys.readouterr().out


def test_a_run_refuses_a_built_model_of_another_shape(world_dir, tmp_path):
    """A resumed run dir whose model was built from another `model.init` is refused by name
    before any stage runs, not trained as if it were the config's."""
    import pytest

    from areal_mem.app.tiny_model import init_model
    from areal_mem.app.train import TrainPipeline
    from areal_mem.config import ConfigError, load_run
    from areal_mem.config.model import TinyModelConfig

    recipe = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "debug_cpu.yaml")
    init_model(world_dir, str(tmp_path / "model"), TinyModelConfig(1024, 32, 64, 1, 2, 1))
    every_question = ["world.question_types=[single,bridge,comparison]", "world.single_attributes=[]"]
    cfg = load_run([recipe], [f"run_dir={tmp_path}", f"world.dir={world_dir}", "world.build=false", *every_question])
    with pytest.raises(
        ConfigError, match="model.init.vocab_size: the model in .* was built with 1024, the config asks for 6144"
    ):
        TrainPipeline(cfg, evaluate=False).prepare()
