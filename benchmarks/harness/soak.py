"""`python -m benchmarks soak`: the debug recipe under one random fault every N seconds, and what survived.

The run is `areal-mem train`'s RL stage (local launcher, real processes); a `FaultInjector`
hits one of them at each tick of the launcher's supervision:

| kind | fault | expected |
| --- | --- | --- |
| rollout | SIGKILL rollout worker 0 (it always has groups in flight) | restarted; no partial group stored |
| generator | SIGKILL generator 0 | restarted on its port, paused until it holds the learner's weights |
| retriever | SIGSTOP the retriever for `--stall-s` s, then SIGCONT | tool calls answer error text; groups flow again |
| buffer | SIGKILL the buffer | restarted on its port from its run dir; puts and gets retry |
| learner | SIGKILL learner rank 0 | restarted; resumes from its last checkpoint |

At the end `account(run_dir)` compares what the workers logged as stored with the buffer's
ledger and files: groups produced, trained (acked), dropped as stale, still pending, lost (stored
but in none of these: must be 0), trained twice, partial groups, steps that trained tokens older
than the staleness bound (all must be 0); with the faults, restarts and wall time it goes to
`<run_dir>/soak_report.md` and `soak_report.json` (exit 1 if a must-be-0 is not).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Sequence

import pyarrow as pa

from areal_mem.config import RunConfig

from .arms import DEFAULT_CONFIG
from .output import PROG, command_line, markdown_table, write_json

HELP = "soak: the debug recipe with one random fault (SIGKILL/SIGSTOP of a service) every N seconds"
KINDS = ("rollout", "generator", "retriever", "buffer", "learner")
# Small faults-first defaults: no SFT warm start, frequent checkpoints, restarts to spare.
SOAK_OVERRIDES = [
    "run_dir=runs/soak",
    "learner.sft.warm_start=false",
    "learner.checkpoint_interval=5",
    "launcher.max_restarts=1000",
    "learner.steps=1000000",
    "rollout.tool_timeout_s=5",
    "eval.interval=0",  # the soak counts groups through faults; no evaluation beside it
]
_STORED = re.compile(r"group (\S+) stored: (\d+) trajectories")


@dataclass
class Fault:
    kind: str
    target: str  # the process name in the launcher (rollout0, generator0, ...)
    pid: int
    at_s: float  # seconds after the injector started


@dataclass
class FaultInjector:
    """Injects faults into the processes of a running `LocalLauncher` (see the module table)."""

    launcher: object
    stall_s: float = 10.0
    started: float = field(default_factory=time.monotonic)
    faults: List[Fault] = field(default_factory=list)

    def target(self, kind: str):
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {', '.join(KINDS)}")
        if kind == "learner":
            return self.launcher.learners[0]
        name = {"rollout": "rollout0", "generator": "generator0"}.get(kind, kind)
        return self.launcher.children[name]

    def available(self, kinds: Sequence[str]) -> List[str]:
        """The kinds whose process runs now (a recipe may point at external services)."""
        out = []
        for kind in kinds:
            try:
                if self.target(kind).alive():
                    out.append(kind)
            except (KeyError, IndexError):
                pass
        return out

    def inject(self, kind: str) -> Fault:
        child = self.target(kind)
        fault = Fault(kind, child.name, child.pid, round(time.monotonic() - self.started, 1))
        if kind == "retriever":  # alive but silent: connections hang until SIGCONT
            child.signal_group(signal.SIGSTOP)
            resume = threading.Timer(self.stall_s, child.signal_group, (signal.SIGCONT,))
            resume.daemon = True
            resume.start()
        else:
            child.signal_group(signal.SIGKILL)
        self.faults.append(fault)
        print(f"[soak] {fault.at_s:7.1f}s fault: {kind} ({child.name}, pid {fault.pid})", flush=True)
        return fault

    def restarts(self) -> Dict[str, int]:
        procs = list(self.launcher.children.values())
        return {c.name: c.restarts for c in procs if c.restarts}


def run_rl(cfg: RunConfig, on_tick: Callable[[FaultInjector], None], stall_s: float = 10.0) -> FaultInjector:
    """`areal-mem train`'s preparation and RL stage of `cfg` (no evaluation), calling
    `on_tick(injector)` at every supervision tick. Raises SystemExit if the learner fails."""
    from areal_mem.app.train import TrainPipeline

    pipeline = TrainPipeline(cfg, evaluate=False)
    pipeline.prepare()
    start_model = pipeline.warm_start()
    holder: Dict[str, FaultInjector] = {}

    def tick(launcher) -> None:
        if "injector" not in holder:
            holder["injector"] = FaultInjector(launcher, stall_s)
        on_tick(holder["injector"])

    pipeline.rl(start_model, on_tick=tick)
    return holder["injector"]


def train_rows(run_dir: str) -> List[dict]:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r.get("kind") == "train"]


def account(run_dir: str, group_size: int, max_staleness: int) -> dict:
    """Every group the workers stored, against the buffer's ledger and files (see module doc);
    and the steps that trained a token older than the staleness bound (a generator that served
    before it held the learner's weights would show there)."""
    stored: Dict[str, int] = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "logs", "rollout*.log"))):
        with open(path, encoding="utf-8", errors="replace") as f:
            for m in _STORED.finditer(f.read()):
                stored[m.group(1)] = int(m.group(2))
    acked: List[str] = []
    dropped: List[str] = []
    ledger = os.path.join(run_dir, "buffer", "ledger.jsonl")
    if os.path.exists(ledger):
        with open(ledger, encoding="utf-8") as f:
            for line in f:
                if line.endswith("\n"):  # a torn last line was never confirmed
                    rec = json.loads(line)
                    acked += rec.get("ack", [])
                    dropped += rec.get("drop", [])
    pending: Dict[str, int] = {}
    for path in glob.glob(os.path.join(run_dir, "buffer", "groups", "*.arrow")):
        try:
            with pa.memory_map(path) as source:
                table = pa.ipc.open_file(source).read_all()
        except (pa.ArrowInvalid, OSError):
            continue  # a put cut short: never acknowledged to a worker
        gid = table.column("group_id")[0].as_py()
        if gid not in acked and gid not in dropped:
            pending[gid] = len(set(table.column("traj_id").to_pylist()))
    rows = train_rows(run_dir)
    versions = [r["version"] for r in rows]
    done = set(acked) | set(dropped) | set(pending)
    return {
        "groups_produced": len(stored),
        "groups_trained": len(acked),
        "trained_twice": len(acked) - len(set(acked)),
        "dropped_stale": len(set(dropped)),
        "pending_at_end": len(pending),
        "lost": len(set(stored) - done),
        "partial_groups": sum(1 for n in [*stored.values(), *pending.values()] if n != group_size)
        + sum(1 for r in rows if r.get("trajectories") != r.get("groups", 0) * group_size),
        "train_steps_logged": len(rows),
        "last_version": versions[-1] if versions else 0,
        "versions_monotone": all(b >= a for a, b in zip(versions, versions[1:])),
        "steps_staler_than_bound": sum(1 for r in rows if r.get("staleness_max", 0) > max_staleness),
    }


