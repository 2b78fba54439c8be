"""Distributed and disk pushes into a real embedded generator: its log-probs then equal the
learner's on a probe (and differ before the push, so the check can fail), and its weight
fingerprints equal the learner's; weights damaged on the way are a WeightMismatch naming them."""

import asyncio
import hashlib
import os
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file

from areal_mem.config.generator import EmbeddedConfig
from areal_mem.config.learner import LearnerConfig, PublishConfig, VerifyMode
from areal_mem.learner.publishers import DiskPublisher, DistributedPublisher, ProbeMismatch, WeightMismatch
from areal_mem.rollout.generator.client import GeneratorClient
from areal_mem.rollout.generator.launch import start_embedded_generator
from tests.learner._dist_worker import fixed_rows


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from areal_mem.learner.engine import LearnerEngine

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
        assert 0 < res.verify_s < res.seconds  # verified (learner.publish.verify: auto)
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
        assert res.probe_max_diff <= 1e-4 and res.bytes > 0 and 0 < res.verify_s < res.seconds
        assert _version(generator.url) == 2
        _train(engine)
        disk_pub.publish(3)
        assert os.listdir(tmp_path / "weights") == ["v000003"]  # older pushes cleaned up
        assert _version(generator.url) == 3
    finally:
        disk_pub.close()


class SwappingClient(GeneratorClient):
    """Announces two tensors of a bucket under each other's names: a transport that mixes them up."""

    def __init__(self, urls, pair):
        super().__init__(urls)
        self.pair = pair

    async def update_weights_from_distributed(self, names, dtypes, shapes, group_name, version, flush_cache=False):
        a, b = self.pair
        swap = {a: b, b: a} if a in names and b in names else {}
        names = [swap.get(n, n) for n in names]
        return await super().update_weights_from_distributed(names, dtypes, shapes, group_name, version, flush_cache)


class DamagingClient(GeneratorClient):
    """Changes one element of one tensor in the checkpoint before the generators load it."""

    def __init__(self, urls, name):
        super().__init__(urls)
        self.name = name

    async def update_weights_from_disk(self, path, version, abort_all_requests=False):
        f = os.path.join(path, "model.safetensors")
        state = load_file(f)
        state[self.name].view(-1)[0] += 1.0
        save_file(state, f, metadata={"format": "pt"})
        return await super().update_weights_from_disk(path, version, abort_all_requests)


def test_weights_mixed_up_or_damaged_on_the_way_are_named(engine, generator, tmp_path):
    named = list(engine.named_weights())
    a, b = next(
        (a, b)
        for i, (a, ta) in enumerate(named)
        for b, tb in named[i + 1 :]
        if ta.shape == tb.shape and not torch.equal(ta, tb)
    )
    cfg = PublishConfig(heal=False, verify=VerifyMode.on)
    pub = DistributedPublisher(engine, SwappingClient([generator.url], (a, b)), cfg)
    try:
        _train(engine)
        with pytest.raises(WeightMismatch) as e:
            pub.publish(4)
        assert str(e.value) == (
            f"generator {generator.url} does not serve the weights of push 4: differ in 2 tensor(s): {a}, {b}"
        )
    finally:
        pub.close()

    pub = DiskPublisher(engine, DamagingClient([generator.url], "model.norm.weight"), str(tmp_path / "w"), cfg)
    try:
        with pytest.raises(WeightMismatch, match=r"push 5: differ in 1 tensor\(s\): model.norm.weight$"):
            pub.publish(5)
    finally:
        pub.close()

    for verify, version in ((VerifyMode.off, 6), (VerifyMode.auto, 7)):  # whole weights pass the check
        pub = DistributedPublisher(engine, GeneratorClient([generator.url]), replace(cfg, verify=verify))
        try:
            res = pub.publish(version)
            assert (res.verify_s is None) == (verify == VerifyMode.off) and _version(generator.url) == version
        finally:
            pub.close()


class SGLangChecksums(GeneratorClient):
    """Reports checksums as SGLang does (sha256 hex of its own tensors): not comparable."""

    async def weight_checksums(self):
        real = await super().weight_checksums()
        return {u: {n: hashlib.sha256(fp.encode()).hexdigest() for n, fp in c.items()} for u, c in real.items()}


def test_a_generator_without_comparable_fingerprints_turns_auto_off_and_fails_on(engine, generator, caplog):
    pub = DistributedPublisher(engine, SGLangChecksums([generator.url]), PublishConfig(heal=False))
    try:
        assert pub.publish(8).verify_s is None and not pub.verify
        assert "pushes are not verified (learner.publish.verify=auto)" in caplog.text
    finally:
        pub.close()
    pub = DistributedPublisher(
        engine, SGLangChecksums([generator.url]), PublishConfig(heal=False, verify=VerifyMode.on)
    )
    try:
        with pytest.raises(
            RuntimeError, match=rf"^learner.publish.verify=on: {generator.url}/weights_checker does not"
        ):
            pub.publish(9)
        assert _version(generator.url) == 8  # refused before pausing or pushing anything
    finally:
        pub.close()
