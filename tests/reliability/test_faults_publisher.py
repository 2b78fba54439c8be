"""A generator that is SIGKILLed and restarted by a launcher gets the learner's current weights
from the distributed publisher before it serves: between pushes (the watcher) and when a push
meets it dead (the push waits, rebuilds the weight group and delivers again)."""

import asyncio
import threading
import time

import pytest

from areal_mem.app.launch.local import pause_generator
from areal_mem.config.generator import EmbeddedConfig
from areal_mem.config.learner import LearnerConfig, PublishConfig
from areal_mem.generation import SamplingParams
from areal_mem.learner.publishers import DistributedPublisher
from areal_mem.rollout.generator.client import GeneratorClient
from areal_mem.rollout.generator.launch import start_embedded_generator
from tests.learner._dist_worker import fixed_rows


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from areal_mem.learner.engine import LearnerEngine

    return LearnerEngine(tiny_model_dir, LearnerConfig(lr=1e-2, zero_stage=2, micro_batch_tokens=256))


def _train(engine):
    assert engine.train_step(fixed_rows(engine.engine.module.config.vocab_size), version=0)["grad_norm"] > 0


def _ask(url, coro_fn):
    async def go():
        async with GeneratorClient([url]) as c:
            return await coro_fn(c)

    return asyncio.run(go())


def _version(url):
    return _ask(url, lambda c: c.weight_versions())[url]


def _restart(tiny_model_dir, port):
    """What the local launcher does: same port, start model, paused until the learner pushes."""
    handle = start_embedded_generator(tiny_model_dir, EmbeddedConfig(max_batch_size=4, device="cpu"), port=port)
    pause_generator(handle.url)
    return handle


def test_a_restarted_generator_serves_the_current_weights(engine, tiny_model_dir):
    gen = start_embedded_generator(tiny_model_dir, EmbeddedConfig(max_batch_size=4, device="cpu"))
    port = int(gen.url.rsplit(":", 1)[1])
    cfg = PublishConfig(bucket_mb=0.05, probe_check=True, heal=True, heal_interval_s=0.2, restart_timeout_s=120)
    pub = DistributedPublisher(engine, GeneratorClient([gen.url]), cfg)
    handles = [gen]
    try:
        pub.setup()
        _train(engine)
        assert pub.publish(1).probe_max_diff <= 1e-4 and _version(gen.url) == 1

        # 1. killed and restarted between two pushes: the watcher pushes v1 into it, then continues it
        gen.child.kill()
        handles.append(_restart(tiny_model_dir, port))
        answered = []
        waiter = threading.Thread(
            target=lambda: answered.append(
                _ask(gen.url, lambda c: c.generate([5, 6, 7], SamplingParams(max_new_tokens=4, temperature=1.0)))
            )
        )
        waiter.start()  # a rollout request to the paused server waits for the weights
        deadline = time.monotonic() + 60
        while _version(gen.url) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        waiter.join(60)
        assert _version(gen.url) == 1 and pub.heals == 1
        assert pub.verified == 2  # the push and the re-delivery: the restarted server's fingerprints match
        assert answered and set(answered[0].versions) == {1}  # served by the pushed weights only
        assert pub.probe() <= 1e-4  # and they are the learner's

        # 2. killed just before a push: the push waits for the restart and delivers
        handles[-1].child.kill()
        later = threading.Timer(1.0, lambda: handles.append(_restart(tiny_model_dir, port)))
        later.start()
        _train(engine)
        result = pub.publish(2)
        later.join()
        assert result.extra.get("healed") == 1.0 and result.probe_max_diff <= 1e-4
        assert _version(gen.url) == 2 and pub.pushed_version == 2
        assert result.verify_s > 0 and pub.verified == 3  # the push failed; its re-delivery was verified

        # 3. and the next push is an ordinary one again
        _train(engine)
        result = pub.publish(3)
        assert "healed" not in result.extra and result.probe_max_diff <= 1e-4 and _version(gen.url) == 3
    finally:
        pub.close()
        for h in handles:
            h.child.kill()
