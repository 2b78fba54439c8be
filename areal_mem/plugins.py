"""Registry of workflows, tools and rewards, chosen in config by name.

A config value is either a registered name (`memsearcher`) or a
`module:attribute` path (`my_pkg.env:CalcWorkflow`). Third-party packages
register through the entry-point group `areal_mem.workflows`: an entry point
named `X` is workflow `X`, `tool.X` is tool `X`, `reward.X` is reward `X`.

What is registered is a factory, so that each kind is built the same way:
- workflow: a `rollout.workflows.Workflow` subclass, instantiated with no arguments;
- tool: `factory(ToolBuild) -> Tool`;
- reward: `factory(RolloutConfig) -> reward(message, task) -> float`.
"""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any, Dict, Optional

ENTRY_POINT_GROUP = "areal_mem.workflows"
KINDS = ("workflow", "tool", "reward")

# Built-ins are import paths, so that importing the registry stays cheap.
_BUILTINS: Dict[str, Dict[str, str]] = {
    "workflow": {
        "memsearcher": "rollout.workflows.memsearcher:MemSearcherWorkflow",
        "react": "rollout.workflows.react:ReActWorkflow",
    },
    "tool": {"wikipedia_search": "rollout.tools.wikipedia_search:from_build"},
    "reward": {"memsearcher": "rollout.rewards.answer_reward:from_config"},
}
_registry: Dict[str, Dict[str, Any]] = {kind: {} for kind in KINDS}
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
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        kind, _, name = ep.name.rpartition(".")
        kind = kind or "workflow"
        if kind in KINDS and name not in _registry[kind]:
            _registry[kind][name] = ep  # loaded on first use


def reload_entry_points() -> None:
    """Look at installed packages again (after installing a plugin in a running process)."""
    global _entry_points_loaded
    _entry_points_loaded = False
    _load_entry_points()


def available(kind: str) -> list:
    _check_kind(kind)
    _load_entry_points()
    return sorted(set(_BUILTINS.get(kind, {})) | set(_registry[kind]))


def resolve(kind: str, name: str) -> Any:
    """The factory for `name` (registered, entry point, built-in, or module:attribute)."""
    _check_kind(kind)
    if ":" in name:
        return load_path(name)
    _load_entry_points()
    found: Optional[Any] = _registry[kind].get(name)
    if found is not None:
        if hasattr(found, "load") and hasattr(found, "group"):  # an EntryPoint
            found = _registry[kind][name] = found.load()
        return found
    if name in _BUILTINS[kind]:
        return load_path(_BUILTINS[kind][name])
    raise PluginError(f"no {kind} named {name!r}; available: {', '.join(available(kind))} "
                      f"(or give a module:attribute path)")

