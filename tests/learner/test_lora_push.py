"""LoRA pushes into a real embedded generator: the adapter alone moves, verified by fingerprints
and labelled with the version; the generator's behaviour log-probs on rollout requests (which name
the adapter, valid under SGLang's schema) equal the learner's; a generator without LoRA and a rank
above the generators' refuse by name, and the generator keeps serving what it served."""

import asyncio
import os

import pytest
import torch

from areal_mem.config.generator import EmbeddedConfig, GeneratorLoraConfig
from areal_mem.config.learner import LearnerConfig, LoraConfig, PublishConfig, VerifyMode
from areal_mem.generation import GeneratorError, SamplingParams
from areal_mem.learner.batch import TrainRow
from areal_mem.learner.publishers import LoraPublisher, make_publisher
from areal_mem.rollout.generator.client import GeneratorClient
from areal_mem.rollout.generator.launch import start_embedded_generator
from tests import architectures
from tests.learner._dist_worker import fixed_rows

TARGETS = ["q_proj", "v_proj", "down_proj"]
# SGLang 0.5.23's request structs of the LoRA admin routes (io_struct.py) and what they require
ADMIN = {
    "/load_lora_adapter": "LoadLoRAAdapterReqInput",
    "/unload_lora_adapter": "UnloadLoRAAdapterReqInput",
    "/update_weight_version": "UpdateWeightVersionReqInput",
}


class Checker:
    """Every request the clients send, checked against SGLang's schema: /generate by its
    published api_types, the admin bodies by the fields of their io_struct."""

    def __init__(self):
        from areal_mem.rollout.generator.sglang_schema import load_sglang_api_types
        from tests.generator._sglang_source import io_struct_fields

        self.api, self.seen = load_sglang_api_types(), []
        self.fields = {route: io_struct_fields(cls) for route, cls in ADMIN.items()}

    def request(self, route, payload):
        self.seen.append((route, payload))
        if route == "/generate":
            self.api.GenerateRequest.from_json_value(payload)
            assert payload["lora_path"] == "policy"
        elif route in self.fields:
            fields = self.fields[route]
            assert set(payload) <= set(fields), (route, payload)
            assert {k for k, default in fields.items() if default == ""} <= set(payload), (route, payload)


@pytest.fixture
def checker():
    return Checker()


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return architectures.save("llama-gqa-tied", str(tmp_path_factory.mktemp("llama")))


@pytest.fixture(scope="module")
def engine(llama_dir):
    from areal_mem.learner.engine import LearnerEngine

    lora = LoraConfig(enabled=True, rank=4, alpha=8.0, target_modules=TARGETS)
    return LearnerEngine(llama_dir, LearnerConfig(lr=2e-2, zero_stage=2, micro_batch_tokens=256, lora=lora))


def _generator(model_dir, base, lora: bool, targets=TARGETS):
    return start_embedded_generator(
        model_dir,
        EmbeddedConfig(max_batch_size=4, torch_threads=1, weights_dirs=[str(base)], device="cpu"),
        lora=GeneratorLoraConfig(enabled=True, max_rank=8, target_modules=targets) if lora else None,
    )


def _rollout(url, checker, prompts):
    async def go():
        async with GeneratorClient([url], lora_path="policy", on_request=checker.request) as c:
            sp = SamplingParams(max_new_tokens=12, temperature=1.0)
            return [await c.generate(p, sp) for p in prompts]

    return asyncio.run(go())


def _learner_logprobs(engine, prompt, res):
    n = len(res.output_ids)
    row = TrainRow(prompt + res.output_ids, len(prompt), [1] * n, [0.0] * n, [0] * n, [0.0] * n)
    return torch.tensor(engine.logprobs([row])[0])


