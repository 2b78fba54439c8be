"""`retriever.replicas: N`: the launchers start N retrieval services and the clients spread over them.

One replica killed mid-run: every search is still answered (the client moves on to the other
replica), and the local launcher brings the dead one back at its old address.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import urllib.request

import pytest

from areal_mem.app.launch.local import LocalLauncher
from areal_mem.app.launch.plan import service_specs
from areal_mem.config import load_run, save_resolved
from areal_mem.retriever.build import build_index
from areal_mem.retriever.client import RetrieverClient

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOWHERE = "http://127.0.0.1:9"  # the services a test does not start


@pytest.fixture(scope="module")
def bm25_index(world_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("replica_index"))
    build_index(os.path.join(world_dir, "corpus.jsonl"), out, "bm25", show_progress=False)
    return out


def replica_config(tmp_path, index_dir, *overrides):
    cfg = load_run(
        [os.path.join(REPO, "configs", "debug_cpu.yaml")],
        [
            f"run_dir={tmp_path / 'run'}",
            "launcher.health_timeout_s=120",
            f"retriever.index_dir={index_dir}",
            "retriever.kind=bm25",
            "retriever.replicas=2",
            "retriever.threads=1",
            f"generator.urls=[{NOWHERE}]",
            "buffer.url=grpc://127.0.0.1:9",
            *overrides,
        ],
    )
    return cfg, save_resolved(cfg)


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


async def search_through(urls, queries, on_each=None):
    """Every query answered (a list of documents), one at a time, round-robin over `urls`."""
    answered = 0
    async with RetrieverClient(urls, timeout_s=10, max_retries=4) as client:
        for i, q in enumerate(queries):
            docs = await client.search(q, top_n=3)
            assert isinstance(docs, list) and docs
            answered += 1
            if on_each:
                on_each(i)
    return answered


def test_plan_names_one_spec_per_replica(tmp_path):
    cfg, path = replica_config(tmp_path, str(tmp_path / "idx"), "retriever.replicas=3")
    names = [s.name for s in service_specs(cfg, path)]
    assert names == ["retriever0", "retriever1", "retriever2"]
    cfg, path = replica_config(tmp_path, str(tmp_path / "idx"), "retriever.replicas=1")
    assert [s.name for s in service_specs(cfg, path)] == ["retriever"]


class Stop(Exception):
    pass


def test_local_launcher_two_replicas_survive_a_kill(bm25_index, tmp_path):
    cfg, path = replica_config(tmp_path, bm25_index, "launcher.max_restarts=2")
    launcher = LocalLauncher(cfg, path, poll_s=0.2)
    done = threading.Event()

    def tick():
        if done.is_set():
            raise Stop

    try:
        addresses = launcher.start_services()
        assert list(launcher.children) == ["retriever0", "retriever1"]
        urls = addresses.retriever
        assert len(urls) == 2 and len(set(urls)) == 2 and all(map(healthy, urls))
        assert f"retriever.urls=[{urls[0]},{urls[1]}]" in addresses.overrides()
        supervisor = threading.Thread(target=lambda: pytest.raises(Stop, launcher.supervise, tick), daemon=True)
        supervisor.start()
        victim = launcher.children["retriever0"]

        def kill_at(i):
            if i == 10:
                victim.signal_group(signal.SIGKILL)

        queries = ["Beimtim", "observatory", "founded", "river", "city"] * 16
        assert asyncio.run(search_through(urls, queries, kill_at)) == len(queries)
        # the launcher restarted it on its old port
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (launcher.children["retriever0"] is not victim and healthy(urls[0])):
            time.sleep(0.5)
        assert launcher.children["retriever0"].restarts == 1 and healthy(urls[0])
        assert launcher.children["retriever0"].url == urls[0]
        done.set()
        supervisor.join(timeout=10)
    finally:
        done.set()
        launcher.stop_all()


def test_ray_launcher_places_replicas_on_retriever_nodes(bm25_index, tmp_path):
    ray = pytest.importorskip("ray")
    from areal_mem.app.launch.ray_launcher import RayLauncher

    ray.init(
        address="local",
        num_cpus=6,
        resources={"retriever": 2},
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    try:
        cfg, path = replica_config(tmp_path, bm25_index, "launcher.kind=ray")
        launcher = RayLauncher(cfg, path)
        try:
            urls = launcher.start_services().retriever
            assert len(urls) == 2 and all(map(healthy, urls))
            assert launcher.actor_options(launcher.specs["retriever1"])["resources"] == {"retriever": 1.0}
            assert ray.available_resources().get("retriever", 0) == 0  # both units taken
            pid = ray.get(launcher.actors["retriever1"].pid.remote())
            os.kill(pid, signal.SIGKILL)
            assert asyncio.run(search_through(urls, ["Beimtim", "river", "city"] * 4)) == 12
        finally:
            launcher.stop_all()
    finally:
        ray.shutdown()
