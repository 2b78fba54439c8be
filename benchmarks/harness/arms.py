"""Arms of the system benchmarks: `areal-mem train` RL runs from one prepared start, measured.

The start (world, tiny model, index; SFT optional) is prepared once per bench run and every
arm reuses it, so arms differ only in their overrides. An arm is the real recipe through the
real local launcher (`areal-mem train --no-eval`); while it runs, this process watches the
learner's `metrics.jsonl` and, where a new step first appears there, reads the generator's
`/model_info` (`engine_stats`: busy seconds of the engine) and the CPU time of the arm's
processes, so each step gets a wall-clock time and a generator busy reading.
An arm whose command line is unchanged is not run again (`<arm>/bench_arm.json`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence

from areal_mem.config import ConfigError
from areal_mem.process import cli_command

from .output import PROG

# the checkout's recipe (configs/ is not packaged): benchmarks/harness/arms.py -> the repository root
REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_CONFIG = os.path.join(REPO, "configs", "debug_cpu.yaml")


@dataclass
class Start:
    """What every arm starts from."""

    world: str
    index: str
    model: str

    def overrides(self) -> List[str]:
        return [
            f"world.dir={self.world}",
            "world.build=false",  # given, not built: any run seed may train on it
            f"retriever.index_dir={self.index}",
            f"model.path={self.model}",
            "model.build=false",  # likewise: not checked against the arm's seed or model.init
            "learner.sft.warm_start=false",
        ]


def prepare_start(
    config: str, overrides: Sequence[str], out_dir: str, sft: bool = False, start_from: str = ""
) -> Start:
    """`start_from`: a prepared run dir (world/, index/, model/ or sft/model/) to reuse as is;
    else the train pipeline's own resumable stages build the start in `out_dir`."""
    if start_from:
        model = os.path.join(start_from, "sft", "model")
        if not os.path.exists(os.path.join(model, "config.json")):
            model = os.path.join(start_from, "model")
        start = Start(os.path.join(start_from, "world"), os.path.join(start_from, "index"), model)
        for path, marker in (
            (start.world, "manifest.json"),
            (start.index, "manifest.json"),
            (start.model, "config.json"),
        ):
            if not os.path.exists(os.path.join(path, marker)):
                raise ConfigError(f"--start-from {start_from}: {os.path.join(path, marker)} is missing")
        return start
    from areal_mem.app.train import TrainPipeline
    from areal_mem.config import load_run

    cfg = load_run([config], [*overrides, f"run_dir={out_dir}", f"learner.sft.warm_start={sft}"])
    pipeline = TrainPipeline(cfg, evaluate=False)
    pipeline.prepare()
    return Start(cfg.world.dir, cfg.retriever.index_dir, pipeline.warm_start())


@dataclass
class Sample:
    t: float  # seconds since the arm started
    steps: int  # train steps in metrics.jsonl at that time
    busy_s: Optional[float] = None  # generator engine busy seconds (None: not reachable)
    uptime_s: Optional[float] = None
    tokens: Optional[int] = None
    # the engine's split of busy_s (absent from generators that do not report it)
    engine_steps: Optional[int] = None
    prefill_s: Optional[float] = None
    prefill_tokens: Optional[int] = None
    reprefill_tokens: Optional[int] = None  # of those, prefilled again (after an abort or retract)
    prefix_hit_tokens: Optional[int] = None  # prompt tokens taken from the prefix cache instead
    decode_s: Optional[float] = None
    decode_rows: Optional[int] = None
    joins: Optional[int] = None  # prefills into a running batch
    join_copies: Optional[int] = None  # of those, copies of every running row into new buffers
    cpu_s: Dict[str, float] = field(default_factory=dict)  # CPU seconds of the arm's live processes, by role


@dataclass
class Arm:
    name: str
    argv: List[str]
    wall_s: float = 0.0
    steps: List[dict] = field(default_factory=list)  # metrics.jsonl train rows
    samples: List[Sample] = field(default_factory=list)

    def summary(self) -> Dict[str, float]:
        return summarize(self.steps, self.samples)


