"""The embedded engine on the architectures users bring (tests/architectures.py): KV cache,
batching, rows joining a running batch, the prefix cache and weight loads give log-probs equal
to a teacher-forced transformers forward within 1e-4, for tied and untied heads and GQA."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from areal_mem.rollout.generator.embedded.engine import Engine, Request
from areal_mem.rollout.generator.embedded.sampling import SamplingSpec
from areal_mem.weight_fingerprint import fingerprints
from tests.architectures import ARCHITECTURES, build


def _submit(engine, prompts, n, seed, tag, done):
    reqs = []
    for i, p in enumerate(prompts):
        g = torch.Generator().manual_seed(seed + i)
        reqs.append(Request(f"{tag}{i}", p, SamplingSpec(max_new_tokens=n, ignore_eos=True), done, generator=g))
        engine.submit(reqs[-1])
    return reqs


class Done:
    def __init__(self):
        self.n, self.lock, self.event, self.want = 0, threading.Lock(), threading.Event(), 0

    def __call__(self, req):
        with self.lock:
            self.n += 1
            if self.n == self.want:
                self.event.set()


def _check(model, reqs, h):
    for r in reqs:
        assert r.error is None and len(r.output_ids) == r.spec.max_new_tokens
        ref = h.teacher_forced_logprobs(model, r.prompt_ids, r.output_ids)
        assert torch.allclose(torch.tensor(r.logprobs), ref, atol=1e-4), (r.rid, r.logprobs[:3], ref[:3].tolist())


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_batches_joins_prefix_cache_and_weight_loads_are_exact(arch, h):
    model = build(arch)
    vocab = model.config.vocab_size
    e = Engine(build(arch), eos_ids=[2], max_batch_size=8, max_context_len=512, prefix_cache_tokens=2048).start()
    try:
        done = Done()
        done.want = 7
        first = _submit(e, h.make_prompts(4, vocab, seed=1), 40, 10, "a", done)
        while e.steps < 4:  # the batch is decoding when the next ones join it
            time.sleep(0.002)
        later = _submit(e, h.make_prompts(3, vocab, seed=2, lo=30, hi=40), 12, 20, "b", done)
        assert done.event.wait(120)
        assert e.stats()["joins"] >= 1
        _check(model, first + later, h)

        # a continued context (MemSearcher's memory request) prefills only its suffix, exactly
        before = e.stats()["prefix_hit_tokens"]
        done = Done()
        done.want = 1
        cont = _submit(e, [first[0].prompt_ids + first[0].output_ids + [5, 6, 7]], 10, 30, "c", done)
        assert done.event.wait(60)
        assert e.stats()["prefix_hit_tokens"] - before == len(first[0].prompt_ids) + len(first[0].output_ids) - 1
        _check(model, cont, h)

        # new weights under the learner's names (no lm_head.weight where the head is tied)
        other = build(arch, seed=1)
        named = list(other.named_parameters())
        e.load_weights([(n, p.detach()) for n, p in named], "1", complete=True)
        assert fingerprints([(n, p.detach()) for n, p in e.model.named_parameters()]) == fingerprints(
            [(n, p.detach()) for n, p in named]
        )
        done = Done()
        done.want = 3
        after = _submit(e, h.make_prompts(3, vocab, seed=3), 16, 40, "d", done)
        assert done.event.wait(120)
        _check(other, after, h)
    finally:
        e.stop()
