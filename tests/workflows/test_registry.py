"""The plugin registry: names, module:attribute paths, entry points, and the example environment."""

from __future__ import annotations

import asyncio
import os

import pytest

from areal_mem.config import load_run
from areal_mem.data import read_tasks
from areal_mem.rollout import registry as plugins
from areal_mem.rollout.workflows import build_context, build_workflow
from areal_mem.rollout.workflows.memsearcher import MemSearcherWorkflow

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "custom_env")


def test_builtins_and_errors(fresh_registry):
    assert plugins.resolve("workflow", "memsearcher") is MemSearcherWorkflow
    path = "areal_mem.rollout.workflows.memsearcher:MemSearcherWorkflow"
    assert plugins.resolve("workflow", path) is MemSearcherWorkflow
    expected = "no workflow named 'memsercher'; available: memsearcher, react"
    with pytest.raises(plugins.PluginError, match=expected):
        plugins.resolve("workflow", "memsercher")
    with pytest.raises(plugins.PluginError, match="cannot import module 'no_such_mod'"):
        plugins.resolve("tool", "no_such_mod:x")
    with pytest.raises(plugins.PluginError, match="has no attribute 'Nope'"):
        plugins.resolve("reward", "areal_mem.rollout.rewards:Nope")


def test_register_by_name(fresh_registry):
    @plugins.register("workflow", "mine")
    class Mine(MemSearcherWorkflow):
        pass

    assert plugins.resolve("workflow", "mine") is Mine and "mine" in plugins.available("workflow")


def _install_entry_points(tmp_path, installed, entry_points_txt: str) -> None:
    """A distribution of the example with these entry points, as `pip install` leaves it, in a
    folder the registry reads (`installed`: the `fresh_registry` fixture's)."""
    dist = tmp_path / "areal_mem_calculator_env-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: areal-mem-calculator-env\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text(entry_points_txt)
    installed.append(str(tmp_path))


def test_entry_points_register_the_example(fresh_registry, tmp_path, monkeypatch):
    _install_entry_points(
        tmp_path,
        fresh_registry,
        "[areal_mem.workflows]\ncalculator = calculator_env:CalculatorWorkflow\n"
        "[areal_mem.tools]\ncalculator = calculator_env:make_tool\n"
        "[areal_mem.rewards]\ncalculator = calculator_env:make_reward\n",
    )
    monkeypatch.syspath_prepend(EXAMPLE)
    import calculator_env

    assert plugins.resolve("workflow", "calculator") is calculator_env.CalculatorWorkflow
    assert plugins.resolve("tool", "calculator") is calculator_env.make_tool
    assert plugins.resolve("reward", "calculator") is calculator_env.make_reward


def test_old_tool_and_reward_names_in_the_workflows_group_are_refused(fresh_registry, tmp_path, monkeypatch):
    """`tool.X` / `reward.X` in `areal_mem.workflows` (the one group of old) is refused, naming
    the group it belongs in, not read and not ignored; the group's workflows still load."""
    _install_entry_points(
        tmp_path,
        fresh_registry,
        "[areal_mem.workflows]\ncalculator = calculator_env:CalculatorWorkflow\n"
        "tool.calculator = calculator_env:make_tool\nreward.memsearcher = calculator_env:make_reward\n",
    )
    monkeypatch.syspath_prepend(EXAMPLE)
    import calculator_env

    assert plugins.resolve("workflow", "calculator") is calculator_env.CalculatorWorkflow
    with pytest.raises(plugins.PluginError, match=r"tool.calculator = .*declare it as calculator .* areal_mem\.tools$"):
        plugins.resolve("tool", "calculator")
    # refused even where a built-in has the name: the old entry point once overrode it
    with pytest.raises(plugins.PluginError, match=r"in group areal_mem\.rewards$"):
        plugins.resolve("reward", "memsearcher")


def test_example_env_loaded_by_config(fresh_registry, scripted, tokenizer, monkeypatch):
    monkeypatch.syspath_prepend(EXAMPLE)
    cfg = load_run([os.path.join(EXAMPLE, "config.yaml")], ["model.path=unused"])
    workflow = build_workflow(cfg.rollout.workflow)
    tasks = read_tasks(os.path.join(EXAMPLE, "tasks.jsonl"))
    gen = scripted(
        [
            '<tool_call>{"name": "calculator", "arguments": {"expression": "4 * 17 * 23"}}</tool_call>',
            '<tool_call>{"name": "calculator", "arguments": {"expression": "__import__(\'os\')"}}</tool_call>',
            "So \\boxed{1564}",
        ]
    )
    ctx = build_context(cfg.rollout, workflow, gen, tokenizer, retriever=None)
    assert set(ctx.tools) == {"calculator"} and ctx.tools["calculator"].precision == 4
    traj = asyncio.run(workflow.run(tasks[0], ctx, "c0"))
    seen = tokenizer.decode(gen.calls[2]["input_ids"], skip_special_tokens=False)
    assert "\n1564\n</tool_response>" in seen
    assert "Error: unsupported expression element Call\n</tool_response>" in seen
    assert traj.reward == 1.0 and traj.info["num_turns"] == 3
