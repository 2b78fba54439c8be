"""The learner's forward computes the output head only where a loss or log-prob is read; its
values there equal a plain full-logits forward of the same model."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from areal_mem.config.learner import LearnerConfig
from areal_mem.learner.batch import TrainRow, collate
from areal_mem.learner.loss import token_logp_entropy


def test_logits_only_at_kept_positions_equal_the_full_forward(tiny_model_dir):
    from areal_mem.learner.engine import LearnerEngine

    engine = LearnerEngine(tiny_model_dir, LearnerConfig(zero_stage=2, micro_batch_tokens=256))
    rows = [
        TrainRow([5, 6, 7, 8, 9, 10], 2, [1, 0, 1, 1], [0.0] * 4, [0] * 4, [1.0] * 4),
        TrainRow([11, 12, 13], 1, [0, 1], [0.0] * 2, [0] * 2, [1.0] * 2),
    ]
    b = collate(rows)
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        full = plain(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, :-1]
        want_logp, want_ent = token_logp_entropy(full, b["labels"])
        logp, ent = engine._forward(b)
    keep = b["loss_mask"] > 0
    assert keep.sum() == 4
    assert torch.allclose(logp[keep], want_logp[keep], atol=1e-5)
    assert torch.allclose(ent[keep], want_ent[keep], atol=1e-5)
    assert (logp[~keep] == 0).all() and (ent[~keep] == 0).all()
    # logprobs() reads every response position, injected ones included
    got = engine.logprobs(rows)
    for j, r in enumerate(rows):
        s = r.prompt_len - 1
        assert got[j] == pytest.approx(want_logp[j, s : s + len(r.loss_mask)].tolist(), abs=1e-5)


def test_a_row_padded_in_a_batch_has_the_log_probs_it_has_alone(tiny_model_dir):
    """The learner's forward uses no padding mask (only the causal one): right padding must then
    leave every real position as it is without the pads, whatever the pads hold."""
    from areal_mem.learner.engine import LearnerEngine

    engine = LearnerEngine(tiny_model_dir, LearnerConfig(zero_stage=2, micro_batch_tokens=4096))
    long = TrainRow(list(range(5, 45)), 10, [1] * 30, [0.0] * 30, [0] * 30, [1.0] * 30)
    short = TrainRow([7, 9, 11, 13, 15, 17], 2, [1, 1, 0, 1], [0.0] * 4, [0] * 4, [1.0] * 4)
    b = collate([long, short])
    assert int(b["attention_mask"][1].sum()) == 6 and b["input_ids"].shape[1] == 40  # 34 pads
    b["input_ids"][1, 6:] = 42  # pads that are real tokens: a leak would change the row
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        logp, _ = engine._forward(b, keep=b["response_mask"])
        for j, r in enumerate((long, short)):
            ids = torch.tensor([r.input_ids])
            alone, _ = token_logp_entropy(plain(input_ids=ids).logits[:, :-1], ids[:, 1:])
            s = r.prompt_len - 1
            n = len(r.loss_mask)
            assert torch.allclose(logp[j, s : s + n], alone[0, s : s + n], atol=1e-5)
