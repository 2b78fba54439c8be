"""The learner on the architectures users bring (tests/architectures.py), under ZeRO 1, 2 and 3:
its chunked output head's log-probs equal a plain transformers forward within 1e-4 (tied and
untied heads, GQA, Qwen2's biases, Qwen3's q/k norms), an RL step and an SFT step are finite and
move the weights, and the weights it would push (HF names) rebuild a model that computes the
log-probs the learner computes after its step."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from areal_mem.config.learner import LearnerConfig
from areal_mem.learner.batch import TrainRow
from areal_mem.learner.loss import token_logp_entropy
from areal_mem.weight_fingerprint import fingerprints
from tests.architectures import ARCHITECTURES, save


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("archs")
    return {a: save(a, str(root / a)) for a in ARCHITECTURES}


def _rows(vocab: int, model, seed: int = 0):
    """Two rows of random tokens whose behaviour log-probs are the model's own (fresh tokens)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for n, prompt_len, adv in ((40, 12, 1.0), (23, 7, -0.5)):
        ids = torch.randint(3, vocab, (n,), generator=g).tolist()
        m = n - prompt_len
        mask = [0 if i % 5 == 4 else 1 for i in range(m)]  # some injected tokens
        rows.append(TrainRow(ids, prompt_len, mask, [0.0] * m, [0] * m, [adv] * m))
    for r in rows:
        r.behav_logp = _plain_logp(model, r)
    return rows


def _plain_logp(model, row: TrainRow):
    with torch.no_grad():
        ids = torch.tensor([row.input_ids])
        logp, _ = token_logp_entropy(model(input_ids=ids).logits[:, :-1], ids[:, 1:])
    return logp[0, row.prompt_len - 1 :].tolist()


@pytest.mark.parametrize("stage", [1, 2, 3])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_log_probs_steps_and_pushed_weights(arch, stage, folders):
    from areal_mem.learner.engine import LearnerEngine

    plain = AutoModelForCausalLM.from_pretrained(folders[arch], dtype=torch.float32).eval()
    rows = _rows(plain.config.vocab_size, plain)
    engine = LearnerEngine(folders[arch], LearnerConfig(lr=1e-2, zero_stage=stage, micro_batch_tokens=64))
    for got, r in zip(engine.logprobs(rows), rows):
        assert got == pytest.approx(r.behav_logp, abs=1e-4)

    metrics = engine.train_step(rows, version=0)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values()), metrics
    assert metrics["mismatch_token_frac"] == 1.0 and metrics["mismatch_logp_abs"] < 1e-4

    pushed = dict(engine.named_weights())
    assert set(pushed) == {n for n, _ in plain.named_parameters()}  # what a generator loads by name
    rebuilt = AutoModelForCausalLM.from_pretrained(folders[arch], dtype=torch.float32).eval()
    missing, unexpected = rebuilt.load_state_dict(pushed, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied: the embedding is the head
    assert fingerprints(list(rebuilt.named_parameters())) == fingerprints(list(pushed.items()))
    assert any(not torch.equal(p, pushed[n]) for n, p in plain.named_parameters())
    after = engine.logprobs(rows)
    for got, r in zip(after, rows):
        assert got == pytest.approx(_plain_logp(rebuilt, r), abs=1e-4)
        assert got != pytest.approx(r.behav_logp, abs=1e-4)  # the step changed them

    if stage == 2:  # SFT: the same engine, cross-entropy on the rows' model tokens falls
        nll = [engine.sft_step(rows)["nll"] for _ in range(3)]
        assert all(torch.isfinite(torch.tensor(nll))) and nll[2] < nll[0], nll
