"""Limits checked before work on the real embedded generator: the sequence cap from the counts
(prompts x n) before any item is built or any text tokenised, and a token bound on text prompts
that stops tokenising a text as soon as a prefix of it is over the context (a byte limit does
not bound tokens: the tiny model's tokenizer makes one token of each 'x', so 100 kB of them,
under its 128 KiB `max_text_bytes`, are 100,000 tokens against a 4,096-token context)."""

from __future__ import annotations

import time

OVER = "x" * 100_000  # 100 kB, 100,000 tokens of the tiny tokenizer


def _model(svc) -> str:
    return svc.call("GET", "/v1/models")[1]["data"][0]["id"]


def test_the_sequence_cap_is_checked_from_the_counts(generator_service, checks):
    """20,000 prompts x n 128 (the probe's 160 kB body took 27 s and +1 GB before its 400)."""
    svc = generator_service
    cases = [
        ("/generate", {"input_ids": [[5]] * 20_000, "sampling_params": {"n": 128, "max_new_tokens": 1}}, 2_560_000),
        ("/generate", {"text": ["a"] * 20_000, "sampling_params": [{"n": 128}] * 20_000}, 2_560_000),
        ("/v1/completions", {"model": _model(svc), "prompt": ["a"] * 20_000, "n": 2, "max_tokens": 1}, 40_000),
    ]
    for path, body, count in cases:
        t0 = time.monotonic()
        status, out = svc.call("POST", path, body)
        took = time.monotonic() - t0
        message = out["error"]["message"]
        assert status == 400 and message.startswith(f"{count} sequences") and "max_sequences_per_request" in message
        print(f"{path}: {count} sequences refused in {took:.2f} s")
        assert took < 5.0
    checks["generator"](svc)


def test_a_text_over_the_context_is_refused_after_a_bounded_prefix(generator_service, checks):
    svc = generator_service
    model = _model(svc)
    cases = [
        ("/generate", {"text": [OVER] * 40}, "text[0]: more than 4096 tokens"),
        ("/generate", {"text": OVER}, "text: more than 4096 tokens"),
        ("/v1/completions", {"model": model, "prompt": ["hello", OVER]}, "prompt[1]: more than 4096 tokens"),
        ("/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": OVER}]}, "messages: more"),
    ]
    for path, body, expected in cases:
        t0 = time.monotonic()
        status, out = svc.call("POST", path, body)
        took = time.monotonic() - t0
        assert status == 400 and expected in out["error"]["message"], (path, out)
        print(f"{path}: 100 kB texts of 100,000 tokens refused in {took:.2f} s")
        assert took < 5.0
    # a text that fits is served, its tokens exactly the tokenizer's
    status, out = svc.call("POST", "/generate", {"text": "x" * 100, "return_prompt_token_ids": True})
    assert status == 200 and len(out["prompt_token_ids"]) == 100
    checks["generator"](svc)


class _Counting:
    """A real tokenizer that counts the characters it is asked to encode."""

    def __init__(self, tokenizer):
        self.tokenizer, self.chars = tokenizer, 0

    def encode(self, text, add_special_tokens=False):
        self.chars += len(text)
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)


def test_encode_within_stops_at_one_bounded_prefix_and_is_exact_below_it(tiny_model_dir):
    from transformers import AutoTokenizer

    from areal_mem.rollout.generator.embedded.codec import TextCodec

    real = AutoTokenizer.from_pretrained(tiny_model_dir)
    counting = _Counting(real)
    codec = TextCodec(counting)
    assert codec.encode_within(OVER, 4096) is None
    assert counting.chars == 8 * 4096  # one prefix of 32,768 characters, not 100,000
    for text in ("word " * 3000, "x" * 4000, "mixed text, é and 1 2 3 " * 500):
        counting.chars = 0
        assert codec.encode_within(text, 4096) == real.encode(text, add_special_tokens=False)
        assert counting.chars == len(text)  # under 8 characters per allowed token: tokenised once
    text = "word " * 20_000  # 100,000 characters, 40,001 tokens: refused from the first prefix
    counting.chars = 0
    assert codec.encode_within(text, 4096) is None and counting.chars == 8 * 4096
