"""Every field of SGLang 0.5.23's `GenerateRequest` and `SamplingParams` is either honoured by
the embedded server or refused with a 400 that names it: nothing is silently ignored. The
walk is over SGLang's own schema, so a field a new SGLang adds fails here until classified.
Each sample value is valid under SGLang's schema (checked) and differs from the default."""

from __future__ import annotations

import asyncio

import aiohttp
import msgspec
import pytest

PROMPT = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}}
# field -> (a non-default value valid under SGLang's schema, "honoured" | "refused")
TOP = {
    "rid": ("walk-rid", "honoured"),
    "text": (None, "honoured"),  # the prompt itself (test_generate_sglang_features.py)
    "input_ids": (None, "honoured"),
    "stream": (True, "honoured"),
    "sampling_params": (None, "honoured"),  # walked field by field below
    "return_logprob": (True, "honoured"),
    "logprob_start_len": (0, "honoured"),
    "top_logprobs_num": (2, "honoured"),
    "token_ids_logprob": ([5, 6], "refused"),
    "return_hidden_states": (True, "refused"),
    "return_text_in_logprobs": (True, "honoured"),
    "bootstrap_host": ("127.0.0.1", "refused"),
    "bootstrap_port": (8998, "refused"),
    "bootstrap_room": (7, "refused"),
    "bootstrap_pair_key": ("k", "refused"),
    "decode_tp_size": (2, "refused"),
    "routed_dp_rank": (1, "refused"),
    "disagg_prefill_dp_rank": (1, "refused"),
    "image_data": ("https://example.invalid/a.png", "refused"),
    "mm_hashes": (["h"], "refused"),
    "video_data": ("https://example.invalid/a.mp4", "refused"),
    "audio_data": ("https://example.invalid/a.wav", "refused"),
    "extra_key": ("tenant-a", "honoured"),  # prefix-cache namespaces: no KV is shared across requests
    "priority": (3, "honoured"),  # admission order (test_engine.py)
    "cache_salt": ("salt", "honoured"),
    "require_reasoning": (True, "refused"),
    "lora_path": ("adapter", "refused"),
    "session_params": ({"id": "s"}, "refused"),
    "kv_hints": ({"protocol_version": "1"}, "refused"),
    "routing_key": ("k", "refused"),
    "max_thinking_tokens": (16, "refused"),
    "session_id": ("s", "refused"),
    "custom_logit_processor": ("{}", "refused"),
    "custom_labels": ({"team": "a"}, "refused"),
    "images_config": ({"prefix": "p"}, "refused"),
    "return_prompt_token_ids": (True, "honoured"),
    "routed_experts_start_len": (1, "refused"),
    "return_sampling_mask": (True, "refused"),
    "modalities": (["image"], "refused"),
}
SAMPLING = {
    "max_new_tokens": (3, "honoured"),
    "stop": (["zz"], "honoured"),
    "stop_token_ids": ([9], "honoured"),
    "stop_regex": ("a+", "refused"),
    "temperature": (0.5, "honoured"),
    "top_p": (0.9, "honoured"),
    "top_k": (5, "honoured"),
    "min_p": (0.1, "honoured"),
    "frequency_penalty": (0.5, "refused"),
    "presence_penalty": (0.5, "refused"),
    "repetition_penalty": (1.2, "refused"),
    "min_new_tokens": (1, "honoured"),
    "n": (2, "honoured"),
    "json_schema": ('{"type": "object"}', "refused"),
    "regex": ("a+", "refused"),
    "ebnf": ('root ::= "a"', "refused"),
    "structural_tag": ("{}", "refused"),
    "ignore_eos": (True, "honoured"),
    "skip_special_tokens": (False, "honoured"),
    "spaces_between_special_tokens": (False, "honoured"),  # slime sends false on every request
    "no_stop_trim": (True, "honoured"),
    "stream_interval": (2, "honoured"),
    "logit_bias": ({"5": 1.0}, "refused"),
    "sampling_seed": (3, "honoured"),
    "custom_params": ({"a": 1}, "honoured"),  # feeds only custom logit processors (refused)
    "beam_width": (2, "refused"),
    "watermark": ({"enabled": True}, "refused"),
    "choice": (["a", "b"], "refused"),
}


def names(struct) -> list:
    return [f.name for f in msgspec.structs.fields(struct)]


def test_the_tables_classify_every_field_of_sglangs_schema(sglang_api):
    assert sorted(TOP) == sorted(names(sglang_api.GenerateRequest))
    assert sorted(SAMPLING) == sorted(names(sglang_api.SamplingParams))


def bodies():
    for key, (value, verdict) in TOP.items():
        if value is not None:
            yield f"{key}", {**PROMPT, key: value}, key, verdict
    for key, (value, verdict) in SAMPLING.items():
        yield f"sampling_params.{key}", {**PROMPT, "sampling_params": {"max_new_tokens": 2, key: value}}, key, verdict


@pytest.mark.parametrize("label,body,key,verdict", list(bodies()), ids=[b[0] for b in bodies()])
def test_each_field_is_honoured_or_refused_by_name(server, sglang_api, label, body, key, verdict):
    sglang_api.GenerateRequest.from_json_value(body)  # the sample itself is valid for SGLang

    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.post(server.url + "/generate", json=body) as r:
                return r.status, await r.text()

    status, text = asyncio.run(go())
    if verdict == "honoured":
        assert status == 200, (label, text[:300])
    else:
        assert status == 400, (label, text[:300])
        assert key in text and "not supported" in text, text[:300]
