"""The embedded server's /generate through the client: SGLang contract, exact log-probs,
batch invariance, stop rules."""

from __future__ import annotations

import asyncio

import pytest
import torch

from areal_mem.generation import SamplingParams
from areal_mem.rollout.generator.client import GeneratorClient


def _client(server, checker, **kw):
    return GeneratorClient([server.url], on_request=checker.request, on_response=checker.response, **kw)


def test_every_request_and_response_fits_sglang_schema(server, checker, sglang_api, h):
    prompts = h.make_prompts(6, 2000, seed=1)
    variants = [
        SamplingParams(max_new_tokens=8, temperature=0.0),
        SamplingParams(max_new_tokens=8, temperature=0.8, top_p=0.9, top_k=20, sampling_seed=3),
        SamplingParams(
            max_new_tokens=8,
            min_new_tokens=2,
            stop=["zz"],
            stop_token_ids=[2],
            ignore_eos=False,
            skip_special_tokens=False,
            no_stop_trim=True,
        ),
        SamplingParams(max_new_tokens=0),
    ]

    async def go():
        async with _client(server, checker) as c:
            res = await asyncio.gather(*(c.generate(p, v) for p in prompts for v in variants))
            info = await c.model_info()
        return res, info

    res, info = asyncio.run(go())
    assert checker.checked == {"request": 24, "response": 24}
    assert info[server.url]["weight_version"] == "0"
    assert [len(r.output_ids) for r in res[3::4]] == [0] * 6
    assert all(r.versions == [0] * len(r.output_ids) for r in res)
    # The schema is live: it refuses what SGLang refuses.
    with pytest.raises(sglang_api.JsonContractError, match="unknown field `max_tokens`"):
        sglang_api.GenerateRequest.from_json_value({"input_ids": [1], "sampling_params": {"max_tokens": 4}})


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_logprobs_equal_teacher_forced_forward(server, checker, ref_model, h, temperature):
    prompts = h.make_prompts(8, ref_model.config.vocab_size, seed=2)

    async def go():
        async with _client(server, checker) as c:
            return await asyncio.gather(
                *(
                    c.generate(
                        p, SamplingParams(max_new_tokens=24, temperature=temperature, ignore_eos=True, sampling_seed=i)
                    )
                    for i, p in enumerate(prompts)
                )
            )

    for p, r in zip(prompts, asyncio.run(go())):
        assert len(r.output_ids) == 24 and r.finish_reason == "length"
        ref = h.teacher_forced_logprobs(ref_model, p, r.output_ids, temperature)
        assert torch.allclose(torch.tensor(r.logprobs), ref, atol=1e-4), (r.logprobs[:4], ref[:4])
        if temperature == 0.0:
            with torch.no_grad():
                logits = ref_model(torch.tensor([p + r.output_ids])).logits[0, len(p) - 1 : -1]
            assert r.output_ids == logits.argmax(-1).tolist()


def test_alone_equals_inside_a_busy_batch(server, checker, ref_model, h):
    """Greedy and seeded sampling give the same tokens alone and among 15 other requests
    that arrive before and while it decodes."""
    target = h.make_prompts(1, ref_model.config.vocab_size, seed=3, lo=10, hi=11)[0]
    others = h.make_prompts(15, ref_model.config.vocab_size, seed=4, lo=3, hi=40)
    greedy = SamplingParams(max_new_tokens=32, temperature=0.0, ignore_eos=True)
    seeded = SamplingParams(max_new_tokens=32, temperature=1.0, ignore_eos=True, sampling_seed=11)

    async def go():
        async with _client(server, checker) as c:
            alone = [await c.generate(target, greedy), await c.generate(target, seeded)]

            async def late(p, delay):
                await asyncio.sleep(delay)
                return await c.generate(p, SamplingParams(max_new_tokens=40, temperature=1.0))

            busy = await asyncio.gather(
                *(late(p, 0.0) for p in others[:8]),
                c.generate(target, greedy),
                c.generate(target, seeded),
                *(late(p, 0.05 * i) for i, p in enumerate(others[8:])),
            )
            return alone, busy[8:10]

    alone, busy = asyncio.run(go())
    assert alone[0].output_ids == busy[0].output_ids
    assert alone[1].output_ids == busy[1].output_ids
    assert alone[0].output_ids != alone[1].output_ids  # the seeded sample is not greedy
    assert torch.allclose(torch.tensor(alone[1].logprobs), torch.tensor(busy[1].logprobs), atol=1e-4)


