"""LoRA on the learner: only the adapter trains under ZeRO 1, 2 and 3 (RL and SFT steps), the
checkpoint holds the adapter and its optimiser state, and a resumed run continues bit for bit."""

import json
import os

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from areal_mem.config.learner import LoraConfig
from areal_mem.learner import lora


def _run(ranks, model_dir, prefix, stage, mode, nproc=1):
    ranks("_lora_worker.py", nproc, model_dir, prefix, stage, mode)
    with open(f"{prefix}_{mode}.json") as f:
        info = json.load(f)
    return info, load_file(f"{prefix}_{mode}_adapter.safetensors"), load_file(f"{prefix}_{mode}_merged.safetensors")


@pytest.mark.parametrize("stage", [pytest.param(1, marks=pytest.mark.slow), 2, pytest.param(3, marks=pytest.mark.slow)])
def test_adapter_trains_alone_and_resumes_bit_for_bit(ranks, tiny_model_dir, tmp_path, stage):
    prefix = str(tmp_path / f"z{stage}")
    info, adapter, merged = _run(ranks, tiny_model_dir, prefix, stage, "straight")
    assert info["trainable"] and all(".lora_A." in n or ".lora_B." in n for n in info["trainable"])
    assert len(info["trainable"]) == 2 * 2 * 3  # 2 layers x 3 targets x (A, B)
    assert info["metrics"]["rl"]["n_tokens"] > 0 and info["metrics"]["sft"]["grad_norm"] > 0
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    assert set(merged) == {n for n in base if n != "lm_head.weight" or "lm_head.weight" in merged}
    moved = {n for n in merged if not torch.equal(merged[n], base[n])}
    # only the adapted layers' weights differ from the base (by their B A), everything else is the base's
    assert moved and all(n.rsplit(".", 2)[-2] in ("q_proj", "v_proj", "down_proj") for n in moved)
    assert all(n.startswith(lora.ADAPTER_PREFIX) for n in adapter)
    # the checkpoint has no base weights: its module state is the adapter alone
    tag_dir = os.path.join(prefix + "_run", "checkpoints", "step1")
    states = [f for f in os.listdir(tag_dir) if f.endswith("model_states.pt")]
    module = torch.load(os.path.join(tag_dir, states[0]), map_location="cpu", weights_only=False)["module"]
    assert module and all(".lora_" in n for n in module)

    info2, adapter2, merged2 = _run(ranks, tiny_model_dir, prefix, stage, "resume")
    assert info2["metrics"]["sft"] == info["metrics"]["sft"]
    assert set(adapter2) == set(adapter)
    for n in adapter:
        assert torch.equal(adapter2[n], adapter[n]), n
    for n in merged:
        assert torch.equal(merged2[n], merged[n]), n


def test_missing_target_refused_by_name(tiny_model_dir):
    from areal_mem.learner.engine import _load_causal_lm

    model = _load_causal_lm(tiny_model_dir)
    with pytest.raises(ValueError, match=r"learner.lora.target_modules: \['c_attn'\] not Linear layers"):
        lora.apply(model, LoraConfig(enabled=True, target_modules=["q_proj", "c_attn"]))
    with pytest.raises(ValueError, match=r"\['lm_head'\]"):
        lora.apply(model, LoraConfig(enabled=True, target_modules=["lm_head"]))
