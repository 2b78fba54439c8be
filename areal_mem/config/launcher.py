"""How the services are started: all on this machine, or as Ray actors."""

from dataclasses import dataclass, field
from enum import Enum
from typing import Dict, List


class LauncherKind(str, Enum):
    local = "local"
    ray = "ray"


class RayBind(str, Enum):
    auto = "auto"  # the node's IP on a multi-node cluster, else 127.0.0.1
    loopback = "loopback"  # 127.0.0.1: every process of the run on one node
    node_ip = "node_ip"  # the node's IP, with a fresh shared token per run


class PlacementStrategy(str, Enum):
    """Ray placement-group strategies for the learner ranks."""

    PACK = "PACK"
    SPREAD = "SPREAD"
    STRICT_PACK = "STRICT_PACK"
    STRICT_SPREAD = "STRICT_SPREAD"


@dataclass
class RayRoleResources:
    """What one actor of a role reserves; negative: what the run plan asks for."""

    num_cpus: float = -1.0  # plan: 1
    num_gpus: float = -1.0  # plan: 1 per SGLang generator, else 0
    resources: Dict[str, float] = field(default_factory=dict)  # custom Ray resources, e.g. {"gpu_node": 1}


@dataclass
class LauncherConfig:
    kind: LauncherKind = LauncherKind.local
    learner_ranks: int = 1
    health_timeout_s: float = 120.0
    restart_failed: bool = True  # restart a dead rollout worker or generator
    max_restarts: int = 10  # per process; one more death fails the run
    # The GPU split of one node between generation and training (local launcher):
    # generator i sees generator_gpus[i*g:(i+1)*g] with g = gpus_per_generator, every learner
    # rank sees learner_gpus (and picks its own by LOCAL_RANK). Empty: no CUDA_VISIBLE_DEVICES.
    generator_gpus: List[int] = field(default_factory=list)
    gpus_per_generator: int = 1
    learner_gpus: List[int] = field(default_factory=list)
    # launcher: ray
    # "auto": the running cluster (RAY_ADDRESS, `ray start`) else a new local instance;
    # "local": always a new local instance (stopped at the end); or "HOST:PORT"
    ray_address: str = "auto"
    ray_namespace: str = "areal-mem"
    ray_bind: RayBind = RayBind.auto
    ray_learner_strategy: PlacementStrategy = PlacementStrategy.PACK
    # per role (retriever, generator, buffer, learner, rollout), e.g. ray_resources.learner.num_gpus=1
    ray_resources: Dict[str, RayRoleResources] = field(default_factory=dict)
    # CPU pinning per role (retriever, generator, buffer, learner, rollout), e.g.
    # {generator: [0], learner: [1]}: generation and training on separate cores. Empty: no pinning.
    cpu_affinity: Dict[str, List[int]] = field(default_factory=dict)
    # Fault tolerance: a learner that dies is restarted (all ranks) and resumes from its last
    # checkpoint when learner.resume is auto; off: a dead learner ends the run.
    restart_learner: bool = True
    # Before a learner starts, wait this long for a torch extension build lock
    # (~/.cache/torch_extensions/*/*/lock) to go; one left by a killed build is reported by name.
    extension_lock_timeout_s: float = 120.0
