"""What a command needs beyond the core install, checked before the command starts anything.

Some modules come from pip extras (pyproject.toml): faiss from `cpu` (faiss-cpu) or `gpu`
(faiss-gpu-cu12) for dense indexes, ray from `ray` for `launcher.kind=ray`. A command that will
need one calls `require` at its start, so that a missing module is a one-line refusal naming
the extra (the command line exits 2) instead of a traceback minutes into a run, with services
already started. `find_spec` only looks the module up: nothing is imported here.
"""

from __future__ import annotations

import importlib.util
from typing import Iterable, List, Sequence, Union


class MissingExtra(RuntimeError):
    """A module a command needs cannot be imported; the message says what to install."""


def missing(modules: Iterable[str]) -> List[str]:
    """The modules of `modules` that cannot be imported here."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing; a module without a spec
            found = False
        if not found:
            out.append(name)
    return out


def require(extra: Union[str, Sequence[str]], modules: Iterable[str], what: str) -> None:
    """Raise MissingExtra unless every module of `modules` can be imported.

    `extra`: the pip extra that brings them; several when any one of them does (faiss:
    ("cpu", "gpu")); "" for a core dependency (then the install itself is broken). `what`: what
    needs them, as the user asked for it (e.g. "launcher.kind=ray")."""
    gone = missing(modules)
    if not gone:
        return
    names = ", ".join(gone)
    extras = [e for e in ([extra] if isinstance(extra, str) else extra) if e]
    if not extras:
        raise MissingExtra(
            f"{what} needs {names}, a core dependency of areal-mem that is not importable here: "
            "reinstall areal-mem (pip install areal-mem; from a checkout: pip install -e .)"
        )
    which = " or ".join(f"`{e}`" for e in extras)
    pips = " or ".join(f"'areal-mem[{e}]'" for e in extras)
    checkout = " or ".join(f"'.[{e}]'" for e in extras)
    raise MissingExtra(
        f"{what} needs the {which} extra: pip install {pips} ({names} is not installed; "
        f"from a checkout: pip install -e {checkout})"
    )
