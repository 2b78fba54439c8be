"""Registry of workflows, tools and rewards, chosen in config by name.

A config value is either a registered name (`memsearcher`) or a
`module:attribute` path (`my_pkg.env:CalcWorkflow`). Third-party packages
register through one entry-point group per kind (`ENTRY_POINT_GROUPS`): an entry
point `X` in `areal_mem.workflows` is workflow `X`, in `areal_mem.tools` tool `X`,
in `areal_mem.rewards` reward `X`. The old `tool.X` / `reward.X` names in the
workflows group are refused by name when asked for, with the group to move them to:
read silently, they would keep a package working until the day they stop.

What is registered is a factory, so that each kind is built the same way:
- workflow: a `areal_mem.rollout.workflows.Workflow` subclass, instantiated with no arguments;
- tool: `factory(ToolBuild) -> Tool`;
- reward: `factory(RolloutConfig) -> reward(message, task) -> float`.
"""

from __future__ import annotations

import importlib
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Dict, Tuple

KINDS = ("workflow", "tool", "reward")
ENTRY_POINT_GROUPS = {"workflow": "areal_mem.workflows", "tool": "areal_mem.tools", "reward": "areal_mem.rewards"}

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
_refused: Dict[Tuple[str, str], EntryPoint] = {}  # (kind, name) -> an old `kind.name` in the workflows group
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
    for kind, group in ENTRY_POINT_GROUPS.items():
        for ep in entry_points(group=group):
            old_kind, dot, name = ep.name.partition(".")
            if kind == "workflow" and dot and old_kind in ("tool", "reward"):
                _refused[(old_kind, name)] = ep
            else:
                _entry_points[kind][ep.name] = ep


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
            raise PluginError(f"entry point {ep.name} = {ep.value} ({ep.group}) does not load: {e}") from None
        return register(kind, name, obj)
    if (kind, name) in _refused:  # before the built-ins: such an entry point once overrode them
        ep = _refused[(kind, name)]
        raise PluginError(
            f"entry point {ep.name} = {ep.value} is in group {ep.group}, which holds workflows only; "
            f"declare it as {name} = {ep.value} in group {ENTRY_POINT_GROUPS[kind]}"
        )
    if name in _BUILTINS[kind]:
        return load_path(_BUILTINS[kind][name])
    raise PluginError(
        f"no {kind} named {name!r}; available: {', '.join(available(kind))} (or give a module:attribute path)"
    )
