"""Real services on 127.0.0.1 for the bad-input and security tests, each started once with a
shared token through its real `serve` command, and the route tables the fuzz tests walk.

A derandomized hypothesis profile ("ci", the default) keeps CI repeatable and inside its
budget; `HYPOTHESIS_PROFILE=deep` runs many more examples.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple
from urllib.parse import urlparse

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=8, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("deep", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

TOKEN = "rel-" + secrets.token_hex(12)  # distinctive, so a leak into any log is found by grep
PROMPT = [5, 6, 7, 8]
GREEDY = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}}


def http_call(
    url: str,
    method: str,
    path: str,
    body: Optional[bytes] = None,
    headers: Optional[Dict[str, str]] = None,
    timeout: float = 60.0,
) -> Tuple[int, bytes, str]:
    """(status, body, content type) of one request; a fresh connection each time."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read(), r.getheader("Content-Type", "")
    finally:
        conn.close()


@dataclass
class Service:
    """A started service: its URL, its log and how to call it with the token."""

    url: str
    log_path: str
    pid: int
    token: str = TOKEN
    extra: Dict[str, Any] = field(default_factory=dict)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        raw: Optional[bytes] = None,
        headers: Optional[Dict[str, str]] = None,
        auth: bool = True,
    ) -> Tuple[int, Any]:
        """(status, decoded JSON or raw bytes) of one authenticated request."""
        h = {"Authorization": f"Bearer {self.token}"} if auth else {}
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        if data is not None and raw is None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        status, out, ctype = http_call(self.url, method, path, data, h)
        return status, (json.loads(out) if "json" in ctype and out else out)


@pytest.fixture(scope="session")
def rel_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("reliability")


@pytest.fixture(scope="session")
def retriever_service(world_dir, rel_dir):
    """BM25 over the world's corpus, token required; `extra` holds a query and its exact answer."""
    from areal_mem.retriever.build import build_index
    from areal_mem.retriever.corpus import CorpusReader
    from areal_mem.retriever.launch import start_retriever

    corpus = os.path.join(world_dir, "corpus.jsonl")
    index = str(rel_dir / "bm25")
    build_index(corpus, index, "bm25", show_progress=False)
    first = next(iter(CorpusReader(corpus)))
    with start_retriever(
        index, token=TOKEN, log_path=str(rel_dir / "retriever.log"), overrides=["retriever.threads=1"]
    ) as h:
        svc = Service(h.url, h.log_path, h.child.proc.pid)
        good = {"query": first.title, "top_n": 3}
        status, docs = svc.call("POST", "/search", good)
        assert status == 200 and len(docs) == 3 and docs[0]["id"] == first.id
        svc.extra["good"] = (good, docs)
        yield svc


@pytest.fixture(scope="session")
def generator_service(tiny_model_dir, rel_dir):
    """The embedded server, token required, loading weights only from `extra["allowed"]`."""
    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.rollout.generator.launch import start_embedded_generator

    allowed = rel_dir / "allowed"
    allowed.mkdir()
    shutil.copytree(tiny_model_dir, allowed / "copy")
    with start_embedded_generator(
        tiny_model_dir,
        EmbeddedConfig(
            max_batch_size=4, torch_threads=1, weight_group_timeout_s=3, weights_dirs=[str(allowed)], device="cpu"
        ),
        token=TOKEN,
        log_path=str(rel_dir / "generator.log"),
    ) as h:
        svc = Service(h.url, h.log_path, h.child.proc.pid, extra={"allowed": str(allowed)})
        status, out = svc.call("POST", "/generate", GREEDY)
        assert status == 200 and len(out["output_ids"]) == 4
        svc.extra["good"] = out["output_ids"]
        yield svc


@pytest.fixture(scope="session")
def buffer_service(rel_dir):
    from areal_mem.buffer.server.launch import BufferProcess

    proc = BufferProcess(
        str(rel_dir / "buffer_run"), token=TOKEN, overrides=["buffer.fsync=false", "buffer.slot_ttl_s=0"]
    )
    yield proc
    proc.stop()


def check_retriever_answers(svc: Service) -> None:
    """The next good request gets exactly the answer it got before the bad ones."""
    body, docs = svc.extra["good"]
    assert svc.call("POST", "/search", body) == (200, docs)


def check_generator_answers(svc: Service) -> None:
    """Undo a pause a fuzzed body may have asked for, then the same greedy tokens as at start."""
    assert svc.call("POST", "/continue_generation", {})[0] == 200
    status, out = svc.call("POST", "/generate", GREEDY)
    assert status == 200 and out["output_ids"] == svc.extra["good"], out
    assert svc.call("GET", "/model_info")[1]["weight_version"] == "0"


def app_routes(app) -> set:
    """(method, path) of every route an aiohttp app registers (HEAD included)."""
    return {(r.method, r.resource.canonical) for r in app.router.routes()}


@pytest.fixture(scope="session")
def routes():
    """The routes the retriever and the generator register, read from their routers."""
    from areal_mem.config.retriever import RetrieverConfig
    from areal_mem.retriever.server import make_app
    from areal_mem.rollout.generator.embedded.server import GeneratorServer

    return {
        "retriever": app_routes(make_app(None, RetrieverConfig())),
        "generator": app_routes(GeneratorServer(None, None).app()),
    }


@pytest.fixture(scope="session")
def checks():
    """The answer checks, handed out as a fixture (test modules do not import conftest)."""
    return {
        "retriever": check_retriever_answers,
        "generator": check_generator_answers,
        "http_call": http_call,
        "token": TOKEN,
    }
