"""Weight pushes (disk and torch.distributed), versions, pause/resume, abort and flush."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
import torch
from safetensors.torch import save_file

from areal_mem.generation import SamplingParams
from areal_mem.net import free_port
from areal_mem.rollout.generator.client import GeneratorClient, GeneratorError, GeneratorUnavailable
from areal_mem.weight_transport import BucketMeta, WeightGroup, iter_buckets, parse_dtype

LONG = 1000  # tokens: long enough that a pause 0.15 s in catches the request mid-way


def _save(ref_model, state, path, h):
    h.model_with(ref_model, state).save_pretrained(path)
    return str(path)


def _split_by_version(r):
    changes = [i for i in range(1, len(r.versions)) if r.versions[i] != r.versions[i - 1]]
    assert len(changes) == 1, r.versions
    return changes[0]


def test_disk_update_and_interrupted_requests(fresh_server, ref_model, checker, h, tmp_path):
    prompt = h.make_prompts(1, ref_model.config.vocab_size, seed=7)[0]
    states = {v: h.perturbed_state(ref_model, seed=v) for v in (1, 2, 3)}
    paths = {v: _save(ref_model, s, tmp_path / f"v{v}", h) for v, s in states.items()}
    models = {v: h.model_with(ref_model, s) for v, s in states.items()}
    models[0] = ref_model
    bad_path = tmp_path / "bad"
    bad_path.mkdir()
    save_file({**states[1], "model.norm.weight": torch.ones(3)}, str(bad_path / "model.safetensors"))
    bad_path = str(bad_path)
    sp = SamplingParams(max_new_tokens=16, temperature=1.0, ignore_eos=True, sampling_seed=1)
    long_sp = SamplingParams(max_new_tokens=LONG, temperature=1.0, ignore_eos=True, sampling_seed=2)

    async def interrupted(c, mode, version):
        task = asyncio.create_task(c.generate(prompt, long_sp))
        await asyncio.sleep(0.15)
        await c.pause(mode)
        assert not task.done()
        await c.update_weights_from_disk(paths[version], version)
        await asyncio.sleep(0.2)  # the resent request waits while paused
        assert not task.done()
        await c.continue_generation()
        return await task

    async def go():
        async with GeneratorClient([fresh_server.url], on_request=checker.request, on_response=checker.response) as c:
            before = await c.generate(prompt, sp)
            answers = await c.update_weights_from_disk(paths[1], 1)
            after = await c.generate(prompt, sp)
            info = await c.model_info()
            aborted = await interrupted(c, "abort", 2)
            in_place = await interrupted(c, "in_place", 3)
            with pytest.raises(GeneratorError, match="model.norm.weight: shape \\[3\\]"):
                await c.update_weights_from_disk(bad_path, 9)
            final = await c.weight_versions()
            async with aiohttp.ClientSession() as s:
                async with s.post(
                    fresh_server.url + "/update_weight_version", json={"new_version": "10", "abort_all_requests": False}
                ) as r:
                    assert r.status == 200
            relabelled = await c.generate(prompt, sp)
            return before, answers, after, info, aborted, in_place, final, relabelled

    before, answers, after, info, aborted, in_place, final_versions, relabelled = asyncio.run(go())
    assert relabelled.versions == [10] * 16
    assert answers[0]["success"] is True
    assert info[fresh_server.url]["weight_version"] == "1"
    assert before.versions == [0] * 16 and after.versions == [1] * 16
    for r, m in ((before, ref_model), (after, models[1])):
        ref = h.teacher_forced_logprobs(m, prompt, r.output_ids)
        assert torch.allclose(torch.tensor(r.logprobs), ref, atol=1e-4)
    old = h.teacher_forced_logprobs(ref_model, prompt, after.output_ids)
    assert (old - torch.tensor(after.logprobs)).abs().max() > 1e-2  # the weights really changed

    # abort mode: partial output returned, resent with the remaining budget, tokens carry both versions
    k = _split_by_version(aborted)
    assert aborted.meta["resumes"] == 1 and len(aborted.output_ids) == LONG
    assert aborted.versions[:k] == [1] * k and aborted.versions[k:] == [2] * (LONG - k)
    for lo, hi, m in ((0, k, models[1]), (k, LONG, models[2])):
        ref = h.teacher_forced_logprobs(m, prompt, aborted.output_ids)[lo:hi]
        assert torch.allclose(torch.tensor(aborted.logprobs[lo:hi]), ref, atol=1e-4)

    # in_place: held in the batch, no resend; the server's weight_versions spans give the split
    k = _split_by_version(in_place)
    assert in_place.meta["resumes"] == 0 and len(in_place.output_ids) == LONG
    assert in_place.versions[:k] == [2] * k and in_place.versions[k:] == [3] * (LONG - k)
    ref = h.teacher_forced_logprobs(models[2], prompt, in_place.output_ids)[:k]
    assert torch.allclose(torch.tensor(in_place.logprobs[:k]), ref, atol=1e-4)
    assert final_versions == {fresh_server.url: 3}  # the bad checkpoint changed nothing


def test_distributed_push(fresh_server, ref_model, checker, h):
    prompt = h.make_prompts(1, ref_model.config.vocab_size, seed=8)[0]
    new = h.perturbed_state(ref_model, seed=5)
    sp = SamplingParams(max_new_tokens=16, temperature=1.0, ignore_eos=True, sampling_seed=3)
    port = free_port()

    async def go():
        async with GeneratorClient([fresh_server.url], on_request=checker.request, on_response=checker.response) as c:
            before = await c.generate(prompt, sp)
            world, group = await asyncio.gather(
                c.init_weights_update_group("127.0.0.1", port, group_name="w"),
                asyncio.to_thread(WeightGroup.join, "127.0.0.1", port, 2, 0, "w", "gloo", 60.0),
            )
            buckets = list(iter_buckets(new.items(), bucket_bytes=64 * 1024))
            for bucket in buckets:
                meta = BucketMeta.of(bucket)
                announce = asyncio.create_task(
                    c.update_weights_from_distributed(meta.names, meta.dtypes, meta.shapes, "w", version=7)
                )
                await asyncio.to_thread(group.broadcast_bucket, bucket)
                await announce
            after = await c.generate(prompt, sp)
            group.close()
            return world, len(buckets), before, after

    world, n_buckets, before, after = asyncio.run(go())
    assert world == 2 and n_buckets > 1
    assert before.versions == [0] * 16 and after.versions == [7] * 16
    ref = h.teacher_forced_logprobs(h.model_with(ref_model, new), prompt, after.output_ids)
    assert torch.allclose(torch.tensor(after.logprobs), ref, atol=1e-4)
    old = h.teacher_forced_logprobs(ref_model, prompt, after.output_ids)
    assert (old - ref).abs().max() > 1e-2  # the weights really changed


def test_abort_request_and_flush_cache_retry(server, ref_model, h):
    prompt = h.make_prompts(1, ref_model.config.vocab_size, seed=9)[0]

    async def go():
        async with GeneratorClient([server.url], flush_retry_s=0.05) as c:
            task = asyncio.create_task(
                c.generate(prompt, SamplingParams(max_new_tokens=LONG, ignore_eos=True), rid="to-abort")
            )
            await asyncio.sleep(0.15)
            await c.abort_request("to-abort")
            aborted = await task

            done_at = {}

            async def gen():
                r = await c.generate(prompt, SamplingParams(max_new_tokens=200, ignore_eos=True))
                done_at["gen"] = time.monotonic()
                return r

            task = asyncio.create_task(gen())
            await asyncio.sleep(0.1)
            await c.flush_cache()
            done_at["flush"] = time.monotonic()
            await task

        # a client that gives up (timeout) hangs up; the server stops working on its request
        async with (
            GeneratorClient([server.url], timeout_s=0.3, max_retries=0) as impatient,
            GeneratorClient([server.url]) as c,
        ):
            with pytest.raises(GeneratorUnavailable):
                await impatient.generate(prompt, SamplingParams(max_new_tokens=4000, ignore_eos=True))
            t0 = time.monotonic()
            await c.flush_cache(timeout_s=1.5)  # 400 while the abandoned request would still run
            idle_after = time.monotonic() - t0
        return aborted, done_at, idle_after

    aborted, done_at, idle_after = asyncio.run(go())
    assert idle_after < 1.5
    assert aborted.finish_reason == "abort" and aborted.meta["resumes"] == 0
    assert 0 < len(aborted.output_ids) < LONG
    assert done_at["flush"] >= done_at["gen"]  # 400 while busy, retried until it was idle


def test_weight_transport_helpers():
    ts = [("a", torch.zeros(10)), ("b", torch.zeros(30)), ("c", torch.zeros(5)), ("d", torch.zeros(100))]
    assert [[n for n, _ in b] for b in iter_buckets(ts, 160)] == [["a", "b"], ["c"], ["d"]]
    assert parse_dtype("bfloat16") is torch.bfloat16 and parse_dtype("torch.float16") is torch.float16
    with pytest.raises(ValueError, match="unknown dtype"):
        parse_dtype("float99")
    meta = BucketMeta.of([("x", torch.zeros(2, 3, dtype=torch.bfloat16))])
    assert (meta.names, meta.dtypes, meta.shapes) == (["x"], ["bfloat16"], [[2, 3]])
