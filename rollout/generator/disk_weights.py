"""Weights from disk for `/update_weights_from_disk`: which folders may be read, and reading a
Hugging Face safetensors checkpoint. The route takes a path from the network, so it is
resolved (symlinks, `..`) and must lie inside the configured folders."""

from __future__ import annotations

import glob
import os
from typing import List, Sequence, Tuple

import torch

from .engine import WeightLoadError
from .errors import ForbiddenPath


def allowed_path(path: str, allowed: Sequence[str]) -> str:
    """`path` with symlinks and `..` resolved, if it lies inside one of the `allowed` folders."""
    real = os.path.realpath(path)
    for root in allowed:
        root = os.path.realpath(root)
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return real
    raise ForbiddenPath(
        f"model_path {path!r} is outside the folders this server loads weights from "
        f"({', '.join(allowed) or 'none'}); see generator.embedded.weights_dirs"
    )


def load_safetensors_dir(path: str) -> List[Tuple[str, torch.Tensor]]:
    """All tensors of a Hugging Face safetensors checkpoint folder (any number of shards)."""
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(glob.escape(path), "*.safetensors")))
    if not files:
        raise WeightLoadError(f"{path}: no *.safetensors files")
    out: List[Tuple[str, torch.Tensor]] = []
    for f in files:
        try:
            out += list(load_file(f).items())
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error type for corrupt files
            raise WeightLoadError(f"{f}: not a readable safetensors file ({type(e).__name__}: {e})") from None
    return out
