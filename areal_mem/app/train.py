"""`areal-mem train`: a recipe end to end, from an empty run dir to an evaluated model.

Stages, each skipped when its output is already there (so a re-run resumes):
world -> tiny model -> retriever index -> oracle demonstrations + SFT warm start
-> evaluation of the start model -> asynchronous RL (the launcher's services,
learner and rollout workers) -> evaluation of the trained model. Production
recipes name an existing model and index, so only the RL and evaluation run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Dict, Iterator, List, Optional

from areal_mem.config import ConfigError, RunConfig, save_resolved
from areal_mem.config.arguments import add_config_arguments, config_from_args
from areal_mem.config.launcher import LauncherKind
from areal_mem.model_files import check_model_path
from areal_mem.process import cli_command

HELP = "run a training recipe end to end: world, model, index, SFT warm start, async RL, eval"
log = logging.getLogger("areal_mem.app.train")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--no-eval", action="store_true", help="skip the evaluations")


class TrainPipeline:
    def __init__(self, cfg: RunConfig, evaluate: bool = True) -> None:
        from .launch.plan import require_extras, require_publisher

        # before the stages that come first take their minutes
        require_extras(cfg, launcher=True, retriever=True, curve=True)
        require_publisher(cfg)
        self.cfg, self.evaluate = cfg, evaluate
        if cfg.learner.sft.warm_start and not any(map(os.path.exists, (self.sft_config(), self.demos_path()))):
            from .demonstrations import oracle_class

            oracle_class(cfg)  # the warm start to come writes demonstrations: the workflow needs an oracle
        # Its own file: the learner rewrites <run_dir>/config.yaml with the service addresses of
        # the RL stage, which are gone by the final evaluation.
        self.config_path = save_resolved(cfg, os.path.join(cfg.run_dir, "train_config.yaml"))
        self.results: Dict[str, object] = {}
        # stage times survive a resumed run, so its summary still says where the time went
        self.stage_times = os.path.join(cfg.run_dir, "stage_s.json")
        if os.path.exists(self.stage_times):
            with open(self.stage_times, encoding="utf-8") as f:
                self.results["stage_s"] = json.load(f)
            self.results["resumed"] = True  # wall_s is then this invocation's only

    # ---- preparation ----
    def prepare(self) -> None:
        """The synthetic world, the tiny model and the world's index, where the recipe asks for
        them (`world.build`, `model.build`); a recipe on real data must name a built index."""
        self._prepare_world()
        self._prepare_model()
        self._prepare_index()

    def _prepare_world(self) -> None:
        """The synthetic world (`world.build`), or the built one checked against the config."""
        w = self.cfg.world
        types, attributes, chains = (
            [t.value for t in w.question_types],
            list(w.single_attributes),
            list(w.bridge_chains),
        )
        manifest = os.path.join(w.dir, "manifest.json")
        # a world found built is checked whether or not this run would build it: the filters
        # are what the config says the run trains and evaluates on. Its seed and sizes only where
        # the run would build it: a world built elsewhere (`world.build: false`) may serve many
        # run seeds, and the config's sizes are then not the world's
        if os.path.exists(manifest):
            from .world import check_built_world, world_filters, world_size

            size = world_size(w.passages, w.questions, w.dev_fraction, w.test_fraction) if w.build else None
            try:
                filters = world_filters(types, attributes, chains, w.hops)
                check_built_world(w.dir, filters, w.seed if w.build else None, size)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        elif w.build:
            from .world import build_world

            log.info("building the synthetic world in %s", w.dir)
            build_world(
                w.dir,
                w.seed,
                w.passages,
                w.questions,
                w.dev_fraction,
                w.test_fraction,
                types,
                attributes,
                chains,
                w.hops,
            )
        if os.path.exists(manifest):
            # the world the run trained and evaluated on, as it was then: question ids are
            # positions in a split, so two runs' answers pair only on the same bytes
            with open(manifest, encoding="utf-8") as f:
                self.results["world_sha256"] = json.load(f).get("sha256")

    def _prepare_model(self) -> None:
        """The model: imported (`model.source`), built (`model.build`, checked when found), or given."""
        cfg = self.cfg
        if cfg.model.source and cfg.model.build:
            raise ConfigError("model.source and model.build both name where the model comes from: set one")
        if cfg.model.source and not os.path.exists(os.path.join(cfg.model.path, "config.json")):
            from .model_import import ImportRefused, import_model

            log.info("importing %s into %s", cfg.model.source, cfg.model.path)
            try:
                import_model(cfg.model.source, cfg.model.path, log=log.info)
            except ImportRefused as e:
                raise ConfigError(f"model.source={cfg.model.source!r}: {e}") from None
        if cfg.model.build:
            from areal_mem.rollout.workflows.setup import workflow_texts

            from .tiny_model import check_built_model, init_model

            texts = workflow_texts(cfg.rollout) if cfg.model.init.workflow_text_repeats else []
            if os.path.exists(os.path.join(cfg.model.path, "config.json")):
                try:
                    check_built_model(cfg.model.path, cfg.model.init, cfg.seed, texts)
                except ValueError as e:
                    raise ConfigError(str(e)) from None
            else:
                log.info("building the tiny model in %s", cfg.model.path)
                init_model(cfg.world.dir, cfg.model.path, cfg.model.init, cfg.seed, texts)

    def _prepare_index(self) -> None:
        """The world's index, unless the run names a service or an index already built."""
        cfg = self.cfg
        if cfg.retriever.urls or os.path.exists(os.path.join(cfg.retriever.index_dir, "manifest.json")):
            return
        if not cfg.world.build:
            raise ConfigError(
                f"retriever.index_dir={cfg.retriever.index_dir!r} holds no index and retriever.urls "
                f"is empty: build one (areal-mem retriever build --corpus FILE --out "
                f"{cfg.retriever.index_dir} --config ...) or point retriever.urls at a service"
            )
        from areal_mem.retriever.build import build_index

        log.info("building the %s index in %s", cfg.retriever.kind.value, cfg.retriever.index_dir)
        build_index(
            os.path.join(cfg.world.dir, "corpus.jsonl"),
            cfg.retriever.index_dir,
            kind=cfg.retriever.kind,
            cfg=cfg.retriever,
        )

    def sft_model_dir(self) -> str:
        return self.cfg.learner.sft.out_dir or os.path.join(self.cfg.run_dir, "sft", "model")

    def sft_config(self) -> str:
        return os.path.join(self.sft_model_dir(), "config.json")

    def demos_path(self) -> str:
        return os.path.join(self.cfg.run_dir, "sft", "demos.jsonl")

    def demonstrations(self) -> str:
        """The oracle demonstrations of the SFT warm start, written when absent (after `prepare`),
        with their stats beside them: a run that finds them written (resumed, or after the paper
        bench counted their tokens to give both workflows the same SFT tokens) still reports them."""
        cfg, sft = self.cfg, self.cfg.learner.sft
        demos = self.demos_path()
        stats_path = os.path.join(os.path.dirname(demos), "demos_stats.json")
        if not os.path.exists(demos):
            from areal_mem.app.demonstrations import write_demonstrations

            with self.timed("demos"):
                stats = write_demonstrations(
                    cfg, demos, limit=sft.oracle_questions, mistake_rate=sft.oracle_mistake_rate, seed=cfg.seed
                )
            log.info("oracle demonstrations: %s", stats)
            with open(stats_path, "w", encoding="utf-8") as f:
                json.dump(stats, f)
        if os.path.exists(stats_path):
            with open(stats_path, encoding="utf-8") as f:
                self.results["oracle"] = json.load(f)
        return demos

    def warm_start(self) -> str:
        """Oracle demonstrations + SFT; returns the model RL starts from."""
        cfg, sft = self.cfg, self.cfg.learner.sft
        out = self.sft_model_dir()
        if not sft.warm_start:
            return cfg.model.path
        if os.path.exists(self.sft_config()):
            return out
        demos = self.demonstrations()
        threads = sft.threads or os.cpu_count() or 1
        self._run(
            "sft",
            ["sft", "--config", self.config_path, "--data", demos, f"learner.sft.out_dir={out}"],
            env={"OMP_NUM_THREADS": str(threads)},
        )
        return out

    # ---- evaluation and RL ----
    def eval(self, model_path: str, tag: str) -> Optional[dict]:
        if not self.evaluate:
            return None
        out_dir = os.path.join(self.cfg.run_dir, "eval", tag)
        summary_path = os.path.join(out_dir, "summary.json")
        if not os.path.exists(summary_path):
            self._run(
                f"eval-{tag}",
                [
                    "eval",
                    "--config",
                    self.config_path,
                    "--quiet",
                    f"model.path={model_path}",
                    f"eval.out_dir={out_dir}",
                ],
            )
        with open(summary_path, encoding="utf-8") as f:
            summary = json.load(f)
        self.results[f"eval_{tag}"] = {k: summary.get(k) for k in ("em", "f1", "acc", "mean_turns")}
        print(f"[train] {tag}: {summary_line(summary)}", flush=True)
        return summary

    def rl(self, start_model: str, on_tick: Optional[Callable[[object], None]] = None) -> str:
        """`on_tick(launcher)` runs at every supervision tick (fault injection in the soak)."""
        from .launch.local import LocalLauncher
        from .launch.progress import ProgressBar

        final = os.path.join(self.cfg.run_dir, "final")
        if os.path.exists(os.path.join(final, "config.json")):
            self.report_dev_curve()  # a resumed run's summary keeps the curve of its RL stage
            return final
        cfg = replace(self.cfg, model=replace(self.cfg.model, path=start_model))
        rl_config = save_resolved(cfg, os.path.join(cfg.run_dir, "rl_config.yaml"))
        launcher: LocalLauncher
        if cfg.launcher.kind == LauncherKind.ray:
            from .launch.ray_launcher import RayLauncher

            launcher = RayLauncher(cfg, rl_config)
        else:
            launcher = LocalLauncher(cfg, rl_config)
        bar = ProgressBar(cfg.run_dir, cfg.learner.steps)

        def tick() -> None:
            bar.update()
            if on_tick is not None:
                on_tick(launcher)

        with self.timed("rl"):
            try:
                launcher.start_services()
                launcher.start_learner()
                launcher.start_workers()
                launcher.start_evaluator()
                code = launcher.supervise(on_tick=tick)
                if code == 0 and cfg.eval.interval > 0:
                    print("[train] RL done; the evaluator finishes the versions still due ...", flush=True)
                    launcher.finish_evaluator(cfg.eval.drain_timeout_s, on_tick=bar.update)
            finally:
                launcher.stop_all()
                bar.close()
            if code != 0:
                raise SystemExit(
                    f"areal-mem train: the learner failed (exit {code}); "
                    f"see {os.path.join(cfg.run_dir, 'logs', 'learner.log')}"
                )
        self.report_dev_curve()
        return final

    def report_dev_curve(self) -> None:
        """The training batches' reward and EM by step, and the evaluation beside training, if
        any: into the summary, the console and PNGs."""
        from areal_mem import policy_snapshots

        from .evaluation.during_training import curve_table, plot_curve, plot_training

        metrics = os.path.join(self.cfg.run_dir, "metrics.jsonl")
        if os.path.exists(metrics):
            with open(metrics, encoding="utf-8") as f:
                train = [r for r in map(json.loads, f) if r.get("kind") == "train"]
            png = plot_training(train, os.path.join(self.cfg.run_dir, "training.png"))
            if png:
                print(f"[train] training curve (reward and EM by step): {png}", flush=True)
        rows = policy_snapshots.read_curve(self.cfg.run_dir)
        if not rows:
            return
        keep = (
            "version",
            "step",
            "time",
            "em",
            "f1",
            "search_rate",
            "answer_copied_rate",
            "train_em",
            "pinned_fraction",
            "eval_s",
        )
        self.results["eval_during"] = [{k: r[k] for k in keep if k in r} for r in rows]
        print("[train] dev evaluation beside training:\n" + curve_table(rows), flush=True)
        png = plot_curve(rows, os.path.join(policy_snapshots.root(self.cfg.run_dir), "curve.png"))
        print(
            f"[train] dev curve: {png or 'not drawn: matplotlib did not import (a core dependency; reinstall areal-mem)'}",
            flush=True,
        )

    def _run(self, name: str, argv: List[str], env: Optional[Dict[str, str]] = None) -> None:
        logs = os.path.join(self.cfg.run_dir, "logs")
        os.makedirs(logs, exist_ok=True)
        path = os.path.join(logs, f"{name}.log")
        print(f"[train] {name} ... (log {path})", flush=True)
        with self.timed(name):
            with open(path, "ab") as f:
                proc = subprocess.Popen(
                    cli_command(*argv), stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
                )
                try:
                    code = proc.wait()
                finally:  # Ctrl-C / SIGTERM (raised as SystemExit below) leaves no stage running
                    if proc.poll() is None:
                        proc.terminate()
                        proc.wait()
            if code != 0:
                with open(path, "rb") as f:
                    tail = f.read()[-3000:].decode(errors="replace")
                raise SystemExit(f"areal-mem train: stage {name} failed (exit {code}); {path}:\n{tail}")

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Time the stage in the block: `name` when it completes, `<name>_failed` when it raises
        (a failure, Ctrl-C): a resumed run's time, the sum of `stage_s`, is then all it took,
        while a stage's own entry stays the time of the attempts that finished."""
        start, done = time.time(), False
        try:
            yield
            done = True
        finally:
            self.record_time(name if done else f"{name}_failed", start, done)

    def record_time(self, name: str, start: float, done: bool = True) -> None:
        """Record a stage's wall time in the summary (`stage_s`) and in `<run_dir>/stage_s.json`:
        where a run's time goes, summed over the invocations of a resumed run."""
        seconds = time.time() - start
        stages = self.results.setdefault("stage_s", {})
        assert isinstance(stages, dict)  # only this method and a resumed run's stage_s.json set it
        stages[name] = round(stages.get(name, 0.0) + seconds, 1)  # a resumed stage adds its time
        tmp = self.stage_times + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(stages, f)
        os.replace(tmp, self.stage_times)  # a crash mid-write leaves the last complete file
        print(f"[train] {name} {'done in' if done else 'stopped after'} {seconds:.0f}s", flush=True)