def run_arm(
    run_dir: str,
    name: str,
    config: str,
    start: Start,
    overrides: Sequence[str],
    poll_s: float = 0.2,
    timeout_s: float = 3600.0,
) -> Arm:
    """One `areal-mem train --no-eval` in `<run_dir>/arms/<name>-<hash of argv>`, measured."""
    argv = ["train", "--config", config, "--no-eval", *start.overrides(), *overrides]
    digest = hashlib.sha1(json.dumps(argv).encode()).hexdigest()[:8]
    arm_dir = os.path.abspath(os.path.join(run_dir, "arms", f"{name}-{digest}"))
    record = os.path.join(arm_dir, "bench_arm.json")
    if os.path.exists(record):
        with open(record, encoding="utf-8") as f:
            data = json.load(f)
        print(f"[bench] {name}: reusing {arm_dir}", flush=True)
        return Arm(data["name"], data["argv"], data["wall_s"], data["steps"], [Sample(**s) for s in data["samples"]])
    shutil.rmtree(arm_dir, ignore_errors=True)  # an unfinished earlier try: its buffer and checkpoints
    os.makedirs(arm_dir)
    argv = argv + [f"run_dir={arm_dir}"]
    arm = Arm(name, argv)
    log_path = os.path.join(arm_dir, "bench_train.log")
    print(f"[bench] {name}: areal-mem {' '.join(argv[:3])} ... (log {log_path})", flush=True)
    metrics_path, config_path = os.path.join(arm_dir, "metrics.jsonl"), os.path.join(arm_dir, "config.yaml")
    url, t0, size = "", time.monotonic(), -1
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cli_command(*argv), stdout=log, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None:
                if time.monotonic() - t0 > timeout_s:
                    raise SystemExit(f"{PROG}: arm {name} ran past {timeout_s:.0f}s; {log_path}")
                now = _size(metrics_path)
                if now != size:  # the learner wrote a line: read the file again
                    size, arm.steps = now, _train_rows(metrics_path)
                url = url or _generator_url(config_path)
                # `summarize` reads the samples where a step count is first seen: only those are
                # taken, since each costs the generator an HTTP request and this process a walk
                # over the arm's processes, CPU the arm's services would otherwise have
                if not arm.samples or arm.samples[-1].steps != len(arm.steps) or arm.samples[-1].busy_s is None:
                    arm.samples.append(
                        Sample(time.monotonic() - t0, len(arm.steps), **_engine_stats(url), cpu_s=cpu_by_role(proc.pid))
                    )
                time.sleep(poll_s)
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    arm.wall_s = time.monotonic() - t0
    arm.steps = _train_rows(metrics_path)
    if proc.returncode != 0:
        with open(log_path, "rb") as f:
            tail = f.read()[-3000:].decode(errors="replace")
        raise SystemExit(f"{PROG}: arm {name} failed (exit {proc.returncode}); {log_path}:\n{tail}")
    with open(record, "w", encoding="utf-8") as f:
        json.dump({**asdict(arm), "summary": arm.summary()}, f, indent=1)
    return arm


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def _train_rows(path: str) -> List[dict]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line being written
            continue
        if row.get("kind") == "train":
            rows.append(row)
    return rows


def _generator_url(config_path: str) -> str:
    """The first generator of the RL stage, from the config the learner saves with the addresses."""
    if not os.path.exists(config_path):
        return ""
    from omegaconf import OmegaConf

    try:
        urls = list(OmegaConf.load(config_path).generator.urls)
    except Exception:  # a file being written
        return ""
    return urls[0] if urls else ""


def _engine_stats(url: str) -> dict:
    if not url:
        return {}
    try:
        with urllib.request.urlopen(url + "/model_info", timeout=2) as resp:
            stats = json.loads(resp.read()).get("engine_stats") or {}
    except (OSError, ValueError):
        return {}
    keys = (
        "busy_s",
        "uptime_s",
        "tokens",
        "prefill_s",
        "prefill_tokens",
        "reprefill_tokens",
        "prefix_hit_tokens",
        "decode_s",
        "decode_rows",
        "joins",
        "join_copies",
    )
    return {"engine_steps": stats.get("steps"), **{k: stats.get(k) for k in keys}}


