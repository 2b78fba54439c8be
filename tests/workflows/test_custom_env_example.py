"""The custom environment example run as its README line says: `areal-mem eval` with its config on
top of the debug recipe, the plugin found on PYTHONPATH. Evaluation must run the calculator
workflow (one setting, `rollout.workflow`, names it for training and evaluation) and score it
with the calculator's reward, not as question answering, and print that reward."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import yaml

from areal_mem.app.evaluation.evaluate import eval_method
from areal_mem.config import load_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "custom_env")
CONFIGS = [os.path.join(ROOT, "configs", "debug_cpu.yaml"), os.path.join(EXAMPLE, "config.yaml")]
WORKFLOW = "calculator_env:CalculatorWorkflow"


def _readme_section_blocks(language: str) -> list:
    """The README's fenced `language` blocks of its section "Bring your own environment"."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Bring your own environment", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_the_readme_names_the_example_as_it_is():
    """The README's plugin section: its YAML is the example's config.yaml (the same rollout keys
    and values) and every class and function its sketch defines is the example's, of the same kind."""
    (block,) = _readme_section_blocks("yaml")
    with open(os.path.join(EXAMPLE, "config.yaml"), encoding="utf-8") as f:
        example = yaml.safe_load(f)
    shown = yaml.safe_load(block)
    assert shown["rollout"] == {k: example["rollout"][k] for k in shown["rollout"]}
    assert list(shown) == ["rollout"] and {"workflow", "tools", "reward"} <= set(shown["rollout"])
    (sketch,) = _readme_section_blocks("python")
    module = ast.parse(open(os.path.join(EXAMPLE, "calculator_env.py"), encoding="utf-8").read())
    defined = {n.name: type(n) for n in module.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    for node in ast.parse(sketch).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            assert defined.get(node.name) is type(node), node.name


def test_eval_method_defaults_to_the_rollout_workflow():
    model = ["model.path=unused"]
    assert eval_method(load_run(CONFIGS, model)) == WORKFLOW
    assert eval_method(load_run(CONFIGS, [*model, "eval.method=react"])) == "react"  # an explicit one wins
    assert eval_method(load_run([], model)) == "memsearcher"  # the default workflow, as before


def test_the_example_runs_under_areal_mem_eval(world_dir, tiny_model_dir, retriever_url, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [EXAMPLE, os.environ.get("PYTHONPATH")])))
    cmd = [os.path.join(os.path.dirname(sys.executable), "areal-mem"), "eval"]
    cmd += [arg for path in CONFIGS for arg in ("--config", path)]
    cmd += ["--limit", "2", "--quiet", f"model.path={tiny_model_dir}", f"world.dir={world_dir}", f"run_dir={tmp_path}"]
    cmd += [f"retriever.urls=[{retriever_url}]", "rollout.limits.max_new_tokens=16", "eval.max_turns=2"]
    cmd += ["generator.embedded.device=cpu"]
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr

    out = tmp_path / "eval" / WORKFLOW.replace(":", "_")
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert summary["method"] == WORKFLOW and summary["questions"] == 2
    assert [r["id"] for r in records] == ["calc_0", "calc_1"]
    # the calculator's reward on its boxed number; no QA scoring (no EM/F1, no format check)
    assert summary["em"] is None and summary["f1"] is None and summary["acc"] is None
    for r in records:
        assert not {"em", "f1", "acc", "format_error"} & set(r)
        assert r["end_reason"] and r["num_turns"] >= 1
        try:
            right = float(r["answer"]) == float(r["golden_answers"][0])
        except ValueError:
            right = False
        assert r["reward"] == float(right)
    # the line it prints: the calculator's own reward (the mean), not the QA metrics it lacks
    printed = json.loads(res.stdout.splitlines()[-2])
    assert printed == {
        "method": WORKFLOW,
        "questions": 2,
        "reward": round(sum(r["reward"] for r in records) / 2, 4),
        "mean_turns": summary["mean_turns"],
    }
