"""Typed configs at every call site: no function of the four packages takes a config untyped.

Commands convert the merged config once (`load_run` / `config_from_args`, OmegaConf.to_object), so
a parameter named `cfg`, `config` or `*_cfg` is annotated with its schema dataclass, never left
bare, `Any` or a raw `DictConfig` (only config loading itself and token redaction handle those).
"""

import ast

from tests.source_tree import package_sources

DICTCONFIG_OK = {"areal_mem/config/loading.py", "areal_mem/security.py"}


def _untyped(path: str, source: str):
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for arg in node.args.args + node.args.kwonlyargs:
            if arg.arg not in ("cfg", "config") and not arg.arg.endswith("_cfg"):
                continue
            ann = ast.unparse(arg.annotation) if arg.annotation else ""
            if not ann or ann == "Any" or ("DictConfig" in ann and path not in DICTCONFIG_OK):
                yield f"{path}:{node.lineno} {node.name}({arg.arg}: {ann or 'untyped'})"


def test_every_config_parameter_names_its_schema():
    found = []
    for rel, path in package_sources():
        with open(path, encoding="utf-8") as f:
            found += _untyped(rel, f.read())
    assert found == []


def test_the_check_sees_an_untyped_config():
    src = "def f(cfg):\n    pass\n\nasync def g(x, learner_cfg: Any):\n    pass\n\ndef h(cfg: RunConfig):\n    pass\n"
    assert list(_untyped("x.py", src)) == ["x.py:1 f(cfg: untyped)", "x.py:4 g(learner_cfg: Any)"]


def test_no_enum_is_unwrapped_by_hand():
    """Typed configs hold enum members: `getattr(x, "value", x)` would only hide a wrong type."""
    hits = []
    for rel, path in package_sources():
        with open(path, encoding="utf-8") as f:
            hits += [f"{rel}:{i}" for i, line in enumerate(f, 1) if '"value", ' in line and "getattr(" in line]
    assert hits == []
