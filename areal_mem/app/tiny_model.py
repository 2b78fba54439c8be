"""`areal-mem init-model`: a tiny Qwen2 model with its own BPE tokenizer, built offline.

The tokenizer is a byte-level BPE trained on the world's text and the MemSearcher
prompt, so every string round-trips exactly and the agent's tags are single
tokens; the model is a randomly initialised `Qwen2ForCausalLM` that transformers
and the generators load like any hub checkpoint.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
from dataclasses import asdict
from typing import Iterator, List, Optional, Sequence

from areal_mem.config.model import TinyModelConfig

HELP = "build a tiny Qwen2 model and BPE tokenizer (Hugging Face format) for CPU runs"
# What the model folder was built from (the shape, the tokenizer's workflow-text repeats, the
# seed): the tokenizer depends on keys that no Hugging Face file records.
INIT_RECORD = "areal_mem_init.json"

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The agent's tags: added (not special) tokens, so they stay in decoded text but cost one token.
TAG_TOKENS = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<memory>",
    "</memory>",
    "<question>",
    "</question>",
]
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def memsearcher_prompt() -> str:
    """The released MemSearcher prompt the rollout ships; the tokenizer is trained on it."""
    from areal_mem.rollout.workflows.tokens import packaged_prompt

    return packaged_prompt("memsearcher.txt")


def _world_texts(world_dir: str, extra: List[str]) -> Iterator[str]:
    yield from extra
    for name in ("corpus.jsonl", "train.jsonl", "dev.jsonl", "test.jsonl"):
        path = os.path.join(world_dir, name)
        if not os.path.exists(path):
            if name == "corpus.jsonl":
                raise FileNotFoundError(f"{path} not found: build the world first (areal-mem world)")
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                yield row.get("contents") or row["question"] + " " + " ".join(row["golden_answers"])


def train_tokenizer(world_dir: str, vocab_size: int = 4096, extra_texts: Optional[List[str]] = None):
    """A `PreTrainedTokenizerFast` with Qwen chat specials, eos `<|im_end|>`, pad `<|endoftext|>`.

    `extra_texts` join the world's text as often as they are listed (BPE merges by frequency)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Qwen2's own normaliser and pre-tokeniser: transformers rebuilds a Qwen2 tokenizer with
    # them on load, so training with anything else would encode differently after a reload.
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [memsearcher_prompt()] + list(extra_texts or [])
    tok.train_from_iterator(_world_texts(world_dir, texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(TAG_TOKENS)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def init_model(
    world_dir: str,
    out_dir: str,
    shape: Optional[TinyModelConfig] = None,
    seed: int = 0,
    workflow_texts: Sequence[str] = (),
) -> str:
    """Write tokenizer + randomly initialised Qwen2ForCausalLM (safetensors) to `out_dir`.

    `workflow_texts` (the run's prompt and injected instructions) are trained on
    `shape.workflow_text_repeats` times more."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    shape = shape or TinyModelConfig()
    tokenizer = train_tokenizer(world_dir, shape.vocab_size, list(workflow_texts) * shape.workflow_text_repeats)
    # every other field of the shape is a Qwen2Config argument of the same name; the vocabulary is the tokenizer's
    qwen = asdict(shape)
    del qwen["workflow_text_repeats"]
    config = Qwen2Config(
        **{**qwen, "vocab_size": len(tokenizer)},
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        # transformers 5 keeps these two as undeclared keyword arguments (rope parameters, dtype)
        rope_theta=10000.0,  # type: ignore[call-arg]
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    with open(os.path.join(out_dir, INIT_RECORD), "w", encoding="utf-8") as f:
        json.dump(_init_record(shape, seed, workflow_texts), f, indent=1)
    return out_dir


def _init_record(shape: TinyModelConfig, seed: int, workflow_texts: Sequence[str]) -> dict:
    texts = "\0".join(workflow_texts) if shape.workflow_text_repeats else ""
    return {**asdict(shape), "seed": seed, "workflow_texts_sha256": hashlib.sha256(texts.encode()).hexdigest()}


def check_built_model(model_dir: str, shape: TinyModelConfig, seed: int, workflow_texts: Sequence[str] = ()) -> None:
    """Raise when the tiny model in `model_dir` was built from another `model.init`, seed or
    workflow text than asked: a resumed run dir would otherwise train a model (and a tokenizer)
    its config does not describe. A model built before the record was written is not checked."""
    path = os.path.join(model_dir, INIT_RECORD)
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        built = json.load(f)
    hint = "use a new run_dir (or model.path), or remove the model to rebuild it"
    want = _init_record(shape, seed, workflow_texts)
    for key, value in want.items():
        if key not in built or built[key] == value:
            continue
        if key == "seed":
            raise ValueError(
                f"seed: the model in {model_dir} was built from seed {built[key]}, the run's is {seed}; {hint}"
            )
        if key == "workflow_texts_sha256":
            raise ValueError(
                f"model.init.workflow_text_repeats: the tokenizer of the model in {model_dir} learned another "
                f"workflow text than this config's (rollout.workflow, rollout.prompt_style or the prompt differ); {hint}"
            )
        raise ValueError(
            f"model.init.{key}: the model in {model_dir} was built with {built[key]}, the config asks for {value}; {hint}"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = TinyModelConfig()
    parser.add_argument("--world", required=True, help="world folder (areal-mem world --out)")
    parser.add_argument("--out", required=True, help="output folder (Hugging Face format)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vocab", type=int, default=d.vocab_size)
    parser.add_argument("--hidden", type=int, default=d.hidden_size)
    parser.add_argument("--intermediate", type=int, default=d.intermediate_size)
    parser.add_argument("--layers", type=int, default=d.num_hidden_layers)
    parser.add_argument("--heads", type=int, default=d.num_attention_heads)
    parser.add_argument("--kv-heads", type=int, default=d.num_key_value_heads)
    parser.add_argument("--max-positions", type=int, default=d.max_position_embeddings)
    parser.add_argument(
        "--workflow-text-repeats",
        type=int,
        default=d.workflow_text_repeats,
        help="train the tokenizer on the workflow's prompt and injected instructions this many times more (model.init.workflow_text_repeats)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        help="run config(s) whose rollout section (workflow, prompt_style, prompt_file) gives that text; default: the rollout defaults",
    )


def run(args: argparse.Namespace) -> int:
    import time

    if args.heads % args.kv_heads or args.hidden % args.heads:
        print("areal-mem init-model: --hidden must divide by --heads and --heads by --kv-heads")
        return 2
    if args.config and not args.workflow_text_repeats:
        print("areal-mem init-model: --config gives the workflow text, which only --workflow-text-repeats > 0 uses")
        return 2
    from areal_mem.config import load_run

    start = time.time()
    try:
        shape = TinyModelConfig(
            args.vocab,
            args.hidden,
            args.intermediate,
            args.layers,
            args.heads,
            args.kv_heads,
            args.max_positions,
            args.workflow_text_repeats,
        )
        texts: List[str] = []
        if shape.workflow_text_repeats:
            from areal_mem.rollout.workflows.setup import workflow_texts

            texts = workflow_texts(load_run(args.config, optional=["model.path"]).rollout)
    except ValueError as e:  # a negative count; a ConfigError of the run config
        print(f"areal-mem init-model: {e}")
        return 2
    try:
        init_model(args.world, args.out, shape, args.seed, texts)
    except FileNotFoundError as e:
        print(f"areal-mem init-model: {e}")
        return 2
    with open(os.path.join(args.out, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    params = _count_params(args.out)
    print(
        f"tiny Qwen2 model: {params / 1e6:.2f}M parameters, vocabulary {cfg['vocab_size']}, "
        f"written to {args.out} in {time.time() - start:.1f}s"
    )
    return 0


def _count_params(model_dir: str) -> int:
    from safetensors import safe_open

    with safe_open(os.path.join(model_dir, "model.safetensors"), framework="pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