# what `account` counts that must be 0 (and `versions_monotone`, which must hold)
MUST_BE_ZERO = ("lost", "trained_twice", "partial_groups", "steps_staler_than_bound")


@dataclass
class SoakReport:
    """What a soak run did and what survived it (`soak_report.json`: these fields, with the
    accounting's keys at the top level)."""

    command: str
    minutes: float
    fault_every_s: float
    faults: List[Fault]
    restarts: Dict[str, int]  # process name -> restarts
    books: Dict[str, object]  # `account(...)`
    wall_s: float

    @property
    def ok(self) -> bool:
        return not any(self.books[k] for k in MUST_BE_ZERO) and bool(self.books["versions_monotone"])

    def to_json(self) -> dict:
        return {
            "command": self.command,
            "minutes": self.minutes,
            "fault_every_s": self.fault_every_s,
            "faults": [asdict(f) for f in self.faults],
            "restarts": self.restarts,
            **self.books,
            "wall_s": self.wall_s,
        }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from areal_mem.config.arguments import add_config_arguments

    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run")
    parser.add_argument("--fault-every", type=float, default=180.0, help="seconds between faults")
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help="fault kinds, drawn in shuffled rounds (each kind once per round)"
    )
    parser.add_argument("--stall-s", type=float, default=10.0, help="how long a retriever stall lasts")
    parser.add_argument("--seed", type=int, default=0, help="draws the faults")
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import logging

    from areal_mem.config.arguments import config_from_args

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not args.config:
        args.config = [DEFAULT_CONFIG]
    args.overrides = [*SOAK_OVERRIDES, *(args.overrides or [])]
    cfg = config_from_args(args)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        print(f"{PROG} soak: --kinds: unknown {unknown or 'none given'}; known: {', '.join(KINDS)}")
        return 2
    rng = random.Random(args.seed)
    wall0 = time.monotonic()
    state = {"next": None, "stopping": False}
    bag: List[str] = []

    def tick(injector: FaultInjector) -> None:
        now = time.monotonic() - injector.started
        if state["next"] is None:
            state["next"] = args.fault_every
        if now >= args.minutes * 60 and not state["stopping"]:
            state["stopping"] = True  # the learner checkpoints and exits 0: the run ends
            print(f"[soak] {now:.0f}s: time is up, stopping the learner", flush=True)
            for child in injector.launcher.learners:
                child.signal_group(signal.SIGTERM)
        elif now >= state["next"] and not state["stopping"]:
            state["next"] += args.fault_every
            if not bag:  # a shuffled round of every kind: random order, each kind as often
                bag.extend(rng.sample(kinds, len(kinds)))
            choices = injector.available(bag)
            if choices:
                bag.remove(choices[0])
                injector.inject(choices[0])

    injector = run_rl(cfg, tick, args.stall_s)
    report = SoakReport(
        command=command_line(),
        minutes=args.minutes,
        fault_every_s=args.fault_every,
        faults=list(injector.faults),
        restarts=injector.restarts(),
        books=account(cfg.run_dir, cfg.rollout.group_size, cfg.buffer.max_staleness),
        wall_s=round(time.monotonic() - wall0, 1),
    )
    data = report.to_json()
    write_json(cfg.run_dir, "soak_report", data)
    text = render(data)
    with open(os.path.join(cfg.run_dir, "soak_report.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(text, flush=True)
    return 0 if report.ok else 1


def render(report: dict) -> str:
    """The markdown of `soak_report.json`'s contents (`SoakReport.to_json`)."""
    faults = markdown_table(
        ["time (s)", "kind", "process", "pid"],
        [[f["at_s"], f["kind"], f["target"], f["pid"]] for f in report["faults"]],
    )
    keys = [
        "groups_produced",
        "groups_trained",
        "dropped_stale",
        "pending_at_end",
        "lost",
        "trained_twice",
        "partial_groups",
        "train_steps_logged",
        "last_version",
        "versions_monotone",
        "steps_staler_than_bound",
        "wall_s",
    ]
    totals = markdown_table(
        ["measure", "value"],
        [[k, report[k]] for k in keys]
        + [["restarts", ", ".join(f"{k} {v}" for k, v in sorted(report["restarts"].items())) or "none"]],
    )
    return (
        f"# Soak: {report['minutes']:g} min, one fault every {report['fault_every_s']:g} s\n\n"
        f"`{report['command']}`\n\n## Faults\n\n{faults}\n\n## Outcome\n\n{totals}\n"
    )
