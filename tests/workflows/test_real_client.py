"""One scripted trajectory through the real GeneratorClient against a scripted server speaking
SGLang's /generate, with both directions checked against SGLang's published schema."""

from __future__ import annotations

import asyncio

from aiohttp import web

from areal_mem.data.task import Task
from areal_mem.rollout.generator.client import GeneratorClient
from areal_mem.rollout.generator.sglang_schema import load_sglang_api_types
from areal_mem.rollout.workflows.memsearcher import MemSearcherWorkflow

REPLIES = [
    'I will search. </think>\n<tool_call>\n{"name": "wikipedia_search", "arguments": '
    '{"query": "The Crimson Mirror"}}\n</tool_call>',
    "<memory> The Crimson Mirror appeared in 1849. </memory>",
    "</think> \\boxed{1849}",
]


async def _episode(tokenizer, make_ctx, task, api):
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    replies = [tokenizer.encode(r, add_special_tokens=False) + [im_end] for r in REPLIES]
    requests = []

    async def generate(request: web.Request) -> web.Response:
        body = await request.json()
        requests.append(body)
        try:  # what SGLang's server would refuse with HTTP 400
            api.GenerateRequest.from_json_value(body)
        except Exception as e:
            return web.json_response({"error": {"message": str(e)}}, status=400)
        ids = replies[len(requests) - 1]
        logprobs = [[-0.5 - i / 100, t, None] for i, t in enumerate(ids)]
        return web.json_response(
            {
                "text": tokenizer.decode(ids[:-1]),
                "output_ids": ids,
                "meta_info": {
                    "id": body["rid"],
                    "finish_reason": {"type": "stop", "matched": im_end},
                    "prompt_tokens": len(body["input_ids"]),
                    "completion_tokens": len(ids),
                    "cached_tokens": 0,
                    "weight_version": "3",
                    "e2e_latency": 0.01,
                    "output_token_logprobs": logprobs,
                },
            }
        )

    app = web.Application()
    app.router.add_post("/generate", generate)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        check = lambda route, body: api.GenerateResponse.from_json_value(body)  # noqa: E731
        async with GeneratorClient([f"http://127.0.0.1:{port}"], on_response=check) as client:
            traj = await MemSearcherWorkflow().run(task, make_ctx(client), "real-0")
    finally:
        await runner.cleanup()
    return traj, requests, replies


def test_trajectory_through_real_client(tokenizer, make_ctx):
    api = load_sglang_api_types()  # SGLang's own schema checks both directions
    task = Task("q", "In what year did The Crimson Mirror appear?", ["1849"])
    traj, requests, replies = asyncio.run(_episode(tokenizer, make_ctx, task, api))
    assert len(requests) == 3 and traj.reward == 1.0
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert requests[0]["sampling_params"] == {
        "max_new_tokens": 512,
        "temperature": 1.0,
        "top_p": 0.99,
        "stop_token_ids": [im_end, im_start],
    }
    assert requests[0]["return_logprob"] is True
    c0, c1 = traj.contexts
    gen0 = [i for i, m in enumerate(c0.loss_mask) if m]
    assert [c0.input_ids[c0.prompt_len + i] for i in gen0] == replies[0] + replies[1]
    assert [c0.behav_logp[i] for i in gen0] == [-0.5 - i / 100 for i in range(len(replies[0]))] + [
        -0.5 - i / 100 for i in range(len(replies[1]))
    ]
    assert {c0.versions[i] for i in gen0} == {3} and c1.versions == [3] * len(replies[2])
    assert requests[1]["input_ids"] == c0.input_ids[: c0.prompt_len + c0.loss_mask.index(1, len(replies[0]))]
