"""Which search backend the tools get: the live retriever, tapes replayed, either one recorded.

The composition (the rollout worker command, evaluation) builds the retriever client and hands
it here with the name of its process; the tools never know which they got.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import AsyncIterator, Optional

from areal_mem.config import ConfigError
from areal_mem.config.rollout import RolloutConfig

from .base import ClosableBackend
from .recorder import RecordingBackend
from .replayer import ReplayBackend


def record_path(setting: str, run_dir: str, process: str) -> str:
    """Where `rollout.record_tools` puts this process's tape; "" when recording is off."""
    if setting.strip().lower() in ("", "false"):
        return ""
    if setting.strip().lower() == "true":
        return os.path.join(run_dir, "tools", f"{process}.jsonl")
    return setting if setting.endswith(".jsonl") else os.path.join(setting, f"{process}.jsonl")


def search_backend(
    rollout: RolloutConfig, live: Optional[ClosableBackend], run_dir: str, process: str
) -> Optional[ClosableBackend]:
    """`live` as configured: answered from `rollout.replay_tools` (misses to `live` only with
    `rollout.replay_fallback`), and recorded to this process's tape under `rollout.record_tools`.
    Without replay_fallback a replay never touches `live`, so the retriever may be down."""
    backend: Optional[ClosableBackend] = live
    if rollout.replay_tools:
        if rollout.replay_fallback and live is None:
            raise ConfigError("rollout.replay_fallback needs a retriever (retriever.urls) to send misses to")
        backend = ReplayBackend(rollout.replay_tools, live, rollout.replay_fallback)
    path = record_path(rollout.record_tools, run_dir, process)
    if path:
        if backend is None:
            raise ConfigError("rollout.record_tools needs a retriever (retriever.urls) or rollout.replay_tools")
        backend = RecordingBackend(backend, path)
    return backend


@asynccontextmanager
async def opened(backend: Optional[ClosableBackend]) -> AsyncIterator[Optional[ClosableBackend]]:
    """`backend` for the body of an `async with`, closed after it; None (no retrieval: a workflow
    without search tools, evaluated without a retriever) passes through."""
    try:
        yield backend
    finally:
        if backend is not None:
            await backend.close()
