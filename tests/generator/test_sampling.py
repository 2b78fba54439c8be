"""Sampling rules on known distributions."""

from __future__ import annotations

import math

import torch

from areal_mem.rollout.generator.embedded.sampling import SamplingSpec, draw, sample

PROBS = torch.tensor([0.4, 0.3, 0.2, 0.1])


def _draw(spec: SamplingSpec, n: int = 4000, seeded: bool = False):
    logits = PROBS.log().repeat(n, 1)
    gens = [torch.Generator().manual_seed(i) if seeded else None for i in range(n)]
    shared = torch.Generator().manual_seed(0)
    return sample(logits, [spec] * n, gens, [()] * n, shared)


def test_truncation_rules_and_untruncated_logprobs():
    for spec, allowed in (
        (SamplingSpec(top_k=2), {0, 1}),
        (SamplingSpec(top_p=0.5), {0, 1}),
        (SamplingSpec(min_p=0.6), {0, 1}),
        (SamplingSpec(top_p=0.75), {0, 1, 2}),
        (SamplingSpec(), {0, 1, 2, 3}),
    ):
        tokens, logps = _draw(spec)
        assert set(tokens.tolist()) == allowed, spec
        # the log-prob is the token's under the full distribution (SGLang's default)
        assert torch.allclose(logps, PROBS.log()[tokens])
    tokens, _ = _draw(SamplingSpec(top_k=2))
    share = (tokens == 0).float().mean().item()
    assert abs(share - 0.4 / 0.7) < 0.04  # renormalised over the kept tokens


def test_temperature_greedy_seeds_and_bans():
    tokens, logps = _draw(SamplingSpec(temperature=0.0), n=5)
    assert tokens.tolist() == [0] * 5 and torch.allclose(logps, PROBS.log()[0].repeat(5))
    _, logps = _draw(SamplingSpec(temperature=2.0), n=1)
    hot = torch.log_softmax(PROBS.log() / 2.0, -1)
    assert any(math.isclose(logps[0].item(), v, rel_tol=1e-5) for v in hot.tolist())
    a, _ = _draw(SamplingSpec(), n=50, seeded=True)
    b, _ = _draw(SamplingSpec(), n=50, seeded=True)
    assert a.tolist() == b.tolist()  # a sampling_seed fixes the stream
    logits = PROBS.log().repeat(200, 1)
    tokens, _ = sample(logits, [SamplingSpec()] * 200, [None] * 200, [(0, 1)] * 200)
    assert set(tokens.tolist()) <= {2, 3}


def test_draw_matches_the_distribution_and_never_draws_a_zero():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(60000, 1)
    got = draw(probs, torch.Generator().manual_seed(3))
    freq = torch.bincount(got, minlength=6).double() / len(got)
    assert freq[[0, 2, 5]].tolist() == [0.0, 0.0, 0.0]
    # 60k draws: each share within ~5 standard errors (~0.01) of its probability
    assert torch.allclose(freq[[1, 3, 4]], torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64), atol=0.01)
    # unnormalised weights draw the same as their normalised distribution, stream by stream
    a = draw(probs[:50] * 7.0, torch.Generator().manual_seed(9))
    assert a.tolist() == draw(probs[:50], torch.Generator().manual_seed(9)).tolist()
