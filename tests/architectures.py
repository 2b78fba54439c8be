"""Small, randomly initialised models of the architectures users bring (no hub): Llama (SmolLM2's,
Llama 3's), Qwen2 (Qwen2.5's: q/k/v biases) and Qwen3 (q/k norms), with tied and untied output
heads and grouped-query attention, for the tests that hold every service to them."""

from __future__ import annotations

import torch

SHAPE = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, max_position_embeddings=512)


def _config(name: str):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    if name == "llama-gqa-tied":  # SmolLM2's layout: 3 KV heads for 9 query heads, tied embeddings
        return LlamaConfig(**SHAPE, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    if name == "llama-untied":
        return LlamaConfig(**SHAPE, num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False)
    if name == "qwen2-gqa":  # Qwen2.5's: biases on q, k, v
        return Qwen2Config(**SHAPE, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    if name == "qwen3-gqa-tied":  # Qwen3's: per-head q/k RMS norms, an explicit head_dim
        return Qwen3Config(**SHAPE, num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)
    raise KeyError(name)


ARCHITECTURES = ("llama-gqa-tied", "llama-untied", "qwen2-gqa", "qwen3-gqa-tied")


def build(name: str, seed: int = 0):
    """The model in float32, its weights drawn with `seed` (larger than the default init, so
    that distributions are far from uniform and log-probs differ by position)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    cfg = _config(name)
    cfg.initializer_range = 0.2
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():  # random biases and norms too: a dropped one would go unnoticed at 0 / 1
        for n, p in model.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(0.1 * torch.randn(p.shape))
    return model


def save(name: str, path: str, seed: int = 0) -> str:
    build(name, seed).save_pretrained(path, safe_serialization=True)
    return path
