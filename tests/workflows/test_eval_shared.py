"""The evaluator beside training under `eval.placement: shared`: it uses the training generators,
with every request at `eval.priority`, and reports which versions sampled its tokens."""

from __future__ import annotations

import json
import threading

import aiohttp
from aiohttp import web

from areal_mem import policy_snapshots
from areal_mem.app.cli import main
from areal_mem.app.evaluation.during_training import Evaluator
from areal_mem.config import load_run
from areal_mem.config.generator import EmbeddedConfig
from areal_mem.rollout.generator.launch import start_embedded_generator
from areal_mem.rollout.generator.sglang_schema import load_sglang_api_types


class RecordingProxy:
    """Forwards every request to a real generator and keeps the /generate bodies it saw."""

    def __init__(self, target: str) -> None:
        self.target, self.bodies, self.url = target, [], ""
        self._ready = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()
        assert self._ready.wait(10)

    def _serve(self) -> None:
        import asyncio

        async def forward(request: web.Request) -> web.Response:
            body = await request.read()
            if request.path == "/generate":
                self.bodies.append(json.loads(body))
            async with aiohttp.ClientSession() as s:
                async with s.request(request.method, self.target + request.path, data=body) as r:
                    return web.Response(body=await r.read(), status=r.status, content_type=r.content_type)

        async def main_() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", forward)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
            self._ready.set()
            await asyncio.Event().wait()

        asyncio.run(main_())


def test_shared_placement_sends_low_priority_and_equals_a_plain_eval(
    world_dir, tiny_model_dir, retriever_url, tmp_path
):
    common = [
        f"run_dir={tmp_path}",
        f"world.dir={world_dir}",
        f"model.path={tiny_model_dir}",
        f"retriever.urls=[{retriever_url}]",
        "rollout.prompt_style=short",
        "rollout.limits.max_new_tokens=24",
        "eval.max_turns=2",
    ]
    with start_embedded_generator(tiny_model_dir, EmbeddedConfig(device="cpu")) as gen:
        proxy = RecordingProxy(gen.url)
        cfg = load_run(
            [],
            [
                *common,
                f"generator.urls=[{proxy.url}]",
                "eval.interval=5",
                "eval.placement=shared",
                "eval.dev_questions=5",
            ],
        )
        # the learner's hand-over of version 0 (shared: the number only) and its end
        policy_snapshots.publish(str(tmp_path), 0, 0, None)
        policy_snapshots.mark_done(str(tmp_path))
        assert Evaluator(cfg, poll_s=0.05).run() == 0
        plain = ["eval", "--quiet", "--data", f"{world_dir}/dev.jsonl", "--limit", "5", f"generator.urls=[{gen.url}]"]
        assert main([*plain, *common, f"eval.out_dir={tmp_path / 'plain'}"]) == 0
    [row] = policy_snapshots.read_curve(str(tmp_path))
    assert row["version"] == 0 and row["questions"] == 5 and row["pinned_fraction"] == 1.0
    api = load_sglang_api_types()
    assert proxy.bodies and all(b["priority"] == -1 for b in proxy.bodies)
    for b in proxy.bodies:  # what SGLang itself would accept
        api.GenerateRequest.from_json_value(b)
    beside = [json.loads(x) for x in (tmp_path / "eval_during" / "results" / "v000000.jsonl").open()]
    plain_records = [json.loads(x) for x in (tmp_path / "plain" / "results.jsonl").open()]
    assert [x["final_response"] for x in beside] == [x["final_response"] for x in plain_records]
    assert row["em"] == round(100 * sum(x["em"] for x in beside) / 5, 2)
    assert not (tmp_path / "eval_during" / "v000000").exists()  # taken