def cpu_by_role(root_pid: int) -> Dict[str, float]:
    """User + system CPU seconds of a process tree, by the `areal-mem` sub-command each process
    runs (`python -m areal_mem.app.cli <role> ...`; `train` is the launcher, anything else `other`)."""
    import psutil

    out: Dict[str, float] = {}
    try:
        procs = [psutil.Process(root_pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return out
    for p in procs:
        try:
            argv, t = p.cmdline(), p.cpu_times()
        except psutil.Error:  # ended between the listing and the reading
            continue
        role = argv[argv.index("areal_mem.app.cli") + 1] if "areal_mem.app.cli" in argv[:-1] else "other"
        role = {"train": "launcher"}.get(role, role)
        out[role] = out.get(role, 0.0) + t.user + t.system
    return out


def summarize(steps: List[dict], samples: List[Sample]) -> Dict[str, float]:
    """Steady-state figures over steps 2..N; step 1 includes the cold start.

    Throughput and waits use the learner's own clock (`step_s` runs from asking the buffer for a
    batch to the end of the push, and the loop starts the next step at once). Generator figures
    use the engine's busy seconds polled where step 1 and step N were first seen (absent when
    both were first seen in the same poll).
    """
    n = len(steps)
    if n < 2:
        raise ValueError(f"the arm trained {n} step(s); the steady-state window needs at least 2")
    window = steps[1:]
    span = sum(r["step_s"] for r in window)
    busy = sum(r["step_s"] - r["wait_s"] for r in window)  # training and pushing, not waiting for a batch
    out: Dict[str, float] = {
        "steps": n,
        "window_steps": len(window),
        "window_s": span,
        "step_wall_s": span / len(window),
        "groups_per_s": sum(r["groups"] for r in window) / span,
        "trained_tokens_per_s": sum(r["n_tokens"] for r in window) / span,
        "context_tokens_per_s": sum(_context_tokens(r) for r in window) / span,
        "learner_wait_frac": sum(r["wait_s"] for r in window) / span,
        "t_train_s": busy / len(window),
    }
    tokens = sum(r["n_tokens"] for r in window)
    if tokens > 0:  # the same work in every arm of a bench: it shows the machine's speed in this one
        out["learner_us_per_token"] = 1e6 * busy / tokens
    first = next((s for s in samples if s.steps >= 1), None)
    last = next((s for s in samples if s.steps >= n), None)
    if (
        first is not None
        and last is not None
        and last.steps > first.steps
        and first.busy_s is not None
        and last.busy_s is not None
        and last.uptime_s > first.uptime_s
    ):
        gen_busy = last.busy_s - first.busy_s
        out["t_gen_s"] = gen_busy / (last.steps - first.steps)
        out["gen_idle_frac"] = 1.0 - gen_busy / (last.uptime_s - first.uptime_s)
        if gen_busy > 0:
            out["gen_tokens_per_busy_s"] = (last.tokens - first.tokens) / gen_busy
        if first.decode_rows is not None and last.decode_rows is not None and last.decode_rows > first.decode_rows:
            # extra work (tokens prefilled again after aborts) against slower work (time per row)
            per_step = last.steps - first.steps
            out["gen_prefill_tokens_per_step"] = (last.prefill_tokens - first.prefill_tokens) / per_step
            if last.reprefill_tokens is not None and first.reprefill_tokens is not None:
                redone = last.reprefill_tokens - first.reprefill_tokens
                out["gen_reprefill_tokens_per_step"] = redone / per_step
                out["gen_reprefill_frac"] = redone / max(1, last.prefill_tokens - first.prefill_tokens)
            if last.prefix_hit_tokens is not None and first.prefix_hit_tokens is not None:
                hit = last.prefix_hit_tokens - first.prefix_hit_tokens
                prompts = hit + last.prefill_tokens - first.prefill_tokens
                out["gen_prefix_hit_frac"] = hit / max(1, prompts)  # of the prompt tokens, KV reused
            if None not in (first.joins, last.joins, first.join_copies, last.join_copies):
                joins = last.joins - first.joins
                out["gen_join_copy_frac"] = (last.join_copies - first.join_copies) / max(1, joins)
            out["gen_prefill_s_per_step"] = (last.prefill_s - first.prefill_s) / per_step
            out["gen_decode_s_per_step"] = (last.decode_s - first.decode_s) / per_step
            out["gen_decode_ms_per_row"] = (
                1e3 * (last.decode_s - first.decode_s) / (last.decode_rows - first.decode_rows)
            )
            out["gen_decode_batch"] = (last.decode_rows - first.decode_rows) / max(
                1, last.engine_steps - first.engine_steps
            )
    if first is not None and last is not None and last.steps > first.steps and first.cpu_s and last.cpu_s:
        # where the cores go: CPU seconds per step by role (a restarted process restarts its count)
        per_step = last.steps - first.steps
        out["cpu_s_per_step"] = {
            role: max(0.0, last.cpu_s[role] - first.cpu_s.get(role, 0.0)) / per_step for role in sorted(last.cpu_s)
        }
        out["cpu_busy_frac"] = sum(out["cpu_s_per_step"].values()) / (
            len(os.sched_getaffinity(0)) * (last.t - first.t) / per_step
        )
    tail = steps[-min(3, n) :]
    out["reward_final"] = sum(r["reward"] for r in tail) / len(tail)
    out["reward_mean"] = sum(r["reward"] for r in steps) / n
    out["staleness_mean"] = sum(r.get("staleness_mean", 0.0) for r in steps) / n
    out["dropped_stale"] = sum(r.get("dropped_stale", 0.0) for r in steps)
    out["context_tokens_per_step"] = sum(_context_tokens(r) for r in steps) / n
    out["trained_tokens_per_step"] = sum(r["n_tokens"] for r in steps) / n
    return out


def _context_tokens(row: dict) -> float:
    """Tokens in the batch's context rows (prompt + response) = trajectories x contexts x mean length."""
    return row["trajectories"] * row["contexts"] * row["context_tokens"]


def affinity_overrides(spec: str) -> List[str]:
    """`auto`: generator on CPU 0 and learner on CPU 1 when this process may use both; `none`;
    or `role:cpu+cpu,role:cpu` (e.g. `generator:0,learner:1`)."""
    if spec == "none":
        return []
    if spec == "auto":
        have = sorted(os.sched_getaffinity(0))
        return (
            [f"launcher.cpu_affinity.generator=[{have[0]}]", f"launcher.cpu_affinity.learner=[{have[1]}]"]
            if len(have) >= 2
            else []
        )
    out = []
    for part in spec.split(","):
        role, _, cpus = part.partition(":")
        if not cpus:
            raise ConfigError(f"--affinity {spec!r}: expected role:cpu[+cpu...], got {part!r}")
        out.append(f"launcher.cpu_affinity.{role.strip()}=[{','.join(cpus.split('+'))}]")
    return out


def add_arm_arguments(parser) -> None:
    """The arguments every bench that runs arms takes."""
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="the recipe (default configs/debug_cpu.yaml)")
    parser.add_argument("--run-dir", default="runs/bench", help="where arms, tables and plots go")
    parser.add_argument("--steps", type=int, default=16, help="learner steps per arm")
    parser.add_argument(
        "--start-from",
        default="",
        metavar="DIR",
        help="reuse a prepared run dir (world/, index/, model/ or sft/model/) as the start",
    )
    parser.add_argument("--sft", action="store_true", help="warm-start the start model by SFT (slow)")
    parser.add_argument("--poll-s", type=float, default=0.2, help="seconds between looks at an arm's learner metrics")
    parser.add_argument(
        "--affinity", default="auto", help="auto | none | role:cpu,... (generator and learner on separate cores)"
    )
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value", help="override for every arm")


def start_of(args) -> Start:
    return prepare_start(args.config, args.overrides, os.path.join(args.run_dir, "start"), args.sft, args.start_from)


def arm_overrides(args, eta: int, decoupled: bool = True) -> List[str]:
    return [
        *args.overrides,
        *affinity_overrides(args.affinity),
        f"buffer.max_staleness={eta}",
        f"learner.loss.decoupled={str(decoupled).lower()}",
        f"learner.steps={args.steps}",
        "learner.checkpoint_interval=1000000",
        "eval.interval=0",  # no evaluation beside training unless an arm measures it (the `eval` bench)
    ]


def parse_ints(text: str) -> List[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"expected a comma-separated list of integers, got {text!r}") from None
