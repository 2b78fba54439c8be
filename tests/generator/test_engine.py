"""The batching engine in-process: requests share decode steps, join a running batch, survive
a retract, and stop at eos."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from areal_mem.rollout.generator.embedded.engine import Engine, Request, WeightLoadError, compaction
from areal_mem.rollout.generator.embedded.sampling import SamplingSpec


class Collector:
    def __init__(self, n):
        self.done, self.n, self.event = {}, n, threading.Event()

    def __call__(self, req):
        self.done[req.rid] = req
        if len(self.done) == self.n:
            self.event.set()


@pytest.fixture
def engine(ref_model):
    e = Engine(ref_model, eos_ids=[2], max_batch_size=16, max_context_len=4096).start()
    yield e
    e.stop()


N = 200  # tokens per request: enough steps that a busy CPU cannot finish them before we look


def _req(rid, prompt, done, n=30, seed=None, **kw):
    g = torch.Generator()
    g.manual_seed(seed if seed is not None else hash(rid) % 1000)
    return Request(rid, prompt, SamplingSpec(max_new_tokens=n, ignore_eos=True, **kw), done, generator=g)


def test_requests_share_steps_and_join_a_running_batch(engine, ref_model, h):
    prompts = h.make_prompts(12, ref_model.config.vocab_size, seed=10)
    col = Collector(12)
    before = engine.stats()
    for i, p in enumerate(prompts[:8]):
        engine.submit(_req(str(i), p, col, n=N))
    while engine.steps < 5:
        time.sleep(0.005)
    joined_at = engine.steps
    for i, p in enumerate(prompts[8:], start=8):
        engine.submit(_req(str(i), p, col, n=N))
    assert col.event.wait(120)
    assert all(len(r.output_ids) == N for r in col.done.values())
    # 12 requests x N tokens in about N + joined_at steps, not 12 N: they decode together,
    # and the late four joined while the first eight were still running.
    assert joined_at < N
    assert engine.steps <= N + joined_at + 3, engine.steps
    after = engine.stats()  # every prompt token prefilled once (none padded), every token decoded
    assert after["prefill_tokens"] - before["prefill_tokens"] == sum(map(len, prompts))
    assert after["tokens"] - before["tokens"] == 12 * N
    assert after["decode_rows"] - before["decode_rows"] == 12 * (N - 1)
    for i, p in enumerate(prompts):
        r = col.done[str(i)]
        ref = h.teacher_forced_logprobs(ref_model, p, r.output_ids)
        assert torch.allclose(torch.tensor(r.logprobs), ref, atol=1e-4)


def test_rows_that_leave_are_replaced_by_the_last_rows_and_every_row_stays_exact(engine, ref_model, h):
    # slot i of the kept batch takes row order[i]: only rows past the kept count move
    assert compaction([0, 2, 3, 5, 6]) == [0, 5, 2, 3, 6]
    assert compaction([1, 2]) == [2, 1] and compaction([4]) == [4] and compaction([0, 1, 2]) == [0, 1, 2]
    # rows of many lengths leave one by one from the middle of the batch while others join
    prompts = h.make_prompts(10, ref_model.config.vocab_size, seed=12)
    lengths = [7, 40, 13, 3, 29, 18, 9, 33, 5, 21]
    col = Collector(10)
    for i, p in enumerate(prompts[:6]):
        engine.submit(_req(str(i), p, col, n=lengths[i]))
    while engine.steps < 4:
        time.sleep(0.005)
    for i, p in enumerate(prompts[6:], start=6):
        engine.submit(_req(str(i), p, col, n=lengths[i]))
    assert col.event.wait(120)
    for i, p in enumerate(prompts):
        r = col.done[str(i)]
        assert len(r.output_ids) == lengths[i]
        ref = h.teacher_forced_logprobs(ref_model, p, r.output_ids)
        assert torch.allclose(torch.tensor(r.logprobs), ref, atol=1e-4)


def test_rows_no_wider_than_the_batch_join_in_its_spare_rows_and_stay_exact(engine, ref_model, h):
    """A joiner at most as long as the running batch is written into the buffers' spare rows
    (the running rows are not copied); a longer one copies every row into wider buffers. Both
    sample exactly what the model gives their whole sequence."""
    vocab = ref_model.config.vocab_size
    long = h.make_prompts(6, vocab, seed=13, lo=60, hi=70)
    short = h.make_prompts(4, vocab, seed=14, lo=4, hi=20)
    longer = h.make_prompts(1, vocab, seed=15, lo=300, hi=301)
    col = Collector(11)
    start = engine.steps
    for i, p in enumerate(long):
        engine.submit(_req(f"l{i}", p, col, n=N))
    while engine.steps < start + 5 or engine.in_flight() < 6:
        time.sleep(0.005)
    before = engine.stats()
    for i, p in enumerate(short):
        engine.submit(_req(f"s{i}", p, col, n=20))
    while sum(r.startswith("s") for r in col.done) < 4:
        time.sleep(0.005)
    joined = engine.stats()
    assert joined["joins"] > before["joins"] and joined["join_copies"] == before["join_copies"]
    engine.submit(_req("x", longer[0], col, n=5))
    assert col.event.wait(120)
    assert engine.stats()["join_copies"] == joined["join_copies"] + 1
    prompts = {**{f"l{i}": p for i, p in enumerate(long)}, **{f"s{i}": p for i, p in enumerate(short)}, "x": longer[0]}
    for rid, p in prompts.items():
        r = col.done[rid]
        ref = h.teacher_forced_logprobs(ref_model, p, r.output_ids)
        assert torch.allclose(torch.tensor(r.logprobs), ref, atol=1e-4), rid


def test_kv_append_places_rows_as_merge_does_or_writes_nothing():
    from areal_mem.rollout.generator.embedded import kv_cache

    g = torch.Generator().manual_seed(0)

    def cache(rows, n):  # two layers, 2 heads, head dim 3
        c = kv_cache.empty_cache(2)
        for layer in c.layers:
            layer.update(torch.randn(rows, 2, n, 3, generator=g), torch.randn(rows, 2, n, 3, generator=g))
        return c

    running, a, b = cache(3, 9), cache(2, 4), cache(1, 9)
    merged = kv_cache.merge([(running, 0), (a, 5), (b, 0)])
    base = kv_cache.merge([(running, 0)])  # 3 rows + 8 spare
    buffer = base.layers[0]._k
    base.layers[0]._k[3:].fill_(7.0)  # whatever an earlier row left in the spare rows
    assert kv_cache.append(base, [(a, 4), (b, 9)])
    assert base.layers[0]._k is buffer and base.layers[0].rows == 6
    for got, want in zip(base.layers, merged.layers):
        assert torch.equal(got.keys, want.keys) and torch.equal(got.values, want.values)
    assert not kv_cache.append(base, [(cache(1, 10), 10)])  # wider than the batch
    assert not kv_cache.append(base, [(cache(6, 2), 2)])  # 6 + 6 rows > 11
    assert base.layers[0].rows == 6 and torch.equal(base.layers[1].keys, merged.layers[1].keys)


def test_retract_requeues_and_finishes_exactly(engine, ref_model, h):
    prompts = h.make_prompts(4, ref_model.config.vocab_size, seed=11)
    col = Collector(4)
    start = engine.steps  # the engine is shared by the module's tests
    for i, p in enumerate(prompts):
        engine.submit(_req(str(i), p, col, n=N))
    while engine.steps < start + 10:
        time.sleep(0.005)
    seen = engine.steps
    assert engine.pause("retract") == 4
    held = engine.steps
    # The pause gets in between two steps, not after the batch (N steps) finishes.
    assert held < seen + N // 4, (seen, held)
    time.sleep(0.1)
    assert engine.steps == held and not col.done  # nothing runs while paused
    engine.resume()
    assert col.event.wait(60)
    for i, p in enumerate(prompts):
        r = col.done[str(i)]
        assert len(r.output_ids) == N and r.spans == [["0", 0, N]]
        ref = h.teacher_forced_logprobs(ref_model, p, r.output_ids)
        assert torch.allclose(torch.tensor(r.logprobs), ref, atol=1e-4)


def test_eos_stops_unless_ignored(ref_model, h):
    prompt = h.make_prompts(1, ref_model.config.vocab_size, seed=12)[0]
    with torch.no_grad():
        first = int(ref_model(torch.tensor([prompt])).logits[0, -1].argmax())
    e = Engine(ref_model, eos_ids=[first], max_batch_size=4, max_context_len=4096).start()
    try:
        col = Collector(2)
        e.submit(Request("eos", prompt, SamplingSpec(max_new_tokens=5, temperature=0.0), col))
        e.submit(Request("ign", prompt, SamplingSpec(max_new_tokens=5, temperature=0.0, ignore_eos=True), col))
        assert col.event.wait(30)
    finally:
        e.stop()
    assert col.done["eos"].output_ids == [first]
    assert col.done["eos"].finish == {"type": "stop", "matched": first}
    assert len(col.done["ign"].output_ids) == 5 and col.done["ign"].finish["type"] == "length"


def test_context_limit_and_weight_checks(ref_model, h):
    e = Engine(ref_model, eos_ids=[2], max_batch_size=4, max_context_len=20).start()
    try:
        col = Collector(1)
        e.submit(Request("ctx", list(range(5, 17)), SamplingSpec(max_new_tokens=50, ignore_eos=True), col))
        assert col.event.wait(30)
        assert col.done["ctx"].finish == {"type": "length", "length": 8}  # 12 + 8 = 20
        with pytest.raises(WeightLoadError, match="unknown tensor 'nope'"):
            e.load_weights([("nope", torch.zeros(1))], "5", complete=False)
        with pytest.raises(WeightLoadError, match="missing"):
            e.load_weights([("model.norm.weight", ref_model.model.norm.weight.detach().clone())], "5", complete=True)
        assert e.version == "0"
    finally:
        e.stop()


def test_a_failing_step_fails_its_requests_not_the_engine(ref_model):
    e = Engine(ref_model, eos_ids=[2], max_batch_size=4, max_context_len=4096).start()
    try:
        col = Collector(1)
        e.submit(Request("bad", [5, 10**7], SamplingSpec(max_new_tokens=3), col))  # not in the vocabulary
        assert col.event.wait(30)
        assert col.done["bad"].error.startswith("engine error: IndexError")
        col = Collector(1)
        e.submit(Request("good", [5, 6], SamplingSpec(max_new_tokens=3, ignore_eos=True), col))
        assert col.event.wait(30) and len(col.done["good"].output_ids) == 3
    finally:
        e.stop()


def test_priority_orders_admission_and_keeps_arrival_order_among_equals(ref_model, h):
    """SGLang's `priority`: while the batch is full, the waiting request with the larger value
    joins first; equal ones (and requests without one: 0) keep their arrival order."""
    e = Engine(ref_model, eos_ids=[2], max_batch_size=1, max_context_len=4096).start()
    try:
        order: list = []
        col = Collector(5)

        def done(req):
            order.append(req.rid)
            col(req)

        e.pause("abort")  # nothing runs: every request waits, then they are admitted one by one
        prompt = h.make_prompts(1, ref_model.config.vocab_size, seed=3)[0]
        for rid, prio in (("a", 0), ("low", -1), ("high", 5), ("b", 0), ("c", 0)):
            req = _req(rid, prompt, done, n=3)
            req.priority = prio
            e.submit(req)
        e.resume()
        assert col.event.wait(60)
        assert order == ["high", "a", "b", "c", "low"]
    finally:
        e.stop()


def test_prefill_done_again_after_a_retract_or_an_aborted_resend_is_counted(ref_model, h):
    """`reprefill_tokens`: a retracted row's KV (prompt + outputs but the newest) is prefilled
    again on resume; a request a pause aborted, resent under its rid with its partial output, is
    prefilled again up to what it had; a new rid's prefill is first-time work."""
    e = Engine(ref_model, eos_ids=[2], max_batch_size=8, max_context_len=4096).start()
    try:
        prompts = h.make_prompts(3, ref_model.config.vocab_size, seed=21)
        col = Collector(2)
        reqs = [_req(f"r{i}", p, col, n=N) for i, p in enumerate(prompts[:2])]
        for r in reqs:
            e.submit(r)
        while e.steps < 5:
            time.sleep(0.005)
        e.pause("retract")
        kv = [len(r.prompt_ids) + len(r.output_ids) - 1 for r in reqs]  # their KV when retracted
        assert all(len(r.output_ids) >= 2 for r in reqs)
        before = e.stats()
        e.resume()
        assert col.event.wait(60)
        after = e.stats()
        assert after["reprefill_tokens"] - before["reprefill_tokens"] == sum(kv)
        assert after["prefill_tokens"] - before["prefill_tokens"] == sum(kv) + 2  # + each newest token

        aborted = Collector(1)
        first = _req("resent", prompts[2], aborted, n=N)
        e.submit(first)
        while not first.output_ids:
            time.sleep(0.005)
        e.pause("abort")
        assert aborted.event.wait(10) and first.finish["type"] == "abort"
        kv = len(first.prompt_ids) + len(first.output_ids) - 1
        e.resume()
        before = e.stats()
        col = Collector(2)
        e.submit(_req("resent", first.prompt_ids + first.output_ids, col, n=3))  # the client's resend
        e.submit(_req("fresh", prompts[2], col, n=3))
        assert col.event.wait(60)
        after = e.stats()
        assert after["reprefill_tokens"] - before["reprefill_tokens"] == kv
        assert after["prefill_tokens"] - before["prefill_tokens"] == kv + 1 + len(prompts[2])
    finally:
        e.stop()
