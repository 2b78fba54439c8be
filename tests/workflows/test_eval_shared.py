"""The evaluator beside training under `eval.placement: shared`: it uses the training generators,
with every request at `eval.priority`, and reports which versions sampled its tokens."""

from __future__ import annotations

import json

from areal_mem import policy_snapshots
from areal_mem.app.cli import main
from areal_mem.app.evaluation.during_training import Evaluator
from areal_mem.config import load_run
from areal_mem.config.generator import EmbeddedConfig
from areal_mem.rollout.generator.launch import start_embedded_generator
from areal_mem.rollout.generator.sglang_schema import load_sglang_api_types
from tests.workflows._proxy import GeneratorProxy


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
        proxy = GeneratorProxy(gen.url)
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
