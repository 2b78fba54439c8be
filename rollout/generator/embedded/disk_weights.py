"""Weights from disk for `/update_weights_from_disk`: which folders may be read, and reading a
Hugging Face safetensors checkpoint. The route takes a path from the network, so it is
resolved (symlinks, `..`) and must lie inside the configured folders."""

from __future__ import annotations

import glob
import os
from typing import List, Sequence, Tuple

import torch

from .errors import ForbiddenPath
from .request import WeightLoadError

MAX_HEADER_BYTES = 16 << 20  # a safetensors header (JSON) this long holds ~100,000 tensors


def allowed_path(path: str, allowed: Sequence[str], what: str = "model_path") -> str:
    """`path` with symlinks and `..` resolved, if it lies inside one of the `allowed` folders."""
    real = os.path.realpath(path)
    for root in allowed:
        root = os.path.realpath(root)
        if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
            return real
    shown = repr(path) if real == os.path.abspath(path) else f"{path!r} (a link to {real!r})"
    raise ForbiddenPath(
        f"{what} {shown} is outside the folders this server loads weights from "
        f"({', '.join(allowed) or 'none'}); see generator.embedded.weights_dirs"
    )


def check_header(path: str) -> None:
    """Refuse a safetensors file whose header (an 8-byte length, then JSON) is longer than
    `MAX_HEADER_BYTES` or than the file, before anything parses it."""
    with open(path, "rb") as f:
        head = f.read(8)
        size = os.fstat(f.fileno()).st_size
    if len(head) < 8:
        raise WeightLoadError(f"{path}: not a readable safetensors file (shorter than its header length)")
    n = int.from_bytes(head, "little")
    if n > MAX_HEADER_BYTES or n > size - 8:
        raise WeightLoadError(
            f"{path}: not a readable safetensors file (a header of {n} bytes in a file of {size}; "
            f"at most {MAX_HEADER_BYTES} are read)"
        )


def load_safetensors_dir(path: str, allowed: Sequence[str] = ()) -> List[Tuple[str, torch.Tensor]]:
    """All tensors of a Hugging Face safetensors checkpoint folder (any number of shards). With
    `allowed`, every file's real path (links resolved) must lie inside those folders too."""
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(glob.escape(path), "*.safetensors")))
    if not files:
        raise WeightLoadError(f"{path}: no *.safetensors files")
    if allowed:
        files = [allowed_path(f, allowed, "weights file") for f in files]
    out: List[Tuple[str, torch.Tensor]] = []
    for f in files:
        check_header(f)
        try:
            out += list(load_file(f).items())
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error type for corrupt files
            raise WeightLoadError(f"{f}: not a readable safetensors file ({type(e).__name__}: {e})") from None
    return out