def summary_line(summary: dict) -> str:
    """An evaluation's line: EM and F1 in percent where the workflow scores answers (a plugin's
    own workflow may record neither: its summary holds null), else its mean reward."""
    scores = " ".join(f"{k} {summary[k.lower()]:.2f}%" for k in ("EM", "F1") if summary.get(k.lower()) is not None)
    scores = scores or f"reward {summary.get('reward', float('nan')):.3f}"
    return f"{scores} on {summary['questions']} questions, {summary['mean_turns']:.2f} turns each"


def _exit_on_signals() -> None:
    """SIGINT/SIGTERM unwind through the stages' `finally`s, which stop every child."""

    def handler(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # One torch thread per process: the stages' processes (learner, generators, workers) share
    # the cores, and oversubscribed torch threads are several times slower than one each.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _exit_on_signals()
    cfg = config_from_args(args)
    if not (cfg.model.build or cfg.model.source):  # else `prepare` writes the model there first
        check_model_path(cfg.model.path)
    pipeline = TrainPipeline(cfg, evaluate=not args.no_eval)
    start = time.time()
    with pipeline.timed("prepare"):
        pipeline.prepare()
    if cfg.eval.zero_shot and cfg.learner.sft.warm_start:
        pipeline.eval(cfg.model.path, "zero_shot")
    start_model = pipeline.warm_start()
    pipeline.eval(start_model, "start")
    final = pipeline.rl(start_model)
    pipeline.eval(final, "final")
    pipeline.results["wall_s"] = round(time.time() - start, 1)
    with open(os.path.join(cfg.run_dir, "train_summary.json"), "w", encoding="utf-8") as f:
        json.dump(pipeline.results, f, indent=2)
    print("[train] summary: " + json.dumps(pipeline.results), flush=True)
    return 0
