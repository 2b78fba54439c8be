"""The embedded engine's prefix cache: a prompt that extends a finished sequence (MemSearcher's
memory request extends its action's context) or shares the system prompt prefills only its
suffix, with the log-probs of a cold prefill; any weight change empties it."""

from __future__ import annotations

import threading
import time

import torch

from areal_mem.rollout.generator.embedded.engine import Engine, Request
from areal_mem.rollout.generator.embedded.prefix_cache import PrefixCache
from areal_mem.rollout.generator.embedded.sampling import SamplingSpec


def _run(engine, prompts, n=12, seed=5):
    """Generate for each prompt (together), return the finished requests in order."""
    done, event = {}, threading.Event()

    def finish(req):
        done[req.rid] = req
        if len(done) == len(prompts):
            event.set()

    reqs = []
    for i, p in enumerate(prompts):
        g = torch.Generator()
        g.manual_seed(seed + i)
        reqs.append(Request(f"q{seed}-{i}", p, SamplingSpec(max_new_tokens=n, ignore_eos=True), finish, generator=g))
    for r in reqs:
        engine.submit(r)
    assert event.wait(60)
    return reqs


def test_a_continued_context_prefills_only_its_suffix_with_cold_log_probs(ref_model, h):
    e = Engine(ref_model, eos_ids=[2], max_batch_size=8, max_context_len=4096, prefix_cache_tokens=4096).start()
    try:
        system = h.make_prompts(1, ref_model.config.vocab_size, seed=30, lo=40, hi=41)[0]  # a shared 40-token head
        questions = h.make_prompts(3, ref_model.config.vocab_size, seed=31, lo=6, hi=10)
        [action] = _run(e, [system + questions[0]])
        before = e.stats()
        tool = [5, 6, 7, 8, 9]
        memory_prompt = action.prompt_ids + action.output_ids + tool  # the memory request
        others = [system + q for q in questions[1:]]  # later contexts: same system prompt
        reqs = _run(e, [memory_prompt, *others], seed=9)
        after = e.stats()
        hits = [len(action.prompt_ids) + len(action.output_ids) - 1, len(system), len(system)]
        assert after["prefix_hit_tokens"] - before["prefix_hit_tokens"] == sum(hits)
        computed = sum(len(r.prompt_ids) for r in reqs) - sum(hits)
        assert after["prefill_tokens"] - before["prefill_tokens"] == computed
        for r in reqs:  # as if prefilled cold
            ref = h.teacher_forced_logprobs(ref_model, r.prompt_ids, r.output_ids)
            assert torch.allclose(torch.tensor(r.logprobs), ref, atol=1e-4)
        # a weight load (the same weights) empties it: the same prompt is prefilled cold again
        e.load_weights(list(ref_model.state_dict().items()), "1", complete=False)
        assert e.stats()["prefix_cache_tokens"] == 0
        before = e.stats()
        _run(e, [memory_prompt], seed=11)
        assert e.stats()["prefix_hit_tokens"] == before["prefix_hit_tokens"]
        assert e.flush_prefix_cache() > 0 and e.stats()["prefix_cache_tokens"] == 0
    finally:
        e.stop()


def test_off_by_default_and_a_prompt_equal_to_a_stored_sequence_still_computes_its_last_token(ref_model, h):
    e = Engine(ref_model, eos_ids=[2], max_batch_size=8, max_context_len=4096).start()
    try:
        prompt = h.make_prompts(1, ref_model.config.vocab_size, seed=40, lo=30, hi=31)[0]
        _run(e, [prompt])
        _run(e, [prompt])
        assert e.stats()["prefix_hit_tokens"] == 0 and e.stats()["prefill_tokens"] == 2 * len(prompt)
    finally:
        e.stop()
    cache = PrefixCache(max_tokens=100, min_hit=4)
    layers = [(torch.zeros(2, 30, 8), torch.ones(2, 30, 8))]
    cache.insert(list(range(30)), layers)
    n, got = cache.lookup(list(range(30)))
    assert n == 29 and got[0][0].shape == (2, 29, 8)  # the last token is prefilled for its logits
    assert cache.lookup(list(range(3)) + [99] * 10) == (0, [])  # below min_hit
    cache.insert(list(range(20)), layers)  # a prefix of a stored sequence adds nothing
    assert len(cache) == 1 and cache.tokens == 30
    cache.insert(list(range(40)), [(torch.zeros(2, 40, 8), torch.ones(2, 40, 8))])  # extends it: replaces it
    assert len(cache) == 1 and cache.tokens == 40
    cache.insert([7] * 70, [(torch.zeros(2, 70, 8), torch.ones(2, 70, 8))])  # over budget: the oldest goes
    assert cache.tokens == 70 and cache.lookup(list(range(40)))[0] == 0


def test_rows_kept_running_across_a_weight_load_leave_no_prefix(ref_model, h):
    """pause(in_place) keeps rows running through a weight load; their KV mixes two versions,
    so it must not become a prefix of the new weights."""
    e = Engine(ref_model, eos_ids=[2], max_batch_size=8, max_context_len=4096, prefix_cache_tokens=4096).start()
    try:
        prompt = h.make_prompts(1, ref_model.config.vocab_size, seed=50, lo=30, hi=31)[0]
        done, event = [], threading.Event()
        g = torch.Generator()
        g.manual_seed(1)
        req = Request(
            "kept",
            prompt,
            SamplingSpec(max_new_tokens=200, ignore_eos=True),
            lambda r: (done.append(r), event.set()),
            generator=g,
        )
        e.submit(req)
        while len(req.output_ids) < 3:
            time.sleep(0.005)
        e.pause("in_place")
        e.load_weights(list(ref_model.state_dict().items()), "1", complete=False)
        e.resume()
        assert event.wait(60) and req.spans[-1][0] == "1"  # finished under the new version
        assert e.stats()["prefix_cache_tokens"] == 0
        _run(e, [prompt])  # a row begun under the current weights is stored
        assert e.stats()["prefix_cache_tokens"] > 0
    finally:
        e.stop()
