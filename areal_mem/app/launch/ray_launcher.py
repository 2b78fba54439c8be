"""`launcher: ray`: the processes of a run (`plan.py`) inside Ray actors placed on a cluster.

Same specs, start order, restart rules and supervision as `LocalLauncher` (this
class only changes where a process runs): one `ProcessActor` per process, reserving
the spec's resources (or `launcher.ray_resources.<role>`), so SGLang generators land
on GPU nodes and workers, buffer and retriever anywhere (the retriever replicas on nodes
offering a `retriever` resource, one unit each, when the cluster has any); the learner ranks share one
placement group and rank 0's node is their MASTER_ADDR; a learner that dies is restarted as
under the local launcher (all ranks, resuming from the last checkpoint) in a placement group
acquired anew, so ranks whose node is gone land on the nodes that remain. On a multi-node cluster the
services bind their node's IP, which needs a shared token: a fresh one per run,
handed to every process through its environment only. Logs go to
`<run_dir>/logs/<name>.log` on the node that runs the process, so a multi-node run
needs `run_dir` (and the config) on a shared file system.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import secrets
import signal
from dataclasses import dataclass
from typing import Dict, List, Optional, cast

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from areal_mem.buffer.wire import TOKEN_ENV as BUFFER_TOKEN_ENV
from areal_mem.config import RunConfig
from areal_mem.config.launcher import RayBind
from areal_mem.process import ChildProcess
from areal_mem.retriever.command import TOKEN_ENV as RETRIEVER_TOKEN_ENV
from areal_mem.rollout.generator.launch import TOKEN_ENV as GENERATOR_TOKEN_ENV

from .local import LocalLauncher
from .plan import ProcessSpec, learner_specs, service_specs, worker_specs
from .ray_actor import ProcessActor

log = logging.getLogger(__name__)
ROLES = ("retriever", "generator", "buffer", "learner", "rollout")
TOKEN_ENVS = (BUFFER_TOKEN_ENV, GENERATOR_TOKEN_ENV, RETRIEVER_TOKEN_ENV)
CALL_TIMEOUT_S = 60.0  # one control call to an actor (poll, signal, log tail)
LOST = -1  # exit code reported for a process whose actor (or node) is gone


def role_of(name: str) -> str:
    return name.rstrip("0123456789")


@dataclass
class RemoteChild:
    """The `ChildProcess` interface `LocalLauncher` supervises, for a process inside an actor."""

    name: str
    actor: ray.actor.ActorHandle
    log_path: str
    node_ip: str
    url: str = ""
    restarts: int = 0
    _code: Optional[int] = None

    @property
    def returncode(self) -> Optional[int]:
        if self._code is None:
            try:
                self._code = cast(Optional[int], ray.get(self.actor.poll.remote(), timeout=CALL_TIMEOUT_S))
            except RayActorError:
                self._code = LOST
            except GetTimeoutError:
                return None  # busy node: ask again on the next tick
        return self._code

    def alive(self) -> bool:
        return self.returncode is None

    @property
    def pid(self) -> int:
        """The process's id on its node; 0 when its actor is gone."""
        return self._call("pid") or 0

    def signal_group(self, sig: int) -> None:
        self._call("signal_group", sig)

    def stop(self, timeout_s: float = 15.0) -> Optional[int]:
        self._call("stop", timeout_s, timeout_s=timeout_s + CALL_TIMEOUT_S)
        return self.returncode

    def kill(self) -> None:
        self._call("signal_group", signal.SIGKILL)

    def failure(self, what: str) -> RuntimeError:
        tail = self._call("log_tail") or ChildProcess(self.name, [], self.log_path).log_tail()
        return RuntimeError(
            f"{self.name} {what} (exit code {self.returncode}) on node {self.node_ip}; "
            f"last lines of {self.log_path}:\n{tail}"
        )

    def _call(self, method: str, *args, timeout_s: float = CALL_TIMEOUT_S):
        try:
            return ray.get(getattr(self.actor, method).remote(*args), timeout=timeout_s)
        except (RayActorError, GetTimeoutError) as e:
            log.warning("%s: %s on its actor failed: %s", self.name, method, type(e).__name__)
            return None


