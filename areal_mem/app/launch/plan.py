"""What a run starts, independent of where: one `ProcessSpec` per service, learner rank and worker.

The local launcher runs the specs as child processes of this machine; the Ray
launcher runs the same specs inside actors placed on a cluster. Both pass the
addresses of the services to the learner and the workers as config overrides.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List

from areal_mem.config import ConfigError, RunConfig
from areal_mem.config.eval import EvalPlacement
from areal_mem.config.generator import GeneratorBackend
from areal_mem.config.launcher import LauncherKind
from areal_mem.config.learner import PublisherKind
from areal_mem.config.retriever import IndexKind
from areal_mem.extras import require

AFFINITY_ENV = "AREAL_MEM_CPUS"  # CPUs a process pins itself to at start (`areal_mem.app.cli.main`)
ROLES = ("retriever", "generator", "buffer", "learner", "rollout", "evaluator")


@dataclass
class ProcessSpec:
    name: str
    argv: List[str]  # arguments of `areal-mem`
    env: Dict[str, str] = field(default_factory=dict)
    service: bool = False  # writes its URL to `--ready-file` once it serves
    restart: bool = False  # restarted by the launcher when it dies
    resources: Dict[str, float] = field(default_factory=lambda: {"CPU": 1.0})


@dataclass
class Addresses:
    retriever: List[str] = field(default_factory=list)
    generators: List[str] = field(default_factory=list)
    buffer: str = ""

    def overrides(self) -> List[str]:
        out = [f"generator.urls=[{','.join(self.generators)}]", f"buffer.url={self.buffer}"]
        if self.retriever:
            out.append(f"retriever.urls=[{','.join(self.retriever)}]")
        return out


def service_specs(cfg: RunConfig, config_path: str) -> List[ProcessSpec]:
    """The services the config does not already point at, in start order."""
    specs = []
    if not cfg.retriever.urls:
        n = cfg.retriever.replicas
        for i in range(n):  # one index each; the clients spread over them (retriever/client.py)
            specs.append(
                ProcessSpec(
                    "retriever" if n == 1 else f"retriever{i}",
                    ["retriever", "serve", "--config", config_path],
                    service=True,
                    restart=True,
                )
            )
    if not cfg.generator.urls:
        gpu = cfg.generator.backend.value == "sglang"
        for i in range(cfg.generator.num_servers):
            specs.append(
                ProcessSpec(
                    f"generator{i}",
                    generator_argv(config_path),
                    service=True,
                    restart=True,
                    env=_generator_devices(cfg, i),
                    resources={"CPU": 1.0, **({"GPU": 1.0} if gpu else {})},
                )
            )
    if not cfg.buffer.url:
        specs.append(
            ProcessSpec("buffer", ["buffer", "serve", "--config", config_path], service=True, restart=True)
        )  # on its old port, from its run dir
    return with_affinity(cfg, specs)


def generator_argv(config_path: str, model_path: str = "", port: int = 0, weight_version: int = 0) -> List[str]:
    argv = ["generator", "serve", "--config", config_path]
    if model_path:
        argv += ["--model", model_path, "--weight-version", str(weight_version)]
    if port:
        argv += ["--port", str(port)]
    return argv


def learner_specs(
    cfg: RunConfig, config_path: str, addresses: Addresses, master_addr: str, master_port: int
) -> List[ProcessSpec]:
    """One process per rank with torchrun's environment, so any placement works."""
    n = cfg.launcher.learner_ranks
    gpus = list(cfg.launcher.learner_gpus)
    if gpus and len(gpus) != n:
        raise ConfigError(
            f"launcher.learner_gpus lists {len(gpus)} GPU(s) for launcher.learner_ranks={n} ranks; give one per rank"
        )
    devices = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))} if gpus else {}
    argv = ["learner", "--config", config_path, *addresses.overrides()]
    return with_affinity(
        cfg,
        [
            ProcessSpec(
                "learner" if n == 1 else f"learner{r}",
                argv,
                env={
                    "RANK": str(r),
                    "LOCAL_RANK": str(r),
                    "WORLD_SIZE": str(n),
                    "LOCAL_WORLD_SIZE": str(n),
                    "MASTER_ADDR": master_addr,
                    "MASTER_PORT": str(master_port),
                    **devices,
                },
            )
            for r in range(n)
        ],
    )


def _generator_devices(cfg: RunConfig, i: int) -> Dict[str, str]:
    """CUDA_VISIBLE_DEVICES of generator i from `launcher.generator_gpus`, if that is set."""
    gpus, g = list(cfg.launcher.generator_gpus), cfg.launcher.gpus_per_generator
    if not gpus:
        return {}
    need = cfg.generator.num_servers * g
    if len(gpus) < need:
        raise ConfigError(
            f"launcher.generator_gpus lists {len(gpus)} GPU(s); "
            f"generator.num_servers={cfg.generator.num_servers} x "
            f"launcher.gpus_per_generator={g} need {need}"
        )
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus[i * g : (i + 1) * g]))}


