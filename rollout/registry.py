"""Registry of workflows, tools and rewards, chosen in config by name.

A config value is either a registered name (`memsearcher`) or a
`module:attribute` path (`my_pkg.env:CalcWorkflow`). Third-party packages
register through the entry-point group `areal_mem.workflows`: an entry point
named `X` is workflow `X`, `tool.X` is tool `X`, `reward.X` is reward `X`.

What is registered is a factory, so that each kind is built the same way:
- workflow: a `areal_mem.rollout.workflows.Workflow` subclass, instantiated with no arguments;
- tool: `factory(ToolBuild) -> Tool`;
- reward: `factory(RolloutConfig) -> reward(message, task) -> float`.
"""

from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Dict

ENTRY_POINT_GROUP = "areal_mem.workflows"
KINDS = ("workflow", "tool", "reward")

# Built-ins are import paths, so that importing the registry stays cheap.
_BUILTINS: Dict[str, Dict[str, str]] = {
    "workflow": {
        "memsearcher": "areal_mem.rollout.workflows.memsearcher:MemSearcherWorkflow",
        "react": "areal_mem.rollout.workflows.react:ReActWorkflow",
    },
    "tool": {"wikipedia_search": "areal_mem.rollout.tools.wikipedia_search:from_build"},
    "reward": {"memsearcher": "areal_mem.rollout.rewards.answer_reward:from_config"},
}
_registry: Dict[str, Dict[str, Any]] = {kind: {} for kind in KINDS}
_entry_points: Dict[str, Dict[str, EntryPoint]] = {kind: {} for kind in KINDS}
_entry_points_loaded = False


class PluginError(LookupError):
    pass


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise PluginError(f"unknown plugin kind {kind!r}; one of {', '.join(KINDS)}")


def register(kind: str, name: str, obj: Any = None) -> Any:
    """Register `obj` under `name`; without `obj`, a decorator."""
    _check_kind(kind)

    def add(target: Any) -> Any:
        _registry[kind][name] = target
        return target

    return add if obj is None else add(obj)


def load_path(path: str) -> Any:
    """Import `module:attribute` (the attribute may be dotted)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise PluginError(f"{path!r} is not a module:attribute path")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise PluginError(f"{path!r}: cannot import module {module_name!r} ({e})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"{path!r}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _load_entry_points() -> None:
    """Index the installed entry points once; each is imported only when first resolved."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        kind, _, name = ep.name.rpartition(".")
        kind = kind or "workflow"
        if kind in KINDS:
            _entry_points[kind][name] = ep


def available(kind: str) -> list:
    _check_kind(kind)
    _load_entry_points()
    return sorted(set(_BUILTINS[kind]) | set(_registry[kind]) | set(_entry_points[kind]))


def resolve(kind: str, name: str) -> Any:
    """The factory for `name` (registered, entry point, built-in, or module:attribute)."""
    _check_kind(kind)
    if ":" in name:
        return load_path(name)
    if name in _registry[kind]:
        return _registry[kind][name]
    _load_entry_points()
    if name in _entry_points[kind]:
        ep = _entry_points[kind][name]
        try:
            obj = ep.load()
        except (ImportError, AttributeError) as e:
            raise PluginError(f"entry point {ep.name} = {ep.value} ({ENTRY_POINT_GROUP}) does not load: {e}") from None
        return register(kind, name, obj)
    if name in _BUILTINS[kind]:
        return load_path(_BUILTINS[kind][name])
    raise PluginError(
        f"no {kind} named {name!r}; available: {', '.join(available(kind))} (or give a module:attribute path)"
    )
