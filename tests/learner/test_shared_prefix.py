"""Shared-prefix training (learner/shared_prefix.py): the prefix tree of a micro-batch, the
micro-batch plan, and the same loss and gradients as the padded forward within 1e-5 in float32,
for the GRPO loss and SFT, on Llama, Qwen2 and Qwen3 test configurations, under ZeRO 1, 2 and 3."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from areal_mem.config.learner import LearnerConfig, LossConfig
from areal_mem.learner.batch import TrainRow
from areal_mem.learner.shared_prefix import build_tree, leaf_batches, plan_rank, sorted_costs, tree_tokens
from tests.architectures import ARCHITECTURES, save


def _row(ids, prompt_len, g, adv=1.0):
    m = len(ids) - prompt_len
    mask = [0 if j % 4 == 3 else 1 for j in range(m)]  # injected tokens in the response
    behav = [(-2.0 - float(torch.rand(1, generator=g))) * k for k in mask]
    return TrainRow(list(ids), prompt_len, mask, behav, [0 if k else -1 for k in mask], [adv * k for k in mask])


def group_rows(vocab: int, seed: int = 0):
    """Two groups under one system prompt (40 tokens): each group's question (12), then each
    trajectory's turns (memory and response of random lengths); one row that shares nothing."""
    g = torch.Generator().manual_seed(seed)

    def rand(n):
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    system, rows = rand(40), []
    for q in range(2):
        question = rand(12)
        for t in range(3):
            adv = (1.0, -0.5, 0.25)[t] * (1 if q else -1)
            for turn in range(2):
                memory = rand(int(torch.randint(0, 9, (1,), generator=g))) if turn else []
                prompt = system + question + memory
                rows.append(_row(prompt + rand(int(torch.randint(4, 14, (1,), generator=g))), len(prompt), g, adv))
    rows.append(_row(rand(30), 20, g, 0.7))
    return rows


def test_tree_shares_the_system_prompt_and_each_question():
    rows = group_rows(512)
    tree = build_tree(rows, 8)
    assert tree.leaves == [12] and len(tree.children) == 1  # the lone row; the system prompt
    system = tree.children[0]
    assert (system.start, system.end) == (0, 40) and system.leaves == []
    assert [(c.start, c.end) for c in system.children] == [
        (40, 51),
        (40, 51),
    ]  # each question, to the last prompt token
    assert sorted(system.children[0].leaves + system.children[1].leaves) == list(range(12))
    unshared = sum(len(r) for r in rows)
    assert tree_tokens(rows, tree, padded=False) == unshared - 11 * 40 - 2 * 5 * 11
    # Below min_tokens a branch is recomputed in its rows: each question with the system prompt
    assert [(c.start, c.end) for c in build_tree(rows, 41).children] == [(0, 51), (0, 51)]


def test_leaves_batched_by_length():
    # one batch would pad the two short suffixes to 100 (405 tokens with its forward's 5)
    assert leaf_batches([100, 10, 95, 12], 5) == [[0, 2], [1, 3]]  # 5 + 2 x 100 + 5 + 2 x 12 = 234
    assert leaf_batches([100, 10, 95, 12], 200) == [[0, 1, 2, 3]]  # a forward costs more than padding
    assert leaf_batches([], 5) == []


def test_plan_covers_every_row_once_within_the_budget():
    rows = group_rows(512)
    _, costs = sorted_costs(rows)
    # The sorted neighbours' estimate bounds the tree from above (here by one token: a response
    # token of one row equals the first memory token of three others and sorts among them).
    assert sum(costs) == tree_tokens(rows, build_tree(rows, 1), padded=False) + 1
    for world in (1, 2, 3):
        seen = []
        for rank in range(world):
            for mb in plan_rank(rows, world, rank, 200):
                assert tree_tokens(mb, build_tree(mb, 1), padded=False) <= 200 or len(mb) == 1
                seen.extend(id(r) for r in mb)
        assert sorted(seen) == sorted(id(r) for r in rows)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("archs")
    return {a: save(a, str(root / a)) for a in ARCHITECTURES}


def _step(folder, cfg: LearnerConfig, rows, sft: bool):
    """One step's metrics and the full gradient of every parameter just before the update."""
    import deepspeed

    from areal_mem.learner.engine import LearnerEngine

    eng = LearnerEngine(folder, cfg)
    grads = {}
    step = eng.engine.step

    def capture():
        for n, p in eng.engine.module.named_parameters():
            grads[n] = deepspeed.utils.safe_get_full_grad(p).detach().clone()
        step()

    eng.engine.step = capture
    m = eng.sft_step(rows) if sft else eng.train_step(rows, version=0)
    return m, grads


CASES = [
    (arch, stage) if (arch, stage) == ("llama-gqa-tied", 2) else pytest.param(arch, stage, marks=pytest.mark.slow)
    for arch in ("llama-gqa-tied", "qwen2-gqa", "qwen3-gqa-tied")
    for stage in (1, 2, 3)
]


@pytest.mark.parametrize("arch,stage", CASES)  # ~50 s each here (four engines); one in the fast suite
def test_same_loss_and_gradients_as_unshared(arch, stage, folders):
    rows = group_rows(512)
    base = LearnerConfig(
        lr=1e-3, zero_stage=stage, micro_batch_tokens=400, loss=LossConfig(entropy_coef=0.01), shared_prefix=False
    )
    shared = dataclasses.replace(base, shared_prefix=True, shared_prefix_min_tokens=8)
    for sft in (False, True):
        m0, g0 = _step(folders[arch], base, rows, sft)
        m1, g1 = _step(folders[arch], shared, rows, sft)
        for key in ("loss", "entropy", "grad_norm") + (() if sft else ("pg_loss", "clip_frac")):
            assert m1[key] == pytest.approx(m0[key], abs=1e-5), key
        assert set(g0) == set(g1)
        assert max((g1[n] - g0[n]).abs().max().item() for n in g0) <= 1e-5
        assert max(g.abs().max().item() for g in g0.values()) > 1e-3  # the gradients are not all 0