def require_publisher(cfg: RunConfig) -> None:
    """An RL run needs weight pushes (without them the version never advances); a distributed push
    needs the generators on other GPUs than the learner, and one weight-group rank per
    tensor-parallel rank of each SGLang server."""
    if cfg.learner.publish.kind.value == "none":
        raise ConfigError(
            "learner.publish.kind=none with rollout workers: the generators would never get "
            "new weights, and the buffer admits only (buffer.max_staleness + 1) x "
            "buffer.batch_groups groups before the learner waits forever; "
            "use learner.publish.kind=distributed or disk"
        )
    p, tp = cfg.learner.publish, cfg.launcher.gpus_per_generator
    shared = sorted(set(cfg.launcher.generator_gpus) & set(cfg.launcher.learner_gpus))
    if shared and p.kind == PublisherKind.distributed:
        raise ConfigError(
            f"launcher.generator_gpus and launcher.learner_gpus share GPU(s) {shared}: a distributed push "
            "needs one NCCL rank per device and NCCL cannot join two ranks on one device; "
            "use learner.publish.kind=disk (configs/debug_gpu.yaml does)"
        )
    if (
        cfg.generator.backend == GeneratorBackend.sglang
        and p.kind == PublisherKind.distributed
        and p.ranks_per_server != tp
    ):
        raise ConfigError(
            f"learner.publish.ranks_per_server={p.ranks_per_server}, but each SGLang generator runs "
            f"launcher.gpus_per_generator={tp} tensor-parallel ranks and every one joins the weight group "
            "(the rendezvous would wait for the missing ones until it times out): set them equal"
        )


def serves_dense_index(cfg: RunConfig) -> bool:
    """The run serves a dense index itself: no `retriever.urls`, and the index in
    `retriever.index_dir` (or, none built yet, `retriever.kind`) is dense."""
    r = cfg.retriever
    if r.urls:
        return False
    if os.path.exists(os.path.join(r.index_dir, "manifest.json")):
        from areal_mem.retriever.manifest import IndexMismatchError, Manifest

        try:
            return Manifest.load(r.index_dir).kind == IndexKind.dense.value
        except IndexMismatchError:
            return False  # refused with its reason where the index is loaded
    return r.kind == IndexKind.dense


def require_extras(cfg: RunConfig, *, launcher: bool, retriever: bool, curve: bool) -> None:
    """The modules outside the core install that this run will need, checked before it starts
    anything (areal_mem.extras): ray for `launcher.kind=ray` (`launcher`), faiss where it serves
    a dense index itself (`retriever`), matplotlib (core) for the curves a training run draws
    (`curve`: the training batches' reward and EM, and the dev curve of `eval.interval` > 0)."""
    if launcher and cfg.launcher.kind == LauncherKind.ray:
        require("ray", ["ray"], "launcher.kind=ray")
    if retriever and serves_dense_index(cfg):
        require(("cpu", "gpu"), ["faiss"], f"a dense index (retriever.index_dir={cfg.retriever.index_dir})")
    if curve:
        require("", ["matplotlib"], "the curves a training run draws (training.png, eval_during/curve.png)")


def worker_specs(cfg: RunConfig, config_path: str, addresses: Addresses) -> List[ProcessSpec]:
    require_publisher(cfg)
    n = cfg.rollout.num_workers
    return with_affinity(
        cfg,
        [
            ProcessSpec(
                f"rollout{i}",
                [
                    "rollout",
                    "--config",
                    config_path,
                    "--worker-id",
                    str(i),
                    "--num-workers",
                    str(n),
                    *addresses.overrides(),
                ],
                restart=True,
            )
            for i in range(n)
        ],
    )


def evaluator_specs(cfg: RunConfig, config_path: str, addresses: Addresses) -> List[ProcessSpec]:
    """The evaluator beside training (`eval.interval` > 0): it reaches the retriever and, under
    `eval.placement: shared`, the training generators; under `own` it starts its own generator
    (a GPU of its own with SGLang)."""
    ev = cfg.eval
    if ev.interval <= 0:
        return []
    sglang = cfg.generator.backend == GeneratorBackend.sglang
    if ev.placement == EvalPlacement.shared and sglang:
        missing = [
            f
            for f in ("--enable-priority-scheduling", "--default-priority-value")
            if f not in cfg.generator.sglang_args
        ]
        if missing:
            raise ConfigError(
                f"eval.placement=shared with SGLang generators: add {' and '.join(missing)} to "
                "generator.sglang_args (e.g. [--enable-priority-scheduling, --default-priority-value, '0']); "
                "without them SGLang ignores eval.priority, or serves the rollouts' requests, which carry "
                "no priority, after the evaluation's"
            )
    gpu = ev.placement == EvalPlacement.own and sglang
    spec = ProcessSpec(
        "evaluator",
        ["evaluator", "--config", config_path, *addresses.overrides()],
        restart=True,
        resources={"CPU": 1.0, **({"GPU": 1.0} if gpu else {})},
    )
    return with_affinity(cfg, [spec])


def with_affinity(cfg: RunConfig, specs: List[ProcessSpec]) -> List[ProcessSpec]:
    """Carry `launcher.cpu_affinity[role]` to each process as AFFINITY_ENV (a process's role is
    its name without the index: generator0 -> generator)."""
    pins = dict(cfg.launcher.cpu_affinity)
    unknown = sorted(set(pins) - set(ROLES))
    if unknown:
        raise ConfigError(f"launcher.cpu_affinity: unknown role(s) {unknown}; allowed: {', '.join(ROLES)}")
    for spec in specs:
        cpus = pins.get(spec.name.rstrip("0123456789"))
        if cpus:
            spec.env[AFFINITY_ENV] = ",".join(str(int(c)) for c in cpus)
    return specs