def test_stop_rules(server, checker, tiny_model_dir, h):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = tok.encode("The capital of the river city is", add_special_tokens=False)
    base = SamplingParams(max_new_tokens=20, temperature=0.0, ignore_eos=True)

    async def go():
        async with _client(server, checker) as c:
            free = await c.generate(prompt, base)
            out = free.output_ids
            stop_tok = out[5]
            first = out.index(stop_tok)
            by_id = await c.generate(
                prompt, SamplingParams(max_new_tokens=20, temperature=0.0, ignore_eos=True, stop_token_ids=[stop_tok])
            )
            text_tail = tok.decode(out[first + 1 : first + 3])
            by_str = await c.generate(
                prompt, SamplingParams(max_new_tokens=20, temperature=0.0, ignore_eos=True, stop=[text_tail])
            )
            late = await c.generate(
                prompt,
                SamplingParams(
                    max_new_tokens=20,
                    temperature=0.0,
                    ignore_eos=True,
                    stop_token_ids=[stop_tok],
                    min_new_tokens=first + 2,
                ),
            )
            return free, first, stop_tok, by_id, text_tail, by_str, late

    free, first, stop_tok, by_id, text_tail, by_str, late = asyncio.run(go())
    assert free.finish_reason == "length" and len(free.output_ids) == 20
    assert by_id.output_ids == free.output_ids[: first + 1]  # the stop token is kept, like SGLang
    assert (by_id.finish_reason, by_id.matched_stop) == ("stop", stop_tok)
    assert by_str.finish_reason == "stop" and by_str.matched_stop == text_tail
    assert text_tail not in by_str.meta["text"]  # trimmed from the text, tokens kept
    assert by_str.output_ids == free.output_ids[: len(by_str.output_ids)]
    assert len(by_str.output_ids) <= first + 3
    # min_new_tokens bans the stop id until enough tokens exist: a different continuation
    assert len(late.output_ids) >= first + 2 and stop_tok not in late.output_ids[: first + 2]


def test_top_k_one_is_greedy(server, checker, ref_model, h):
    prompt = h.make_prompts(1, ref_model.config.vocab_size, seed=5)[0]

    async def go():
        async with _client(server, checker) as c:
            greedy = await c.generate(prompt, SamplingParams(max_new_tokens=6, temperature=0.0, ignore_eos=True))
            topk1 = await c.generate(
                prompt, SamplingParams(max_new_tokens=6, temperature=1.0, top_k=1, ignore_eos=True)
            )
            return greedy, topk1

    greedy, topk1 = asyncio.run(go())
    assert topk1.output_ids == greedy.output_ids and len(greedy.output_ids) == 6


def test_text_input_is_tokenised_like_input_ids(server, sglang_api, tiny_model_dir):
    import aiohttp
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    sp = {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}

    async def go():
        async with aiohttp.ClientSession() as s:
            out = []
            for body in (
                {"text": "The river city", "sampling_params": sp},
                {"input_ids": tok.encode("The river city", add_special_tokens=False), "sampling_params": sp},
            ):
                sglang_api.GenerateRequest.from_json_value(body)
                async with s.post(server.url + "/generate", json=body) as r:
                    assert r.status == 200
                    out.append(sglang_api.GenerateResponse.from_json_value(await r.json()))
            return out

    by_text, by_ids = asyncio.run(go())
    assert by_text.output_ids == by_ids.output_ids and len(by_text.output_ids) == 6
    assert by_text.meta_info.prompt_tokens == by_ids.meta_info.prompt_tokens
    assert by_text.text == tok.decode(by_text.output_ids, skip_special_tokens=True)
    assert by_text.meta_info.output_token_logprobs is None  # return_logprob not asked
