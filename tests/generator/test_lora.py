"""The embedded server's LoRA routes, as a peer client of SGLang 0.5.23 uses them: an adapter
saved by peft is loaded from disk or from tensors, named by `lora_path` on /generate (mixed with
base-model requests in one batch), unloaded; bad adapters are refused by name and change nothing."""

from __future__ import annotations

import base64
import hashlib
import io
import pickle

import pytest
import requests
import torch

from tests.generator._sglang_source import io_struct_fields

TARGETS = ["q_proj", "v_proj"]


@pytest.fixture(scope="module")
def lora_server(tiny_model_dir, tmp_path_factory):
    from areal_mem.config.generator import EmbeddedConfig, GeneratorLoraConfig
    from areal_mem.rollout.generator.launch import start_embedded_generator

    h = start_embedded_generator(
        tiny_model_dir,
        EmbeddedConfig(
            max_batch_size=8, torch_threads=1, weights_dirs=[str(tmp_path_factory.getbasetemp())], device="cpu"
        ),
        lora=GeneratorLoraConfig(enabled=True, max_rank=8, target_modules=TARGETS, max_loras=2),
    )
    yield h
    h.stop()


def peft_model(base_dir, rank: int = 4, seed: int = 1, targets=TARGETS):
    """The base with a peft adapter whose A and B are random (B is zero at init: no effect)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.normal_(0, 0.3)
    return model.eval()


def forced(model, prompt, output):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + output])).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(output)[:, None])[:, 0]


def post(server, route, body):
    r = requests.post(server.url + route, json=body, timeout=60)
    return r.status_code, r.json()


def gen(server, prompts, lora_path):
    body = {
        "input_ids": prompts,
        "sampling_params": {"max_new_tokens": 6, "temperature": 1.0, "sampling_seed": 5},
        "return_logprob": True,
        "lora_path": lora_path,
    }
    status, out = post(server, "/generate", body)
    assert status == 200, out
    return [
        (
            [t for _, t, _ in o["meta_info"]["output_token_logprobs"]],
            [lp for lp, _, _ in o["meta_info"]["output_token_logprobs"]],
        )
        for o in out
    ]


def test_bodies_are_sglangs():
    from areal_mem.rollout.generator.embedded import lora_routes as R

    for ours, theirs in (
        (R.LoadLoRAAdapter, "LoadLoRAAdapterReqInput"),
        (R.UnloadLoRAAdapter, "UnloadLoRAAdapterReqInput"),
        (R.LoadLoRAAdapterFromTensors, "LoadLoRAAdapterFromTensorsReqInput"),
    ):
        assert set(ours.model_fields) == set(io_struct_fields(theirs)), theirs
    assert set(io_struct_fields("LoRAUpdateOutput")) == {"success", "error_message", "loaded_adapters"} | set(
        io_struct_fields("BaseReq")
    )


def test_peer_adapter_served_per_request_and_unloaded(lora_server, tiny_model_dir, tmp_path, sglang_api):
    model = peft_model(tiny_model_dir)
    model.save_pretrained(str(tmp_path / "a"))
    status, out = post(lora_server, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(tmp_path / "a")})
    assert (status, out) == (200, {"success": True, "error_message": "", "loaded_adapters": {"a": str(tmp_path / "a")}})
    prompts = [[5, 9, 11, 40, 7], [8, 3, 60, 12, 19]]
    body = {"input_ids": prompts, "lora_path": ["a", None]}
    sglang_api.GenerateRequest.from_json_value(body)  # SGLang's schema takes the field as sent
    (ta, la), (tb, lb) = gen(lora_server, prompts, ["a", None])  # one batch: adapter and base rows
    with model.disable_adapter():
        want_b, base_a = forced(model, prompts[1], tb), forced(model, prompts[0], ta)
    want_a = forced(model, prompts[0], ta)
    assert (torch.tensor(la) - want_a).abs().max() < 1e-5
    assert (torch.tensor(lb) - want_b).abs().max() < 1e-5
    assert (want_a - base_a).abs().max() > 1e-2  # the adapter matters
    status, out = post(lora_server, "/unload_lora_adapter", {"lora_name": "a"})
    assert (status, out["loaded_adapters"]) == (200, {})
    status, out = post(lora_server, "/generate", {"input_ids": prompts[0], "lora_path": "a"})
    assert status == 400 and "lora_path: no LoRA adapter 'a' is loaded" in out["error"]["message"]


def _safetensors_b64(tensors) -> str:
    from safetensors.torch import save

    return base64.b64encode(save(tensors)).decode()


def test_from_tensors_and_bad_adapters_refused_by_name(lora_server, tiny_model_dir, tmp_path):
    from peft import get_peft_model_state_dict

    model = peft_model(tiny_model_dir, seed=2)
    tensors = {n: t.contiguous() for n, t in get_peft_model_state_dict(model).items()}  # PEFT file names
    config = model.peft_config["default"].to_dict()
    config["target_modules"] = sorted(config["target_modules"])
    sums = {n: hashlib.sha256(t.flatten().view(torch.uint8).numpy().tobytes()).hexdigest() for n, t in tensors.items()}
    body = {"lora_name": "t", "config_dict": config, "serialized_named_tensors": [_safetensors_b64(tensors)]}
    status, out = post(lora_server, "/load_lora_adapter_from_tensors", dict(body, expected_checksums=sums))
    assert (status, out["loaded_adapters"]) == (200, {"t": "__tensor__"}), out
    prompt = [5, 9, 11, 40, 7]
    ((toks, lps),) = gen(lora_server, [prompt], "t")
    assert (torch.tensor(lps) - forced(model, prompt, toks)).abs().max() < 1e-5

    q = next(n for n in tensors if "q_proj.lora_A" in n)
    bad = {
        "rank 0": (dict(config, r=0), tensors, "r: 0 is outside 1..8"),
        "rank above max": (dict(config, r=16), tensors, "r: 16 is outside 1..8"),
        "target not served": (
            dict(config, target_modules=["q_proj", "gate_proj"]),
            tensors,
            "['gate_proj'] are not adapted",
        ),
        "module the model lacks": (
            config,
            dict(tensors, **{"base_model.model.model.layers.9.self_attn.q_proj.lora_A.weight": tensors[q].clone()}),
            "no adapted module 'model.layers.9.self_attn.q_proj'",
        ),
        "shape": (config, dict(tensors, **{q: torch.zeros(4, 65)}), "does not fit model.layers.0.self_attn.q_proj"),
        "not finite": (config, dict(tensors, **{q: tensors[q] * float("nan")}), "not finite"),
    }
    for what, (cfg, ts, message) in bad.items():
        b = dict(body, lora_name=f"bad-{what}", config_dict=cfg, serialized_named_tensors=[_safetensors_b64(ts)])
        status, out = post(lora_server, "/load_lora_adapter_from_tensors", b)
        assert status == 400 and message in out["error_message"], (what, out)
        assert out["loaded_adapters"] == {"t": "__tensor__"}, what  # nothing half-applied
    buf = io.BytesIO()
    pickle.dump({q: tensors[q]}, buf)
    b = dict(body, lora_name="p", serialized_named_tensors=[base64.b64encode(buf.getvalue()).decode()])
    status, out = post(lora_server, "/load_lora_adapter_from_tensors", b)
    assert status == 400 and "never loads pickled tensors" in out["error_message"]
    status, out = post(lora_server, "/load_lora_adapter_from_tensors", dict(body, expected_checksums={q: "0" * 64}))
    assert status == 400 and "expected_checksums" in out["error_message"]
    status, out = post(lora_server, "/load_lora_adapter", {"lora_name": "t", "lora_path": str(tmp_path)})
    assert status == 400 and "no adapter_config.json there" in out["error_message"]
    status, out = post(lora_server, "/load_lora_adapter", {"lora_name": "x", "lora_path": "/etc"})
    assert status == 403 and "outside the folders" in str(out)
    ((toks2, lps2),) = gen(lora_server, [prompt], "t")  # still serving the adapter that was loaded
    assert (toks2, lps2) == (toks, lps)
    assert post(lora_server, "/unload_lora_adapter", {"lora_name": "t"})[0] == 200


def test_server_without_lora_refuses_by_name(server):
    status, out = post(server, "/load_lora_adapter", {"lora_name": "a", "lora_path": "/tmp"})
    assert status == 400 and out["success"] is False and "LoRA is not enabled" in out["error_message"]
    status, out = post(server, "/generate", {"input_ids": [5, 6], "lora_path": "a"})
    assert status == 400 and "lora_path is not supported" in out["error"]["message"]
