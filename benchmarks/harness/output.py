"""What every bench writes: a markdown table printed and kept, a JSON of its numbers, PNG plots."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from typing import Iterable, List, Optional, Sequence

from areal_mem import extras

PROG = "python -m benchmarks"
# the pip extras of areal-mem that bring each module a benchmark may need ("": the core install)
EXTRAS = {"matplotlib": "", "faiss": ("cpu", "gpu")}
_COMMAND: List[str] = []  # the argv `python -m benchmarks` parsed (`record_command`)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    def cell(v) -> str:
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def record_command(argv: Sequence[str]) -> None:
    """Keep the arguments the benchmark runs with, for `command_line`."""
    _COMMAND[:] = list(argv)


def command_line() -> str:
    """The command that produced a result, as typed (for the report and the README)."""
    return f"{PROG} " + shlex.join(_COMMAND or sys.argv[1:])


def require(modules: Iterable[str], who: str) -> None:
    """Exit 2 with one line naming what to install if any of `modules` is missing; called before a
    benchmark starts anything, so that it does not fail after its arms ran."""
    for name in modules:
        try:
            extras.require(EXTRAS.get(name, name), [name], who)
        except extras.MissingExtra as e:
            print(e, file=sys.stderr)
            raise SystemExit(2) from None


def write_json(run_dir: str, name: str, data: dict) -> str:
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, f"{name}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
    return path


def write_report(out_dirs: Sequence[str], name: str, data: dict, text: str) -> None:
    """`<dir>/<name>.json` and `<dir>/<name>.md` in every non-empty folder of `out_dirs` (the run
    dir, and e.g. docs/reports)."""
    for out in filter(None, out_dirs):
        write_json(out, name, data)
        with open(os.path.join(out, f"{name}.md"), "w", encoding="utf-8") as f:
            f.write(text)


def read_json(run_dir: str, name: str) -> Optional[dict]:
    path = os.path.join(run_dir, f"{name}.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _pyplot():
    """matplotlib.pyplot on the file backend; a benchmark that plots lists matplotlib in its
    `NEEDS`, checked before it starts (a core dependency, so only a broken install lacks it)."""
    require(["matplotlib"], f"{PROG}: the plots")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def new_figure(width: float = 6.0, height: float = 4.0, cols: int = 1):
    return _pyplot().subplots(1, cols, figsize=(width, height), squeeze=False)


def save_figure(fig, run_dir: str, name: str, figures_dir: str = "") -> List[str]:
    """`<run_dir>/<name>.png`, and a copy in `figures_dir` (the README's, committed) if given."""
    plt = _pyplot()
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, f"{name}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    paths = [path]
    if figures_dir:
        os.makedirs(figures_dir, exist_ok=True)
        paths.append(shutil.copy(path, os.path.join(figures_dir, f"{name}.png")))
    return paths
