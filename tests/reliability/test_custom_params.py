"""`sampling_params.custom_params` as SGLang 0.5.23 takes it: a JSON object, which on SGLang feeds
only a custom logit processor (and its own reasoning/grammar accounting). slime's requests carry
it; the embedded server runs no custom logit processor, so it accepts the object and refuses
`custom_logit_processor` by name."""

from __future__ import annotations

import pytest

SLIME = dict(  # slime's GenerateState defaults (tests/reliability/test_hostile_generator.py, case 15)
    temperature=1.0,
    top_p=1.0,
    top_k=-1,
    max_new_tokens=4,
    stop=None,
    stop_token_ids=None,
    skip_special_tokens=False,
    no_stop_trim=True,
    spaces_between_special_tokens=False,
)


def test_slimes_request_with_top_p_is_served_unchanged(generator_service, checks):
    """slime (THUDM/slime, slime/rollout/sglang_rollout.py, GenerateState) adds
    `custom_params: {"return_top_p_token_ids": true}` whenever its rollout top_p is not 1.0; SGLang
    0.5.23 has no use for that key (nothing in its wheel reads it), so it answers as without it."""
    svc = generator_service
    sampling_params = {**SLIME, "top_p": 0.9, "sampling_seed": 7, "custom_params": {"return_top_p_token_ids": True}}
    body = {"input_ids": [5, 6, 7], "sampling_params": sampling_params, "return_logprob": True}
    status, out = svc.call("POST", "/generate", body)
    assert status == 200, out
    without = {**sampling_params}
    del without["custom_params"]
    status, plain = svc.call("POST", "/generate", {**body, "sampling_params": without})
    assert status == 200 and plain["output_ids"] == out["output_ids"]  # the same seeded sample
    assert len(out["meta_info"]["output_token_logprobs"]) == len(out["output_ids"]) >= 1
    checks["generator"](svc)


@pytest.mark.parametrize("bad", [[1, 2], "x", 3])
def test_custom_params_must_be_an_object(generator_service, bad):
    status, out = generator_service.call(
        "POST", "/generate", {"input_ids": [5, 6], "sampling_params": {**SLIME, "custom_params": bad}}
    )
    assert status == 400 and "custom_params: expected a JSON object" in out["error"]["message"], out


def test_custom_params_are_accepted_as_sglang_accepts_them(generator_service, checks):
    from areal_mem.rollout.generator.sglang_schema import load_sglang_api_types

    sglang_api = load_sglang_api_types()
    svc = generator_service
    greedy = {"input_ids": [5, 6, 7], "sampling_params": {**SLIME, "temperature": 0, "ignore_eos": True}}
    status, plain = svc.call("POST", "/generate", greedy)
    assert status == 200, plain
    custom = {"simulation": {"worker_id": 3, "job_id": "j-1"}, "tags": ["a", 1, None], "x": 0.5}
    body = {**greedy, "sampling_params": {**greedy["sampling_params"], "custom_params": custom}}
    sglang_api.GenerateRequest.from_json_value(body)  # valid for SGLang
    status, out = svc.call("POST", "/generate", body)
    assert status == 200, out
    assert out["output_ids"] == plain["output_ids"]  # no processor runs: the same greedy tokens
    status, out = svc.call("POST", "/generate", {**body, "custom_logit_processor": '{"callable": "x"}'})
    assert status == 400 and "custom_logit_processor is not supported" in out["error"]["message"], out
    checks["generator"](svc)
