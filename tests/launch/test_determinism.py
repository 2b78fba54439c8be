"""The same seed gives the same run: two `areal-mem train` runs of the tiny debug recipe in
synchronous mode (`buffer.max_staleness=0`), the second under another Python hash seed, train on
the same data: identical demonstrations, SFT weights bit for bit, the same episodes (tokens,
rewards, advantages, token counts: equal), and RL weights and loss statistics equal to the
generator's last bits.

What makes it so: the world, tokenizer and model are built from the seed; the oracle draws its
mistakes per request; SFT shuffles with the seed; every generation request carries a sampling
seed derived from the run seed and its request id (`rollout.seeded_sampling`), so tokens do not
depend on which requests shared a batch; the learner trains a batch in group-id order, not
arrival order. What is left is the generator's arithmetic: a behaviour log-prob computed inside
a batch of another shape differs in the last bits (about 1e-8). It enters the behaviour weight
exp(prox - behav) and through it the loss and the gradient, so those are compared to 1e-5 and
the RL weights to 1e-6 (they were bit-identical in the runs measured, not always: one CI run
saw behav_weight 0.99999992 against 1.0). The statistics of the gap between the learner's and
the generator's log-probs (its mean absolute value per token, its sum per sequence, and the
KL estimate against the behaviour policy) are that arithmetic itself: their values are last-bit
noise (about 1e-7) and two runs may differ by as much as they measure (one CI run: a per
sequence sum of 3.6e-7 against -7.2e-7). They are held to 1e-5 absolute, which still fails on
any real mismatch (a different token or model moves them by 1e-2 and more). Asynchronous runs (max_staleness > 0) are not
repeatable: which episodes finish before a weight push is timing (docs/debug_recipe.md)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from .conftest import TinyTrain

SYNC = [
    "buffer.max_staleness=0",
    "learner.steps=3",
    "learner.sft.warm_start=true",
    "learner.sft.oracle_questions=16",
    "learner.sft.threads=2",
]
TIMING = ("_s", "tokens_per_s")
# learner statistics that the behaviour log-probs (the generator's arithmetic) reach
NUMERICS = (
    "behav_weight",
    "loss",
    "pg_loss",
    "grad_norm",
    "entropy",
    "ratio",
)
# learner minus generator log-probs: pure last-bit noise when both run the same weights
MISMATCH = ("approx_kl_behav", "mismatch_logp_abs", "mismatch_kl_seq")


def max_weight_diff(a, b) -> float:
    from safetensors.torch import load_file

    x, y = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert x.keys() == y.keys()
    return max(float((x[k].float() - y[k].float()).abs().max()) for k in x)


def weights(folder) -> str:
    digest = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            with open(os.path.join(folder, name), "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()


def train_rows(run_dir):
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r["kind"] in ("train", "sft")]


def test_two_synchronous_runs_with_one_seed_are_the_same(tmp_path):
    runs = [TinyTrain(tmp_path / "a"), TinyTrain(tmp_path / "b")]
    for run, hash_seed in zip(runs, ("1", "2")):
        code, out = run.run(*SYNC, env={"PYTHONHASHSEED": hash_seed})
        assert code == 0, out[-4000:]
    a, b = (r.run_dir for r in runs)
    assert (a / "sft" / "demos.jsonl").read_bytes() == (b / "sft" / "demos.jsonl").read_bytes()
    assert weights(a / "sft" / "model") == weights(b / "sft" / "model")
    assert max_weight_diff(a / "final", b / "final") <= 1e-6
    rows_a, rows_b = train_rows(a), train_rows(b)
    assert [r["step"] for r in rows_a] == [r["step"] for r in rows_b] and len(rows_a) >= 4
    for x, y in zip(rows_a, rows_b):
        assert x.keys() == y.keys()
        for key in x:
            if key.endswith(TIMING) or key in ("time", "wall_time"):
                continue
            if x["kind"] == "train" and key in NUMERICS:
                assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-6), (x["step"], key)
            elif x["kind"] == "train" and key in MISMATCH:
                assert abs(x[key] - y[key]) <= 1e-5, (x["step"], key, x[key], y[key])
            else:
                assert x[key] == y[key], (x["step"], key, x[key], y[key])
