"""How the services are started: all on this machine, or as Ray actors."""
from dataclasses import dataclass
from enum import Enum


class LauncherKind(str, Enum):
    local = "local"
    ray = "ray"


@dataclass
class LauncherConfig:
    kind: LauncherKind = LauncherKind.local
    learner_ranks: int = 1
    health_timeout_s: float = 120.0
    restart_failed: bool = True
