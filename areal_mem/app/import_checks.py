"""What `areal-mem model import` checks before it hashes, loads or allocates anything.

A model file is data from anywhere: its header and config say how much memory the import will
take, so those sizes are checked against limits first (`ImportLimits`, the `--max-gb` and
`--max-header-mb` flags); files that are not regular files are refused by name before they are
read (model_files.py); shard names must stay inside the folder; and the loaded weights must be
finite, or the generator would serve garbage from them. Each refusal is one `ImportRefused` line.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List

from areal_mem.model_files import not_a_regular_file

from .gguf_header import GGUFRefused, read_header

MAX_JSON_BYTES = 64 << 20  # config.json, tokenizer.json, a shard index: a large tokenizer is ~20 MB
SAFETENSORS_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2}


class ImportRefused(Exception):
    """The source cannot become a model folder; the message says why and what to do."""


@dataclass(frozen=True)
class ImportLimits:
    max_gb: float = 16.0  # the float32 weights the import builds (4.3 billion parameters)
    max_header_mb: float = 32.0  # a GGUF header (SmolLM2's: 3.6 MB) or a safetensors header

    @property
    def max_bytes(self) -> int:
        return int(self.max_gb * (1 << 30))

    @property
    def max_header_bytes(self) -> int:
        return int(self.max_header_mb * (1 << 20))


def files_of(folder: str) -> Iterator[str]:
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            yield os.path.join(root, name)


def check_files(path: str) -> None:
    """Every file of the source is a regular file (links followed) outside the system folders."""
    for name in [path] if not os.path.isdir(path) else files_of(path):
        why = not_a_regular_file(name)
        if why:
            raise ImportRefused(f"{name}: {why}; a model file must be a regular file")


def _too_big(what: str, nbytes: int, limits: ImportLimits) -> ImportRefused:
    return ImportRefused(
        f"{what} would take {nbytes / (1 << 30):.1f} GiB of float32 weights, over the limit of {limits.max_gb:g} "
        f"GiB (--max-gb)"
    )


def read_json(path: str) -> Any:
    """A JSON file of the source, size-checked, parsed into one refusal on any error."""
    if os.path.getsize(path) > MAX_JSON_BYTES:
        raise ImportRefused(
            f"{path}: {os.path.getsize(path)} bytes, over the {MAX_JSON_BYTES >> 20} MiB a JSON file may hold"
        )
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (ValueError, RecursionError) as e:
        raise ImportRefused(f"{path}: not valid JSON: {str(e)[:200]}") from None


def check_shard_index(folder: str) -> None:
    """Shard names in `*.safetensors.index.json` are plain names of files in the folder."""
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".index.json"):
            continue
        index = read_json(os.path.join(folder, name))
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict):
            raise ImportRefused(f"{folder}/{name}: no 'weight_map' object")
        for tensor, shard in weight_map.items():
            if not isinstance(shard, str) or os.path.basename(shard) != shard or shard in ("", ".", ".."):
                raise ImportRefused(
                    f"{folder}/{name}: weight_map[{str(tensor)[:80]!r}] = {str(shard)[:80]!r} is not a file name "
                    f"inside the folder"
                )


def check_safetensors(folder: str, limits: ImportLimits) -> None:
    """Each safetensors header within the limit and inside its file, every tensor's bytes inside
    the file, and all tensors together within the weight limit (as float32)."""
    total = 0
    for path in files_of(folder):
        if not path.endswith(".safetensors"):
            continue
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
            if n < 0 or n > size - 8:
                raise ImportRefused(f"{path}: truncated safetensors file (header length {n}, file {size} bytes)")
            if n > limits.max_header_bytes:
                raise ImportRefused(
                    f"{path}: safetensors header of {n} bytes, over the limit of {limits.max_header_mb:g} MiB "
                    f"(--max-header-mb)"
                )
            try:
                header = json.loads(f.read(n))
            except (ValueError, RecursionError) as e:
                raise ImportRefused(f"{path}: safetensors header is not valid JSON: {str(e)[:120]}") from None
        total += _tensor_elements(path, header, size - 8 - n)
    if total * 4 > limits.max_bytes:
        raise _too_big(f"{folder}: the safetensors files' tensors", total * 4, limits)


def _tensor_elements(path: str, header: Any, data_bytes: int) -> int:
    if not isinstance(header, dict):
        raise ImportRefused(f"{path}: safetensors header is not an object")
    total = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            shape, (start, end), dtype = list(t["shape"]), t["data_offsets"], t["dtype"]
            elements = 1
            for d in shape:
                elements *= int(d)
            bad = not 0 <= start <= end <= data_bytes or (
                dtype in SAFETENSORS_BYTES and elements * SAFETENSORS_BYTES[dtype] != end - start
            )
        except (KeyError, TypeError, ValueError):
            raise ImportRefused(f"{path}: tensor {str(name)[:80]!r}: malformed header entry") from None
        if bad:
            raise ImportRefused(
                f"{path}: tensor {str(name)[:80]!r} ({dtype} {shape}) at bytes {start}..{end} does not fit the file's "
                f"{data_bytes} data bytes"
            )
        total += elements
    return total


def check_config_size(folder: str, limits: ImportLimits) -> None:
    """The model the folder's config.json describes, built on torch's meta device (no memory),
    within the weight limit, before transformers allocates it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    read_json(os.path.join(folder, "config.json"))  # size and syntax, as one line
    try:
        config = AutoConfig.from_pretrained(folder)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception as e:  # noqa: BLE001 - any config transformers cannot build is a refusal
        raise ImportRefused(f"{folder}/config.json: not a model transformers can build: {_line(e)}") from None
    params = sum(p.numel() for p in model.parameters())
    if params * 4 > limits.max_bytes:
        raise _too_big(f"{folder}/config.json ({params / 1e9:.1f} billion parameters)", params * 4, limits)


def check_gguf(path: str, limits: ImportLimits) -> Dict[str, Any]:
    """The checked GGUF header's metadata; its tensors and the model its metadata describes
    (embedding and layer sizes) within the weight limit."""
    try:
        header = read_header(path, limits.max_header_bytes)
    except GGUFRefused as e:
        raise ImportRefused(str(e)) from None
    nbytes = header.elements() * 4
    if nbytes > limits.max_bytes:
        raise _too_big(f"{path}: the GGUF tensors", nbytes, limits)
    meta = header.metadata
    arch = meta["general.architecture"]

    def size(key: str) -> int:
        v = meta.get(f"{arch}.{key}", 0)
        return v if isinstance(v, int) and v > 0 else 0

    hidden, layers, ffn = size("embedding_length"), size("block_count"), size("feed_forward_length")
    vocab = size("vocab_size") or (meta.get("tokenizer.ggml.tokens") or 0)
    described = 4 * (2 * vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * ffn))
    if described > limits.max_bytes:
        raise _too_big(
            f"{path}: the model its metadata describes ({arch}, hidden {hidden}, {layers} layers)", described, limits
        )
    return meta


def check_finite(model: Any, src: str) -> None:
    """Every floating tensor of the loaded model finite; refused naming the tensors otherwise."""
    import torch

    bad: List[str] = [
        name for name, t in model.state_dict().items() if t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]
    if bad:
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise ImportRefused(f"{src}: non-finite weights (NaN or inf) in {', '.join(bad[:5])}{more}")


def _line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


def refusal_of(src: str, e: Exception) -> ImportRefused:
    """A loader's error on a source file, as one line."""
    return ImportRefused(f"{src}: cannot be loaded: {_line(e)}")
