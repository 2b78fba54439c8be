"""Pieces of SGLang 0.5.23's own source, read from the installed wheel (`pip install --no-deps
sglang==0.5.23`) without importing sglang, whose modules pull in its GPU dependencies.

- `init_custom_process_group`: the function SGLang's generator side (and the trainers written
  for it: slime, verl, AReaL) uses to form the weight-update group. It only needs torch, so
  its source is taken out of `sglang/srt/utils/common.py` with `ast` and run with torch's names.
- `io_struct_fields(cls)`: the fields and defaults of a request struct in
  `sglang/srt/managers/io_struct.py`, read with `ast` (the module imports half of SGLang).
"""

from __future__ import annotations

import ast
import importlib.util
import os
from typing import Dict

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
