"""Load YAML files and `key.sub=value` overrides onto the typed run schema.

Every failure becomes one `ConfigError` that names the key, where it came from
(file and line, or the command-line override) and what is allowed there, so a
typo in a 50-line recipe is found without reading a traceback.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import typing
from typing import Any, Dict, Iterable, Optional, cast

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from .ranges import check_ranges
from .run import RunConfig


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message says which and why."""


def load_config(
    files: Iterable[str] = (),
    overrides: Iterable[str] = (),
    schema: type = RunConfig,
    optional: Iterable[str] = (),
) -> DictConfig:
    """Merge `files` then `overrides` onto `schema`; check nothing required is missing.

    `optional` names required keys that this caller does not use (a buffer needs no
    `model.path`); they may stay unset.
    """
    files, overrides = list(files), list(overrides)
    cfg = OmegaConf.structured(schema)
    for path in files:
        cfg = _merge(cfg, _read_yaml(path), source=path, yaml_path=path)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"command-line override {item!r}: expected key.sub=value")
        try:
            dotlist = OmegaConf.from_dotlist([item])
        except OmegaConfBaseException as e:
            raise ConfigError(f"command-line override {item!r}: {_first_line(e)}") from None
        cfg = _merge(cfg, dotlist, source=f"command-line override {item!r}")
    missing = sorted(OmegaConf.missing_keys(cfg) - set(optional))
    if missing:
        raise ConfigError(
            "missing required value(s): "
            + ", ".join(f"{k} ({_expected_type(schema, k)})" for k in missing)
            + "; set them in a config file or as key=value on the command line"
        )
    try:
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except OmegaConfBaseException as e:
        raise ConfigError(f"key {e.full_key!r}: {_first_line(e)}") from None
    if schema is RunConfig:  # every numeric key within its declared range (config/ranges.py)
        try:
            check_ranges(cfg, lambda key: _where_set(key, files, overrides))
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return cfg


def _where_set(key: str, files: list, overrides: list) -> str:
    """Where `key` got its value: the last override or file line that sets it, else the default."""
    for item in reversed(overrides):
        if item.split("=", 1)[0].lstrip("+~") == key:
            return f"command-line override {item!r}"
    for path in reversed(files):
        line = _line_of(path, key, exact=True)
        if line:
            return f"{path}:{line}"
    return "the schema's default"


def load_run(files: Iterable[str] = (), overrides: Iterable[str] = (), optional: Iterable[str] = ()) -> RunConfig:
    """`load_config` onto `RunConfig`, converted once into the typed dataclasses every call site takes.

    Required keys named in `optional` that stay unset become "" (a buffer has no `model.path`).
    Checks that live in the schema's `__post_init__` (e.g. `rollout.limits`) run here."""
    cfg = load_config(files, overrides, optional=optional)
    for key in OmegaConf.missing_keys(cfg) & set(optional):
        OmegaConf.update(cfg, key, "")
    try:
        return cast(RunConfig, OmegaConf.to_object(cfg))
    except ValueError as e:
        raise ConfigError(_first_line(e)) from None


def save_resolved(cfg: RunConfig, path: Optional[str] = None) -> str:
    """Write the resolved config (interpolations filled in) to `<run_dir>/config.yaml`.

    Tokens are left out of the file and exported to this process's environment instead,
    so the children that read the file still get them (`security.redact_tokens`)."""
    from ..security import export_tokens, redact_tokens

    path = path or os.path.join(cfg.run_dir, "config.yaml")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    redacted, env = redact_tokens(cfg)
    export_tokens(env)
    OmegaConf.save(redacted, path, resolve=True)
    return path


def to_yaml(cfg: RunConfig) -> str:
    """The resolved config as YAML, tokens left out (it is printed and logged)."""
    from ..security import redact_tokens

    return OmegaConf.to_yaml(redact_tokens(cfg)[0], resolve=True)


def _read_yaml(path: str) -> DictConfig:
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} does not exist")
    try:
        loaded = OmegaConf.load(path)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{path}: the top level must be a mapping of keys")
    return loaded


def _merge(cfg: DictConfig, other: Any, source: str, yaml_path: str = "") -> DictConfig:
    try:
        return cast(DictConfig, OmegaConf.merge(cfg, other))  # merging onto a DictConfig gives one
    except OmegaConfBaseException as e:
        key = e.full_key or ""
        where = source
        line = _line_of(yaml_path, key) if yaml_path else None
        if line:
            where = f"{source}:{line}"
        parent, _, leaf = key.rpartition(".")
        if isinstance(e, ConfigKeyError) or "not in" in str(e):
            allowed = _allowed_keys(cfg, parent)
            raise ConfigError(
                f"{where}: unknown key {key!r}; allowed keys"
                f"{' under ' + repr(parent) if parent else ''}: {', '.join(allowed)}"
            ) from None
        raise ConfigError(f"{where}: key {key!r} expects {_expected_type(RunConfig, key)}: {_first_line(e)}") from None


def _allowed_keys(cfg: DictConfig, parent: str) -> list:
    typ = _schema_type(RunConfig, parent) if parent else RunConfig
    if dataclasses.is_dataclass(typ):
        return sorted(f.name for f in dataclasses.fields(typ))
    node = OmegaConf.select(cfg, parent) if parent else cfg
    return sorted(node.keys()) if isinstance(node, DictConfig) else []


def _schema_type(schema: type, dotted: str) -> Any:
    """The declared type at `dotted`, walking dataclass fields and Dict[str, X] values."""
    typ: Any = schema
    for part in dotted.split("."):
        if typing.get_origin(typ) in (dict, Dict):
            typ = typing.get_args(typ)[1]
            continue
        fields = {f.name: f for f in dataclasses.fields(typ)} if dataclasses.is_dataclass(typ) else {}
        if part not in fields:
            return None
        typ = fields[part].type  # schema modules do not postpone annotations
    return typ


def _expected_type(schema: type, dotted: str) -> str:
    """The declared type of `dotted` in the dataclass schema, e.g. 'int' or 'IndexKind: dense|bm25'."""
    typ = _schema_type(schema, dotted)
    if typ is None:
        return "a value"
    if isinstance(typ, type) and issubclass(typ, enum.Enum):
        return f"{typ.__name__}: " + "|".join(m.name for m in typ)
    return getattr(typ, "__name__", str(typ))


def _line_of(path: str, dotted: str, exact: bool = False) -> Optional[int]:
    """1-based line of `dotted` (or its deepest present parent; None then when `exact`) in a YAML file."""
    try:
        with open(path, encoding="utf-8") as f:
            node = yaml.compose(f)
    except (OSError, yaml.YAMLError):
        return None
    line = None
    for part in dotted.split(".") if dotted else []:
        if not isinstance(node, yaml.MappingNode):
            break
        for k, v in node.value:
            if k.value == part:
                line, node = k.start_mark.line + 1, v
                break
        else:
            return None if exact else line
    return line


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
