"""The servers an evaluation talks to: the configured ones, or embedded ones it starts and stops.

With no `generator.urls`, the generator of `generator.backend` is started from
`model.path`; with no `retriever.urls`, an index over the world's corpus is
built in `retriever.index_dir` (unless one is there) and served, unless the searches are
replayed from tapes only (`rollout.replay_tools` without `replay_fallback`). Configured urls are
checked to answer before any server starts (the retriever's not when searches are replayed from tapes alone).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator, List, Tuple

from areal_mem.config import ConfigError, RunConfig
from areal_mem.net import unreachable

log = logging.getLogger(__name__)


@contextlib.contextmanager
def eval_services(cfg: RunConfig) -> Iterator[Tuple[List[str], List[str]]]:
    """Yield (generator urls, retriever urls); servers started here are stopped on exit."""
    replay_only = bool(cfg.rollout.replay_tools) and not cfg.rollout.replay_fallback
    # checked before any server starts; a replay from tapes alone never asks the retriever
    gen_urls = _answering("generator.urls", cfg.generator.urls)
    ret_urls = list(cfg.retriever.urls) if replay_only else _answering("retriever.urls", cfg.retriever.urls)
    with contextlib.ExitStack() as stack:
        gen_urls = gen_urls or _start_generators(cfg, stack)
        ret_urls = ret_urls or ([] if replay_only else _start_retriever(cfg, stack))
        yield gen_urls, ret_urls


@contextlib.contextmanager
def retriever_service(cfg: RunConfig) -> Iterator[List[str]]:
    """Yield the retriever urls, starting one over the world's corpus when none is configured."""
    with contextlib.ExitStack() as stack:
        yield _answering("retriever.urls", cfg.retriever.urls) or _start_retriever(cfg, stack)


def _answering(key: str, urls: List[str]) -> List[str]:
    """`urls`, each checked to answer: a dead one is named by its key, with the usual cause."""
    for i, url in enumerate(urls):
        why = unreachable(url)
        if why is not None:
            raise ConfigError(
                f"{key}[{i}]={url}: nothing answers there ({why}). Start that server, or leave {key} "
                "empty and one is started here; a run dir's config.yaml keeps the addresses of its "
                "RL stage's services, gone when the run ended (its train_config.yaml has none)"
            )
    return list(urls)


def _start_generators(cfg: RunConfig, stack: contextlib.ExitStack) -> List[str]:
    from areal_mem.rollout.generator.launch import start_generators

    handles = start_generators(cfg.generator, cfg.model.path)  # all healthy, or none left running
    for h in handles:
        stack.callback(h.stop)
    log.info("started generator(s) %s", [h.url for h in handles])
    return [h.url for h in handles]


def _start_retriever(cfg: RunConfig, stack: contextlib.ExitStack) -> List[str]:
    from areal_mem.retriever.build import build_index
    from areal_mem.retriever.launch import start_retriever
    from areal_mem.retriever.manifest import MANIFEST

    r = cfg.retriever
    if not os.path.exists(os.path.join(r.index_dir, MANIFEST)):
        corpus = os.path.join(cfg.world.dir, "corpus.jsonl")
        if not os.path.exists(corpus):
            raise FileNotFoundError(
                f"no retriever.urls, no index in {r.index_dir} and no corpus at "
                f"{corpus}: build the world (areal-mem world) or an index "
                f"(areal-mem retriever build)"
            )
        build_index(corpus, r.index_dir, kind=r.kind, cfg=r)
    handle = start_retriever(r.index_dir, host=r.host, port=r.port, token=r.token)
    stack.callback(handle.stop)
    return [handle.url]
