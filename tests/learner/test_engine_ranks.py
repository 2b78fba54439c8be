"""2 ranks with ZeRO-2 == 1 rank: same loss, same updated weights (CPU, gloo)."""
import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def _run(ranks, tiny_model_dir, tmp_path, nproc, stage, mini):
    prefix = str(tmp_path / f"r{nproc}_z{stage}_m{mini}")
    ranks("_dist_worker.py", nproc, tiny_model_dir, prefix, stage, mini)
    with open(prefix + ".json") as f:
        return json.load(f), load_file(prefix + ".safetensors")


@pytest.mark.parametrize("mini", [1, 2])
def test_two_ranks_zero2_equal_one_rank(ranks, tiny_model_dir, tmp_path, mini):
    m1, w1 = _run(ranks, tiny_model_dir, tmp_path, 1, 2, mini)
    m2, w2 = _run(ranks, tiny_model_dir, tmp_path, 2, 2, mini)
    init = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    assert m1["n_tokens"] == m2["n_tokens"] > 0
    if mini == 1:  # the DeepSpeed loss is the plain token-mean over all contexts
        assert m1["loss"] == pytest.approx(m1["expected_loss"], abs=1e-5)
    assert m2["loss"] == pytest.approx(m1["loss"], abs=1e-5)
    assert m2["grad_norm"] == pytest.approx(m1["grad_norm"], rel=1e-4)
    assert set(w1) == set(w2)
    moved = 0.0
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], atol=2e-5, rtol=1e-4, msg=name)
        moved = max(moved, (w1[name] - init[name]).abs().max().item())
    assert moved > 1e-4  # the step did change the weights


@pytest.mark.slow
def test_two_ranks_zero3_equal_one_rank_zero2(ranks, tiny_model_dir, tmp_path):
    """ZeRO-3 partitions the parameters too; the gathered weights must still match."""
    m1, w1 = _run(ranks, tiny_model_dir, tmp_path, 1, 2, 1)
    m3, w3 = _run(ranks, tiny_model_dir, tmp_path, 2, 3, 1)
    assert m3["loss"] == pytest.approx(m1["loss"], abs=1e-5)
    for name in w1:
        torch.testing.assert_close(w3[name], w1[name], atol=2e-5, rtol=1e-4, msg=name)
