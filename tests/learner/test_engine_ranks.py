"""2 ranks with ZeRO-2 == 1 rank: same loss, same updated weights (CPU, gloo)."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def _run(ranks, model_dir, tmp_path, nproc, stage, minis):
    prefix = str(tmp_path / f"r{nproc}_z{stage}")
    out = {}
    for mini in minis:
        ranks("_dist_worker.py", nproc, model_dir, prefix, stage, mini)
        with open(f"{prefix}_m{mini}.json") as f:
            out[mini] = json.load(f), load_file(f"{prefix}_m{mini}.safetensors")
    return out


def _same(one, two, init):
    (m1, w1), (m2, w2) = one, two
    assert m1["n_tokens"] == m2["n_tokens"] > 0
    assert m2["loss"] == pytest.approx(m1["loss"], abs=1e-5)
    assert m2["grad_norm"] == pytest.approx(m1["grad_norm"], rel=1e-4)
    assert set(w1) == set(w2)
    moved = 0.0
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], atol=2e-5, rtol=1e-4, msg=name)
        moved = max(moved, (w1[name] - init[name]).abs().max().item())
    assert moved > 1e-4  # the step did change the weights


def test_two_ranks_zero2_equal_one_rank(ranks, tiny_model_dir, tmp_path):
    """One mini-batch (one update) and two mini-batches (two updates, decoupled ratio != 1)."""
    one = _run(ranks, tiny_model_dir, tmp_path, 1, 2, [1, 2])
    two = _run(ranks, tiny_model_dir, tmp_path, 2, 2, [1, 2])
    # The DeepSpeed loss is the plain token-mean over all contexts of the batch.
    assert one[1][0]["loss"] == pytest.approx(one[1][0]["expected_loss"], abs=1e-5)
    init = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    for mini in (1, 2):
        _same(one[mini], two[mini], init)


@pytest.mark.slow
def test_two_ranks_zero3_equal_one_rank_zero2(ranks, tiny_model_dir, tmp_path):
    """ZeRO-3 partitions the parameters too; the gathered weights must still match."""
    one = _run(ranks, tiny_model_dir, tmp_path, 1, 2, [1])
    three = _run(ranks, tiny_model_dir, tmp_path, 2, 3, [1])
    init = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    _same(one[1], three[1], init)
