"""`areal-mem model export RUN_OR_CHECKPOINT --out DIR [--merge]`: a plain transformers folder
from a LoRA run's checkpoint.

The checkpoint holds the adapter (and its optimiser state) alone; the base is the run's
`model.path`, read from the run's `config.yaml` with the adapter's settings (`learner.lora`).
DeepSpeed's own reader (`zero_to_fp32`) rebuilds the adapter's fp32 weights whatever the ZeRO
stage. Without `--merge` DIR holds the base and the adapter beside it (`adapter_config.json`,
`adapter_model.safetensors`: peft loads it onto DIR, SGLang's `--lora-paths` serves it); with
`--merge` the adapter is folded into the weights (W + alpha/r B A), a folder any transformers
user loads as it is.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Any, Dict, Tuple

HELP = "write a transformers folder from a LoRA run or checkpoint (adapter beside the base, or --merge)"


class ExportRefused(ValueError):
    pass


def locate(src: str) -> Tuple[str, str, str]:
    """(run dir, checkpoints dir, tag) of a run dir, its checkpoints dir or one `step<N>` in it."""
    src = os.path.abspath(src)
    if os.path.basename(src).startswith("step") and os.path.isdir(src):
        ckpt_dir, tag = os.path.dirname(src), os.path.basename(src)
    else:
        ckpt_dir = src if os.path.isfile(os.path.join(src, "latest")) else os.path.join(src, "checkpoints")
        latest = os.path.join(ckpt_dir, "latest")
        if not os.path.isfile(latest):
            raise ExportRefused(f"{src}: no checkpoint (no {latest}); pass a run dir or a checkpoints/step<N> folder")
        with open(latest, encoding="utf-8") as f:
            tag = f.read().strip()
    run_dir = os.path.dirname(ckpt_dir)
    if not os.path.isfile(os.path.join(run_dir, "config.yaml")):
        raise ExportRefused(f"{run_dir}: no config.yaml (the run's resolved config names the base model)")
    return run_dir, ckpt_dir, tag


def adapter_of(ckpt_dir: str, tag: str) -> Dict[str, Any]:
    """The checkpoint's adapter in PEFT's file names (fp32, any ZeRO stage)."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    from areal_mem.learner.lora import ADAPTER_PREFIX

    state = get_fp32_state_dict_from_zero_checkpoint(ckpt_dir, tag, exclude_frozen_parameters=True)
    out = {ADAPTER_PREFIX + n.replace(".default.", "."): t for n, t in state.items() if ".lora_" in n}
    if not out:
        raise ExportRefused(f"{ckpt_dir}/{tag}: no LoRA tensors (was learner.lora.enabled on in this run?)")
    return out


def export(src: str, out_dir: str, merge: bool) -> str:
    import torch
    from transformers import AutoModelForCausalLM

    from areal_mem.config import load_run
    from areal_mem.learner import lora
    from areal_mem.learner.engine import TOKENIZER_FILES

    run_dir, ckpt_dir, tag = locate(src)
    cfg = load_run([os.path.join(run_dir, "config.yaml")])
    if not cfg.learner.lora.enabled:
        raise ExportRefused(
            f"{run_dir}/config.yaml: learner.lora.enabled is false; the run's model is its final/ folder"
        )
    base_path = cfg.model.path
    tensors = adapter_of(ckpt_dir, tag)
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    os.makedirs(out_dir, exist_ok=True)
    if merge:
        adapted = lora.apply(model, cfg.learner.lora)
        own = {n: p for n, p in adapted.named_parameters() if ".lora_" in n}
        with torch.no_grad():
            for name, t in tensors.items():
                key = name.removeprefix(lora.ADAPTER_PREFIX).replace(".lora_A.", ".lora_A.default.")
                own[key.replace(".lora_B.", ".lora_B.default.")].copy_(t)
        state = {n: t.contiguous() for n, t in lora.merged_tensors(adapted)}
        AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32).save_pretrained(out_dir, state_dict=state)
    else:
        model.save_pretrained(out_dir)
        lora.save_adapter(out_dir, tensors, lora.adapter_config(cfg.learner.lora, os.path.abspath(out_dir)))
    for name in TOKENIZER_FILES:
        path = os.path.join(base_path, name)
        if os.path.isfile(path) and not os.path.exists(os.path.join(out_dir, name)):
            shutil.copy(path, out_dir)
    return tag


def add_export_parser(sub) -> None:
    p = sub.add_parser("export", help=HELP, description=HELP)
    p.add_argument("src", help="a run dir, its checkpoints/ folder or one checkpoints/step<N> folder")
    p.add_argument("--out", required=True, help="the transformers folder to write")
    p.add_argument("--merge", action="store_true", help="fold the adapter into the weights (else: beside them)")


def run(args: argparse.Namespace) -> int:
    try:
        tag = export(args.src, args.out, args.merge)
    except ExportRefused as e:
        print(f"areal-mem model export: {e}", file=sys.stderr)
        return 2
    print(f"[model export] {tag}: {'merged model' if args.merge else 'base + adapter'} in {args.out}")
    return 0