def test_adapter_push_serves_the_learners_logprobs(engine, llama_dir, tmp_path_factory, tmp_path, checker):
    with _generator(llama_dir, tmp_path_factory.getbasetemp(), lora=True) as gen:
        client = GeneratorClient([gen.url], lora_path="policy", on_request=checker.request)  # as client_from_config
        pub = make_publisher(
            PublishConfig(kind="disk", heal=False, verify=VerifyMode.on, probe_check=True, keep_weights=2),
            engine,
            client,
            str(tmp_path),
        )
        assert isinstance(pub, LoraPublisher)
        try:
            pub.setup()  # the starting adapter (B = 0: the base) under its name
            prompts = [[5, 9, 11, 40, 7], [8, 3, 60, 12, 19, 4, 4]]
            before = _rollout(gen.url, checker, prompts[:1])[0]
            for step in (1, 2):
                m = engine.train_step(fixed_rows(engine.engine.module.config.vocab_size), version=step - 1)
                assert m["grad_norm"] > 0
                res = pub.publish(step)
                assert res.verify_s is not None and pub.verified == step
                assert res.probe_max_diff is not None and res.probe_max_diff < 1e-4
            # the adapter alone moved: rank 4 on 3 kinds of layers of 2 layers, float32
            h, i = 64, 128
            per_layer = 4 * (h + h) + 4 * (h + 32) + 4 * (i + h)  # q: 64->64, v: 64->32 (2 KV heads), down: 128->64
            assert 2 * 4 * per_layer < res.bytes < 2 * 4 * per_layer + 4096
            assert sorted(os.listdir(tmp_path / "weights")) == ["lora_start", "lora_v000001", "lora_v000002"]
            outs = _rollout(gen.url, checker, prompts)
            routes = [r for r, _ in checker.seen]
            assert routes.count("/generate") >= 3 and routes.count("/load_lora_adapter") == 3
            assert routes.count("/unload_lora_adapter") == 3 and routes.count("/update_weight_version") == 2
            for prompt, out in zip(prompts, outs):
                assert set(out.versions) == {2}
                diff = (torch.tensor(out.logprobs) - _learner_logprobs(engine, prompt, out)).abs()
                assert float(diff.mean()) < 1e-3 and float(diff.max()) < 1e-4
            # and the adapter matters: the log-probs of the first rollout's tokens moved
            moved = (torch.tensor(before.logprobs) - _learner_logprobs(engine, prompts[0], before)).abs()
            assert float(moved.max()) > 1e-3
        finally:
            pub.close()


def test_generator_without_lora_refuses_the_push_by_name(engine, llama_dir, tmp_path_factory, tmp_path):
    with _generator(llama_dir, tmp_path_factory.getbasetemp(), lora=False) as gen:
        pub = LoraPublisher(engine, GeneratorClient([gen.url]), str(tmp_path / "weights"), PublishConfig(heal=False))
        try:
            with pytest.raises(GeneratorError, match="LoRA is not enabled"):
                pub.setup()
        finally:
            pub.close()

        async def version():
            async with GeneratorClient([gen.url]) as c:
                return await c.weight_versions()

        assert asyncio.run(version()) == {gen.url: 0}


def test_rank_above_the_generators_refused_by_name():
    from areal_mem.config import ConfigError, load_run

    with pytest.raises(ConfigError, match="learner.lora.rank 32 is above generator.lora.max_rank 16"):
        load_run(
            overrides=[
                "model.path=m",
                "learner.lora.enabled=true",
                "learner.lora.rank=32",
                "generator.lora.max_rank=16",
            ]
        )
    with pytest.raises(ConfigError, match="learner.lora.rank"):
        load_run(overrides=["model.path=m", "learner.lora.enabled=true", "learner.lora.rank=0"])
    cfg = load_run(overrides=["model.path=m", "learner.lora.enabled=true", "learner.lora.rank=16"])
    assert (cfg.generator.lora.enabled, cfg.generator.lora.max_rank, cfg.generator.lora.adapter) == (True, 16, "policy")


SMOLLM2 = "/work/models/smollm2"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(SMOLLM2), reason="SmolLM2-135M-Instruct is not imported at /work/models/smollm2")
def test_smollm2_adapter_push_behaviour_logprobs(tmp_path_factory, tmp_path, checker):
    """The same on SmolLM2-135M-Instruct: mean |behaviour - learner| < 1e-3 in float32 through a push."""
    from areal_mem.learner.engine import LearnerEngine

    targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
    lora = LoraConfig(enabled=True, rank=8, alpha=16.0, target_modules=targets)
    engine = LearnerEngine(SMOLLM2, LearnerConfig(lr=1e-3, zero_stage=2, micro_batch_tokens=2048, lora=lora))
    with _generator(SMOLLM2, tmp_path_factory.getbasetemp(), lora=True, targets=targets) as gen:
        client = GeneratorClient([gen.url], lora_path="policy", on_request=checker.request)
        pub = make_publisher(PublishConfig(heal=False, verify=VerifyMode.on), engine, client, str(tmp_path))
        try:
            pub.setup()
            assert engine.train_step(fixed_rows(engine.engine.module.config.vocab_size), version=0)["grad_norm"] > 0
            pub.publish(1)
            prompts = [[1, 504, 3458, 314, 253, 3073], [1, 28, 6601, 260, 16013, 288]]
            for prompt, out in zip(prompts, _rollout(gen.url, checker, prompts)):
                assert set(out.versions) == {1}
                diff = (torch.tensor(out.logprobs) - _learner_logprobs(engine, prompt, out)).abs()
                assert float(diff.mean()) < 1e-3, float(diff.mean())
        finally:
            pub.close()
