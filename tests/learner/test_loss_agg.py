"""`learner.loss_agg` by hand, and the train/inference mismatch metrics against real generators
(the tiny model's own server, then a deliberately perturbed copy of it)."""

import asyncio
import math
import shutil
from dataclasses import replace

import pytest
import torch

from areal_mem.config.generator import EmbeddedConfig
from areal_mem.config.learner import LearnerConfig, LossAgg, LossConfig
from areal_mem.generation import SamplingParams
from areal_mem.learner.batch import TrainRow, rows_from_groups
from areal_mem.rollout.generator.client import GeneratorClient
from areal_mem.rollout.generator.launch import start_embedded_generator
from areal_mem.trajectory import Context, Group, Trajectory

# lr 0: the weights never move, so every step sees the log-probs the behaviour ones were read at.
FROZEN = LearnerConfig(lr=0.0, weight_decay=0.0, zero_stage=2, micro_batch_tokens=256, loss=LossConfig(entropy_coef=0))


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from areal_mem.learner.engine import LearnerEngine

    return LearnerEngine(tiny_model_dir, FROZEN)


def _context(engine, ids, prompt_len, mask, version=0):
    """A context whose behaviour log-probs are the learner's own: every weight and ratio is 1."""
    row = TrainRow(ids, prompt_len, mask, [0.0] * len(mask), [0] * len(mask), [0.0] * len(mask))
    logp = engine.logprobs([row])[0]
    return Context(ids, prompt_len, mask, [lp * m for lp, m in zip(logp, mask)], [version if m else -1 for m in mask])


def _group(engine):
    # Trajectory a: two contexts, 2 and 3 model tokens (one injected); b: one context, 3 tokens.
    a = Trajectory(
        "a",
        [_context(engine, [5, 6, 7, 8], 2, [1, 1]), _context(engine, [9, 10, 11, 12, 13, 14], 2, [1, 0, 1, 1])],
        reward=1.0,
    )
    b = Trajectory("b", [_context(engine, [15, 16, 17, 18], 1, [1, 1, 1])], reward=0.0)
    return Group("q", [a, b])


def test_loss_aggregation_modes_by_hand(engine):
    # Rewards 1, 0: A = +-0.5 / (std + 1e-6) with std = sqrt(0.5). With ratio and weight 1 and no
    # entropy term every model token's loss is -A: -A_a on a's 5 tokens, +A_a on b's 3.
    adv = 0.5 / (math.sqrt(0.5) + 1e-6)
    want = {
        LossAgg.token_mean: (5 * -adv + 3 * adv) / 8,  # tokens pooled: a's 5 tokens outweigh b's 3
        LossAgg.trajectory_mean: (-adv + adv) / 2,  # each trajectory's token-mean, then their mean
        LossAgg.context_mean: (-adv - adv + adv) / 3,  # each context's token-mean, then their mean
    }
    group = _group(engine)
    for agg, loss in want.items():
        rows = rows_from_groups([group], agg=agg)
        assert sum(r.loss_units for r in rows) == pytest.approx({"token_mean": 8, "trajectory_mean": 2}.get(agg, 3))
        m = engine.train_step(rows, version=0)
        assert m["loss"] == pytest.approx(loss, abs=1e-5), agg
        assert m["pg_loss"] == pytest.approx(want[LossAgg.token_mean], abs=1e-5)  # statistics stay token-means
        assert m["n_tokens"] == 8
        assert m["mismatch_token_frac"] == 1.0 and m["mismatch_logp_abs"] < 1e-6


def test_row_weights_travel_to_every_rank_and_default_to_tokens():
    row = TrainRow([1, 2, 3], 1, [1, 1], [0.0, 0.0], [0, 0], [1.0, 1.0])
    assert row.loss_weight == 1.0 and row.loss_units == 2
    g = Group("g", [Trajectory("t", [Context([1, 2, 3], 1, [1, 1], [0.0, 0.0], [0, 0])], reward=1.0)])
    assert [r.loss_weight for r in rows_from_groups([g], agg=LossAgg.context_mean)] == [0.5]


async def _sample(url, prompts):
    async with GeneratorClient([url]) as c:
        params = SamplingParams(max_new_tokens=12, temperature=1.0, ignore_eos=True, sampling_seed=7)
        return await asyncio.gather(
            *(c.generate(p, replace(params, sampling_seed=7 + i)) for i, p in enumerate(prompts))
        )


def _rows(results, prompts):
    return [
        TrainRow(p + r.output_ids, len(p), [1] * len(r.output_ids), r.logprobs, r.versions, [1.0] * len(r.output_ids))
        for p, r in zip(prompts, results)
    ]


def _perturbed_copy(model_dir, out, scale):
    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, out)
    path = f"{out}/model.safetensors"
    g = torch.Generator().manual_seed(0)
    weights = load_file(path)
    save_file({k: v + scale * torch.randn(v.shape, generator=g) for k, v in weights.items()}, path)
    return str(out)


def test_mismatch_metrics_rise_with_a_perturbed_generator(engine, tiny_model_dir, tmp_path):
    prompts = [[3 + i, 40 + i, 77, 12 + 2 * i] for i in range(6)]
    embedded = EmbeddedConfig(max_batch_size=8, torch_threads=1, device="cpu")
    noisy_dir = _perturbed_copy(tiny_model_dir, tmp_path / "noisy", 0.2)
    metrics = {}
    for name, model_dir in (("same", tiny_model_dir), ("perturbed", noisy_dir)):
        with start_embedded_generator(model_dir, embedded) as gen:
            rows = _rows(asyncio.run(_sample(gen.url, prompts)), prompts)
        metrics[name] = engine.train_step(rows, version=0)
        # Tokens of another version are staleness, not engine mismatch: none counted.
        stale = engine.train_step(rows, version=1)
        assert stale["mismatch_token_frac"] == 0.0 and "mismatch_logp_abs" not in stale
    same, bad = metrics["same"], metrics["perturbed"]
    for name, m in metrics.items():  # the README's figures: pytest -s -k perturbed
        print(name, {k: round(v, 9) for k, v in m.items() if k.startswith("mismatch")})
    assert same["mismatch_token_frac"] == 1.0 and bad["mismatch_token_frac"] == 1.0
    assert same["mismatch_logp_abs"] < 1e-4 and abs(same["mismatch_kl_seq"]) < 1e-3
    assert same["mismatch_capped_frac"] == 0.0
    assert bad["mismatch_logp_abs"] > 100 * max(same["mismatch_logp_abs"], 1e-6)
    # k1 estimate of KL(generator || learner) per sequence, on the generator's own samples: > 0
    assert bad["mismatch_kl_seq"] > 1.0
    assert bad["mismatch_capped_frac"] > 0.0  # tokens the learner finds > 5x likelier
