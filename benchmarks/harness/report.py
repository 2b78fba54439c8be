"""`python -m benchmarks all`: async, memory, staleness and scale in one run, then `<run_dir>/report.md`
with the PNG plots beside it and `<run_dir>/report.json` holding every number of every table and
plot. Arms shared by async and staleness run once. `--figures-dir docs/figures` also copies the
plots where the README links them.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import time
from dataclasses import asdict, dataclass

from . import asynchrony, memory, scale, staleness
from .arms import add_arm_arguments
from .output import command_line, read_json, write_json

HELP = "run async, memory, staleness and scale, and write <run_dir>/report.md with plots and report.json"
NEEDS = ("matplotlib", "faiss")  # the plots; scale measures faiss search
PARTS = ("async", "staleness", "memory", "scale")


@dataclass
class ReportHeader:
    """What the report says about its own run."""

    command: str
    started: str  # UTC, minutes
    minutes: float
    machine_start: str  # usable cores and load average
    machine_end: str
    note: str = ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_arm_arguments(parser)
    parser.add_argument("--async-etas", default="0,2,4", help="bench async: staleness bounds")
    parser.add_argument("--async-repeats", type=int, default=1, help="bench async: interleaved repeats (medians)")
    parser.add_argument("--staleness-etas", default="0,2,4,8", help="bench staleness: staleness bounds")
    parser.add_argument("--questions", type=int, default=8, help="bench memory: dev questions per workflow")
    parser.add_argument("--turns", type=int, default=8, help="bench memory: searches before the answer")
    parser.add_argument("--figures-dir", default="", help="also copy the plots here (docs/figures)")
    asynchrony.add_target_arguments(parser)


def _machine() -> str:
    load = os.getloadavg()
    return (
        f"{len(os.sched_getaffinity(0))} usable CPU cores, load average {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f} (1/5/15 min)"
    )


def write_report(run_dir: str, header: ReportHeader) -> str:
    """report.md from the parts' JSON files in `run_dir`; report.json with all of them."""
    parts = {name: read_json(run_dir, name) for name in PARTS}
    renders = {
        "async": asynchrony.render,
        "staleness": staleness.render,
        "memory": memory.render,
        "scale": scale.render,
    }
    titles = {
        "async": "Asynchronous against synchronous (debug recipe)",
        "staleness": "Staleness: decoupled loss against plain PPO",
        "memory": "MemSearcher against ReAct: context and learner cost",
        "scale": "Scale on paper: the 3B recipe on 16 GPUs",
    }
    lines = [
        "# areal-mem system benchmarks",
        "",
        f"Command: `{header.command}`",
        "",
        f"Started {header.started}, {header.minutes:.0f} minutes. Machine at the start: "
        f"{header.machine_start}; at the end: {header.machine_end}.",
        "",
    ]
    if header.note:
        lines += [f"Note: {header.note}.", ""]
    for name in PARTS:
        part = parts[name]
        lines += [f"## {titles[name]}", ""]
        if part is None:
            lines += ["(not run)", ""]
            continue
        lines += [renders[name](part), ""]
        for path in part.get("plots", [])[:1]:
            lines += [f"![{name}]({os.path.basename(path)})", ""]
    path = os.path.join(run_dir, "report.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    write_json(run_dir, "report", {"header": asdict(header), **parts})
    return path


def run(args: argparse.Namespace) -> int:
    t0, started = time.time(), datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine_start = _machine()
    for name, module, extra in (
        ("async", asynchrony, {"etas": args.async_etas, "repeats": args.async_repeats}),
        ("staleness", staleness, {"etas": args.staleness_etas}),
        ("memory", memory, {}),
        ("scale", scale, {"inputs": ""}),
    ):
        print(f"\n[bench all] {name}", flush=True)
        ns = copy.copy(args)
        for key, value in extra.items():
            setattr(ns, key, value)
        code = module.run(ns)
        if code:
            return code
    header = ReportHeader(command_line(), started, (time.time() - t0) / 60, machine_start, _machine())
    path = write_report(args.run_dir, header)
    print(f"\n[bench all] report: {path}", flush=True)
    return 0
