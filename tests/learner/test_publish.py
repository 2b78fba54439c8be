"""Distributed and disk pushes into a real embedded generator: its log-probs then equal the
learner's on a probe (and differ before the push, so the check can fail)."""

import asyncio
import os
from dataclasses import replace

import pytest

from areal_mem.config.generator import EmbeddedConfig
from areal_mem.config.learner import LearnerConfig, PublishConfig
from learner.publishers import DiskPublisher, DistributedPublisher, ProbeMismatch
from rollout.generator.client import GeneratorClient
from rollout.generator.launch import start_embedded_generator
from tests.learner._dist_worker import fixed_rows


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from learner.engine import LearnerEngine

    return LearnerEngine(tiny_model_dir, LearnerConfig(lr=1e-2, zero_stage=2, micro_batch_tokens=256))


@pytest.fixture(scope="module")
def generator(tiny_model_dir, tmp_path_factory):
    with start_embedded_generator(
        tiny_model_dir,
        EmbeddedConfig(
            max_batch_size=4, torch_threads=1, weights_dirs=[str(tmp_path_factory.getbasetemp())], device="cpu"
        ),
    ) as h:
        yield h


def _version(url):
    async def go():
        async with GeneratorClient([url]) as c:
            return await c.weight_versions()

    return asyncio.run(go())[url]


def _train(engine):
    m = engine.train_step(fixed_rows(engine.engine.module.config.vocab_size), version=0)
    assert m["grad_norm"] > 0


def test_distributed_then_disk_push_match_the_learner(engine, generator, tmp_path):
    probed = PublishConfig(probe_check=True, probe_tolerance=1e-4, heal=False)
    dist_pub = DistributedPublisher(engine, GeneratorClient([generator.url]), replace(probed, bucket_mb=0.05))
    try:
        _train(engine)
        with pytest.raises(ProbeMismatch):  # the generator still has the initial weights
            dist_pub.probe()
        res = dist_pub.publish(1)
        assert res.probe_max_diff is not None and res.probe_max_diff <= 1e-4
        assert res.extra["buckets"] > 1  # 50 KiB buckets: several round trips
        assert _version(generator.url) == 1
    finally:
        dist_pub.close()

    disk_pub = DiskPublisher(
        engine, GeneratorClient([generator.url]), str(tmp_path / "weights"), replace(probed, keep_weights=1)
    )
    try:
        _train(engine)
        with pytest.raises(ProbeMismatch):
            disk_pub.probe()
        res = disk_pub.publish(2)
        assert res.probe_max_diff <= 1e-4 and res.bytes > 0
        assert _version(generator.url) == 2
        _train(engine)
        disk_pub.publish(3)
        assert os.listdir(tmp_path / "weights") == ["v000003"]  # older pushes cleaned up
        assert _version(generator.url) == 3
    finally:
        disk_pub.close()
