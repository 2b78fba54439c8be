"""Pieces of SGLang 0.5.23's own source, read from the installed wheel (`pip install --no-deps
sglang==0.5.23`) without importing sglang, whose modules pull in its GPU dependencies.

- `init_custom_process_group`: the function SGLang's generator side (and the trainers written
  for it: slime, verl, AReaL) uses to form the weight-update group. It only needs torch, so
  its source is taken out of `sglang/srt/utils/common.py` with `ast` and run with torch's names.
- `io_struct_fields(cls)`: the fields and defaults of a request struct in
  `sglang/srt/managers/io_struct.py`, read with `ast` (the module imports half of SGLang).
- `load_io_structs(*names)`: plain msgspec structs of io_struct.py (no SGLang base class), taken
  out with `ast` and run with msgspec's and typing's names, to decode answers strictly.
- `load_overall_checksum()`: `/weights_checker`'s `per_gpu_checksum` function (hashlib only).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
import types
import typing
from typing import Dict

import msgspec
import torch


def _sglang_file(*parts: str) -> str:
    spec = importlib.util.find_spec("sglang")
    if spec is None:
        raise ImportError("sglang is not installed; pip install --no-deps sglang==0.5.23")
    return os.path.join(spec.submodule_search_locations[0], *parts)


def _tree(*parts: str) -> ast.Module:
    with open(_sglang_file(*parts), encoding="utf-8") as f:
        return ast.parse(f.read())


def load_init_custom_process_group():
    tree = _tree("srt", "utils", "common.py")
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "init_custom_process_group")
    namespace = {"torch": torch, "torch_release": tuple(int(x) for x in torch.__version__.split(".")[:2])}
    exec(compile(ast.Module([node], []), "sglang/srt/utils/common.py", "exec"), namespace)  # noqa: S102
    return namespace["init_custom_process_group"]


def io_struct_fields(cls: str) -> Dict[str, str]:
    """Field name -> its default's source ("" when required), the BaseReq fields included."""
    tree = _tree("srt", "managers", "io_struct.py")
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out: Dict[str, str] = {}
    node = classes[cls]
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            out.update(io_struct_fields(base.id))
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out[item.target.id] = ast.unparse(item.value) if item.value is not None else ""
    return out


def load_io_structs(*names: str) -> Dict[str, type]:
    tree = _tree("srt", "managers", "io_struct.py")
    nodes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in names]
    # a module of their own: msgspec resolves the string annotations in the class's module
    module = types.ModuleType("_sglang_io_structs")
    module.__dict__.update(
        msgspec=msgspec, **{k: getattr(typing, k) for k in ("Any", "Dict", "List", "Literal", "Optional")}
    )
    sys.modules[module.__name__] = module
    exec(compile(ast.Module(nodes, []), "sglang/srt/managers/io_struct.py", "exec"), module.__dict__)  # noqa: S102
    return {n: getattr(module, n) for n in names}


def load_overall_checksum():
    tree = _tree("srt", "utils", "weight_checker.py")
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "overall_checksum")
    namespace = {"hashlib": hashlib, "Dict": Dict}
    exec(compile(ast.Module([node], []), "sglang/srt/utils/weight_checker.py", "exec"), namespace)  # noqa: S102
    return namespace["overall_checksum"]
