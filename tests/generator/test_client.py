"""Client routing over several real servers: least outstanding, stickiness, failover."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from areal_mem.config.generator import EmbeddedConfig, GeneratorClientConfig, GeneratorConfig
from areal_mem.generation import REQUEST_PRIORITY, SamplingParams
from areal_mem.rollout.generator.client import GeneratorUnavailable, client_from_config, token_versions
from areal_mem.rollout.generator.launch import start_generators, start_sglang_servers


@pytest.fixture
def two_servers(tiny_model_dir):
    cfg = GeneratorConfig(num_servers=2, embedded=EmbeddedConfig(max_batch_size=16, device="cpu"))
    hs = start_generators(cfg, tiny_model_dir)
    yield hs
    for s in hs:
        s.stop()


def test_routing_stickiness_and_failover(two_servers, checker, h):
    a, b = two_servers
    prompts = h.make_prompts(8, 2000, seed=13)
    sp = SamplingParams(max_new_tokens=40, ignore_eos=True)

    async def go():
        cfg = GeneratorConfig(client=GeneratorClientConfig(max_retries=2, cooldown_s=30.0))
        async with client_from_config(
            cfg, [a.url, b.url], on_request=checker.request, on_response=checker.response
        ) as c:
            spread = await asyncio.gather(*(c.generate(p, sp) for p in prompts))
            # a trajectory's turns stay on one server even when the other is less loaded
            sticky = await asyncio.gather(*(c.generate(p, sp, sticky_key="traj-1") for p in prompts[:4]))
            second = await c.generate(prompts[0], sp, sticky_key="traj-1")
            b.stop()  # a server dies: requests fail over, none is lost
            survived = await asyncio.gather(*(c.generate(p, sp) for p in prompts[:4]))
            health = await c.health()
            a.stop()
            with pytest.raises(GeneratorUnavailable, match="gave up after 3 failures"):
                await c.generate(prompts[0], sp)
            return spread, sticky, second, survived, health

    spread, sticky, second, survived, health = asyncio.run(go())
    assert Counter(r.meta["server"] for r in spread) == {a.url: 4, b.url: 4}
    assert len({r.meta["server"] for r in sticky + [second]}) == 1
    assert all(r.meta["server"] == a.url and len(r.output_ids) == 40 for r in survived)
    assert sum(r.meta["failures"] for r in survived) >= 1
    assert health == {a.url: True, b.url: False}
    assert checker.checked["request"] >= 17


def test_token_versions_from_spans():
    assert token_versions({"weight_version": "4"}, 3) == [4, 4, 4]
    spans = [{"version": "1", "start": 0, "end": 2}, {"version": "2", "start": 2, "end": 5}]
    assert token_versions({"weight_version": "2", "weight_versions": spans}, 5) == [1, 1, 2, 2, 2]
    assert token_versions({"weight_version": "default"}, 1) == [0]


def test_sglang_launcher_reports_a_server_that_cannot_start(tmp_path):
    """The GPU path's helper: a server that dies at start-up is reported with its log."""
    with pytest.raises(RuntimeError, match="sglang0 exited while waiting for /health") as e:
        start_sglang_servers(str(tmp_path), startup_timeout_s=120)
    assert "last lines of" in str(e.value)


def test_a_context_priority_wins_over_the_clients_and_reaches_sglang_schema(server, checker, h):
    """A rollout group's `REQUEST_PRIORITY` (rollout.oldest_first) is sent on its requests; outside
    such a context the client's own priority (evaluation's) is, and none when neither is set."""
    sent = []

    def record(route, payload):
        checker.request(route, payload)
        if route == "/generate":
            sent.append(payload.get("priority"))

    sp = SamplingParams(max_new_tokens=3, ignore_eos=True)
    prompt = h.make_prompts(1, 2000, seed=14)[0]

    async def in_group(c, priority):
        REQUEST_PRIORITY.set(priority)  # this task's context only
        return await c.generate(prompt, sp)

    async def go():
        for client_priority in (None, -1):
            async with client_from_config(
                GeneratorConfig(), [server.url], priority=client_priority, on_request=record
            ) as c:
                await c.generate(prompt, sp)
                await asyncio.create_task(in_group(c, 2**30 - 3))
                await c.generate(prompt, sp)  # the group's setting stayed in its task

    asyncio.run(go())
    assert sent == [None, 2**30 - 3, None, -1, 2**30 - 3, -1]
