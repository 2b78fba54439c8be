"""Both weight publishers on the architectures users bring (tests/architectures.py: Llama tied and
untied, Qwen2 with biases, Qwen3 with q/k norms, GQA): after a learner step, a distributed push and
then a disk push leave a real embedded generator serving the learner's weights, verified tensor by
tensor with the weight fingerprints and by a probe whose log-probs must match within 1e-4."""

from dataclasses import replace

import pytest

from areal_mem.config.generator import EmbeddedConfig
from areal_mem.config.learner import LearnerConfig, PublishConfig, VerifyMode
from areal_mem.learner.publishers import DiskPublisher, DistributedPublisher, ProbeMismatch
from areal_mem.rollout.generator.client import GeneratorClient
from areal_mem.rollout.generator.launch import start_embedded_generator
from tests.architectures import ARCHITECTURES, save
from tests.learner._dist_worker import fixed_rows


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_distributed_and_disk_pushes_are_verified(arch, tmp_path):
    from areal_mem.learner.engine import LearnerEngine

    model_dir = save(arch, str(tmp_path / "model"))
    engine = LearnerEngine(model_dir, LearnerConfig(lr=1e-2, zero_stage=2, micro_batch_tokens=256))
    cfg = PublishConfig(probe_check=True, probe_tolerance=1e-4, heal=False, verify=VerifyMode.on)
    embedded = EmbeddedConfig(max_batch_size=4, torch_threads=1, weights_dirs=[str(tmp_path)], device="cpu")
    with start_embedded_generator(model_dir, embedded) as generator:
        vocab = engine.engine.module.config.vocab_size
        pubs = [
            DistributedPublisher(engine, GeneratorClient([generator.url]), replace(cfg, bucket_mb=0.05)),
            DiskPublisher(engine, GeneratorClient([generator.url]), str(tmp_path / "weights"), cfg),
        ]
        for version, pub in enumerate(pubs, start=1):
            try:
                assert engine.train_step(fixed_rows(vocab), version=version - 1)["grad_norm"] > 0
                with pytest.raises(ProbeMismatch):  # the generator still serves the weights before the step
                    pub.probe()
                res = pub.publish(version)
                assert res.probe_max_diff is not None and res.probe_max_diff <= 1e-4
                assert res.verify_s is not None and res.verify_s > 0  # every tensor's fingerprint compared
            finally:
                pub.close()