class RayLauncher(LocalLauncher):
    def __init__(self, cfg: RunConfig, config_path: str, poll_s: float = 1.0) -> None:
        super().__init__(cfg, config_path, poll_s)
        lc = cfg.launcher
        unknown = sorted(set(lc.ray_resources) - set(ROLES))
        if unknown:
            raise ValueError(f"launcher.ray_resources.{unknown[0]}: unknown role; one of {', '.join(ROLES)}")
        self.owns_ray = connect(lc.ray_address, lc.ray_namespace, self.plan_cpus())
        nodes = [n for n in ray.nodes() if n["Alive"]]
        self.bind_node_ip = lc.ray_bind == RayBind.node_ip or (lc.ray_bind == RayBind.auto and len(nodes) > 1)
        token = secrets.token_hex(16) if self.bind_node_ip else ""
        self.token_env = {k: token for k in TOKEN_ENVS} if token else {}
        self.run_id = secrets.token_hex(4)
        # nodes started with `--resources '{"retriever": N}'` hold the retriever replicas (N each)
        self.retriever_nodes = sum(n.get("Resources", {}).get("retriever", 0) for n in nodes)
        self.actors: Dict[str, ray.actor.ActorHandle] = {}
        self._actor_serial = itertools.count()  # a replaced actor's name may not be free yet
        self.pg: Optional[PlacementGroup] = None
        log.info(
            "ray: %d node(s), services bind %s",
            len(nodes),
            "their node IP (token auth)" if self.bind_node_ip else "127.0.0.1",
        )

    # ---- placement ----
    def actor_options(self, spec: ProcessSpec) -> dict:
        res = dict(spec.resources)
        cpus, gpus = res.pop("CPU", 1.0), res.pop("GPU", 0.0)
        if role_of(spec.name) == "retriever" and getattr(self, "retriever_nodes", 0) > 0:
            res.setdefault("retriever", 1.0)
        role = self.cfg.launcher.ray_resources.get(role_of(spec.name))
        if role is not None:
            cpus = role.num_cpus if role.num_cpus >= 0 else cpus
            gpus = role.num_gpus if role.num_gpus >= 0 else gpus
            res.update(role.resources)
        return {"num_cpus": cpus, "num_gpus": gpus, "resources": res}

    def plan_cpus(self) -> int:
        """The CPUs every actor of the run reserves together (a local instance gets at least these)."""
        specs = [
            *service_specs(self.cfg, self.config_path),
            *learner_specs(self.cfg, self.config_path, self.addresses, "", 0),
            *worker_specs(self.cfg, self.config_path, self.addresses),
        ]
        return math.ceil(sum(self.actor_options(s)["num_cpus"] for s in specs))

    def _actor(self, spec: ProcessSpec, strategy=None) -> ray.actor.ActorHandle:
        opts = self.actor_options(spec)
        actor = (
            ray.remote(ProcessActor)
            .options(
                name=f"areal-mem-{self.run_id}-{spec.name}-{next(self._actor_serial)}",
                max_concurrency=4,
                max_restarts=0,
                scheduling_strategy=strategy,
                **opts,
            )
            .remote(spec.name, os.path.join(self.logs, f"{spec.name}.log"))
        )
        self.actors[spec.name] = cast(ray.actor.ActorHandle, actor)  # ray types .remote() as handle or class
        return self.actors[spec.name]

    def _node_ip(self, spec: ProcessSpec) -> str:
        timeout = self.cfg.launcher.health_timeout_s
        try:
            return cast(str, ray.get(self.actors[spec.name].node_ip.remote(), timeout=timeout))
        except GetTimeoutError:
            raise RuntimeError(
                f"{spec.name}: Ray placed no actor with {self.actor_options(spec)} in "
                f"{timeout:.0f}s; the cluster has {ray.available_resources()} free "
                f"(set launcher.ray_resources.{role_of(spec.name)})"
            ) from None

    # ---- LocalLauncher's hooks ----
    def _start(self, spec: ProcessSpec, argv: Optional[List[str]] = None) -> RemoteChild:
        found = self.children.get(spec.name)
        old = found if isinstance(found, RemoteChild) else None
        actor = self.actors.get(spec.name)
        if actor is None or (old is not None and old.actor is actor and old.returncode == LOST):
            # a lost actor comes back on the same node if that node still lives
            strategy = (
                NodeAffinitySchedulingStrategy(self._node_id(old.node_ip), soft=True)
                if old is not None and self._node_id(old.node_ip)
                else None
            )
            self._actor(spec, strategy)
        ip = self._node_ip(spec)
        argv = list(argv or spec.argv)
        if spec.service and self.bind_node_ip:
            argv += ["--host", ip]
        child = RemoteChild(spec.name, self.actors[spec.name], os.path.join(self.logs, f"{spec.name}.log"), ip)
        self.children[spec.name], self.specs[spec.name] = child, spec
        try:
            child.url = cast(
                str,
                ray.get(
                    self.actors[spec.name].start.remote(
                        argv, {**spec.env, **self.token_env}, spec.service, self.cfg.launcher.health_timeout_s
                    )
                ),
            )
        except ray.exceptions.RayTaskError as e:
            raise RuntimeError(f"{spec.name} on node {ip}: {e.cause}") from None
        if spec.service:
            log.info("%s ready at %s", spec.name, child.url)
        return child

    def generator_token(self) -> str:
        return self.token_env.get(GENERATOR_TOKEN_ENV, "") or self.cfg.generator.token

    def start_learner(self) -> None:
        """All ranks in one placement group; rank 0's node is MASTER_ADDR. A restart (the
        local launcher's `_restart_learners`) comes here too: placed anew, in a new group."""
        self._release_learner()
        n, lc = self.cfg.launcher.learner_ranks, self.cfg.launcher
        probe = learner_specs(self.cfg, self.config_path, self.addresses, "", 0)
        opts = self.actor_options(probe[0])
        bundle = {
            "CPU": opts["num_cpus"],
            **({"GPU": opts["num_gpus"]} if opts["num_gpus"] else {}),
            **opts["resources"],
        }
        self.pg = pg = placement_group([dict(bundle) for _ in range(n)], strategy=lc.ray_learner_strategy.value)
        try:
            ray.get(pg.ready(), timeout=lc.health_timeout_s)
        except GetTimeoutError:
            raise RuntimeError(
                f"learner: Ray could not reserve {n} x {bundle} ({lc.ray_learner_strategy.value}) "
                f"in {lc.health_timeout_s:.0f}s; free: {ray.available_resources()}"
            ) from None
        log.info("learner: %d rank(s) placed in placement group %s", n, pg.id.hex())
        for r, spec in enumerate(probe):
            self._actor(spec, PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=r))
        master = self.actors[probe[0].name]
        addr = ray.get(master.node_ip.remote()) if self.bind_node_ip else "127.0.0.1"
        port = cast(int, ray.get(master.free_port.remote()))
        specs = learner_specs(self.cfg, self.config_path, self.addresses, addr, port)
        for spec in specs:
            spec.env.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")  # each actor sees only its own devices
            if self.bind_node_ip:
                spec.argv = [*spec.argv, f"learner.publish.master_address={addr}"]
        self.learners = [self._start(s) for s in specs]

    def _release_learner(self) -> None:
        """The actors of the previous learner ranks and their placement group: a dead rank's
        bundle may sit on a node that is gone, and a new group lets Ray place every rank again."""
        for child in self.learners:
            actor = self.actors.pop(child.name, None)
            if actor is not None:
                ray.kill(actor)
        if self.pg is not None:
            remove_placement_group(self.pg)
            self.pg = None

    def stop_all(self) -> None:
        """Stop every process (LocalLauncher's order), then the actors and the placement group."""
        try:
            super().stop_all()
        finally:
            for actor in self.actors.values():
                ray.kill(actor)
            self.actors.clear()
            if self.pg is not None:
                remove_placement_group(self.pg)
                self.pg = None
            if self.owns_ray and ray.is_initialized():
                ray.shutdown()

    @staticmethod
    def _node_id(ip: str) -> str:
        return next((n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeManagerAddress"] == ip), "")


def connect(address: str, namespace: str, local_cpus: int) -> bool:
    """Join the cluster at `address` ("auto": the running one, else a new local instance;
    "local": always a new local instance, with at least `local_cpus` logical CPUs so that every
    process of the run is placed, as the local launcher would start them all). True when this
    call started the instance."""
    if ray.is_initialized():
        return False
    if address != "local":
        try:
            ray.init(address=address, namespace=namespace, log_to_driver=False)
            return False
        except ConnectionError:
            if address != "auto":
                raise
        log.info("ray: no running cluster found; starting a local instance")
    # A local instance is one machine: keep Ray's own traffic on loopback too.
    ray.init(
        address="local",
        namespace=namespace,
        num_cpus=max(os.cpu_count() or 1, local_cpus),
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    return True
