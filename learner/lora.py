"""LoRA on the learner (`learner.lora`): peft's LoRA layers injected into the Hugging Face model.

The adapter goes in place (`peft.inject_adapter_in_model`), not around it as a `PeftModel`, so
DeepSpeed's engine still holds the causal LM whose `forward` the learner installed, and ZeRO
1/2/3 see ordinary parameters: only the adapter's require grad, so only they get gradients and
optimiser state. Three views of the weights come out of here:

- the adapter in PEFT's file layout (`base_model.model.<module>.lora_A.weight`, `adapter_config.json`),
  what a push carries and what SGLang, peft and the embedded generator load;
- the merged model under the base's own names (W + alpha/r * B A), for exports and probes;
- under ZeRO-3 each module's tensors are gathered together, collectively on every rank.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Dict, Iterator, List, Sequence, Tuple

import torch

from areal_mem.config.learner import LoraConfig, LoraInit

ADAPTER_PREFIX = "base_model.model."  # PEFT's saved names: the PeftModel's path to the base
ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
UNTARGETABLE = ("lm_head", "embed_tokens")  # the learner's output head is not a plain Linear


def linear_names(model: torch.nn.Module) -> List[str]:
    """The last name component of every Linear layer the adapter may target (q_proj, up_proj, ...)."""
    return sorted(
        {
            n.rsplit(".", 1)[-1]
            for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] not in UNTARGETABLE
        }
    )


def check_targets(model: torch.nn.Module, targets: Sequence[str]) -> None:
    """Refuse a target the model lacks (or the output head), naming it and what there is."""
    if not targets:
        raise ValueError("learner.lora.target_modules: empty; name the Linear layers to adapt, e.g. q_proj")
    have = linear_names(model)
    bad = [t for t in targets if t not in have]
    if bad:
        raise ValueError(f"learner.lora.target_modules: {bad} not Linear layers of this model (it has {have})")


def peft_config(cfg: LoraConfig):
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(
        r=cfg.rank,
        lora_alpha=cfg.alpha,  # type: ignore[arg-type]  # peft declares an int; it divides it by r as a float
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules),
        init_lora_weights=True if cfg.init == LoraInit.default else cfg.init.value,
        bias="none",
    )


def apply(model: torch.nn.Module, cfg: LoraConfig) -> torch.nn.Module:
    """Inject the adapter (drawn from torch's current seed) and freeze every other parameter."""
    from areal_mem.extras import require

    require("lora", ["peft"], "learner.lora.enabled")
    from peft import inject_adapter_in_model

    check_targets(model, cfg.target_modules)
    model = inject_adapter_in_model(peft_config(cfg), model)
    for n, p in model.named_parameters():
        p.requires_grad_(".lora_" in n)
    return model


def adapter_config(cfg: LoraConfig, base_path: str) -> dict:
    """adapter_config.json as peft writes it (the keys SGLang and peft read)."""
    out = peft_config(cfg).to_dict()
    out["base_model_name_or_path"] = base_path
    out["target_modules"] = sorted(cfg.target_modules)
    out["task_type"] = "CAUSAL_LM"
    out["peft_type"] = "LORA"
    return {k: (sorted(v) if isinstance(v, set) else v) for k, v in out.items()}


def _layers(model: torch.nn.Module):
    from peft.tuners.lora import LoraLayer

    return [(n, m) for n, m in model.named_modules() if isinstance(m, LoraLayer)]


@contextlib.contextmanager
def _gathered(params: Sequence[torch.nn.Parameter]):
    """ZeRO-3's partitioned parameters gathered (collective: every rank enters); others as they are."""
    part = [p for p in params if hasattr(p, "ds_id")]
    if not part:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(part, modifier_rank=None):
        yield


def adapter_tensors(model: torch.nn.Module) -> Iterator[Tuple[str, torch.Tensor]]:
    """The adapter in PEFT's file names, one module at a time (every rank iterates under ZeRO-3)."""
    for name, m in _layers(model):
        a, b = m.lora_A["default"].weight, m.lora_B["default"].weight
        with _gathered([a, b]):
            yield f"{ADAPTER_PREFIX}{name}.lora_A.weight", a.detach().clone()
            yield f"{ADAPTER_PREFIX}{name}.lora_B.weight", b.detach().clone()


def merged_tensors(model: torch.nn.Module) -> Iterator[Tuple[str, torch.Tensor]]:
    """Every tensor of the model under the base's names, each adapted layer's weight merged
    (W + scale x B A); in the model's parameter order."""
    layers = dict(_layers(model))
    for n, p in model.named_parameters():
        if ".lora_" in n:
            continue
        owner = n.rsplit(".base_layer.", 1)[0] if ".base_layer." in n else None
        if owner is not None and owner in layers and n.endswith(".weight"):
            m = layers[owner]
            a, b = m.lora_A["default"].weight, m.lora_B["default"].weight
            with _gathered([p, a, b]):
                merged = p.detach() + m.scaling["default"] * (b.detach() @ a.detach())
                yield n.replace(".base_layer.", "."), merged.to(p.dtype)
            continue
        with _gathered([p]):
            yield n.replace(".base_layer.", "."), p.detach().clone()


def checkpoint_adapter_only(engine) -> None:
    """Make DeepSpeed's checkpoints of `engine` hold the adapter alone: its own
    `exclude_frozen_parameters` misses a frozen weight that is tied (a tied output head is not
    among `named_parameters`, so the base's embedding would be saved under its second name)."""
    own = engine.module_state_dict

    def module_state_dict(*args, **kwargs):
        sd = own(*args, **kwargs)
        if kwargs.get("exclude_frozen_parameters"):
            for n, p in engine.module.named_parameters(remove_duplicate=False):
                if not p.requires_grad:
                    sd.pop(n, None)
        return sd

    engine.module_state_dict = module_state_dict


def base_tensors(model: torch.nn.Module) -> Iterator[Tuple[str, torch.Tensor]]:
    """The frozen base under its own names (what a generator serves beside its adapters)."""
    for n, p in model.named_parameters():
        if ".lora_" not in n:
            with _gathered([p]):
                yield n.replace(".base_layer.", "."), p.detach().clone()


def save_adapter(out_dir: str, tensors: Dict[str, torch.Tensor], config: dict) -> str:
    """Write a PEFT adapter folder (safetensors + adapter_config.json); returns its path."""
    from safetensors.torch import save_file

    os.makedirs(out_dir, exist_ok=True)
    save_file({n: t.cpu().contiguous() for n, t in tensors.items()}, os.path.join(out_dir, ADAPTER_FILE))
    with open(os.path.join(out_dir, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1, sort_keys=True)
    return out_dir
