"""An example environment plugin: arithmetic word problems with a calculator tool.

It shows the three plugin kinds: a `Tool` (safe arithmetic, parsed with `ast`,
never `eval`), a reward (1 when the boxed number equals the golden one), and a
workflow (the ReAct loop with its own prompt, scored by that reward, not as
question answering). It imports only `areal_mem.api`. Load it by `module:attribute`
in a config (see config.yaml) or install this folder (`pip install -e .`) to
register `calculator` through the entry-point groups `areal_mem.workflows`,
`areal_mem.tools` and `areal_mem.rewards`.
"""

from __future__ import annotations

import ast
import json
import operator
from typing import Any, Dict

from areal_mem.api import ReActLoop, Task, Tool, ToolBuild, ToolError, Trajectory, WorkflowContext, rewards

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def evaluate(expression: str, max_exponent: int = 100) -> float:
    """Numbers, + - * / ** and parentheses; anything else is refused."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > max_exponent:
                raise ToolError(f"exponent {right} is too large")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.operand))
        raise ToolError(f"unsupported expression element {type(node).__name__}")

    try:
        return walk(ast.parse(expression, mode="eval").body)
    except SyntaxError:
        raise ToolError(f"{expression!r} is not an arithmetic expression") from None
    except ZeroDivisionError:
        raise ToolError("division by zero") from None


class CalculatorTool(Tool):
    name = "calculator"
    schema = {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "required": ["expression"],
                "properties": {"expression": {"type": "string"}},
            },
        },
    }

    def __init__(self, precision: int = 6) -> None:
        self.precision = precision

    async def call(self, arguments: Dict[str, Any]) -> str:
        expression = arguments.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            raise ToolError('"expression" must be a non-empty string.')
        value = round(evaluate(expression), self.precision)
        return str(int(value)) if float(value).is_integer() else str(value)


def make_tool(build: ToolBuild) -> CalculatorTool:
    return CalculatorTool(precision=int(build.args.get("precision", 6)))


def make_reward(rollout: Any):
    """A reward factory gets the rollout config (unused here) and returns reward(message, task)."""

    def reward(message: str, task: Task) -> float:
        answer = rewards.extract_boxed(message)
        try:
            return float(any(abs(float(answer) - float(g)) < 1e-6 for g in task.golden_answers))
        except (TypeError, ValueError):
            return 0.0

    return reward


PROMPT = (
    "<|im_start|>system\nSolve the problem. Tools:\n"
    + json.dumps([CalculatorTool.schema])
    + '\nCall one as <tool_call>{"name": "calculator", "arguments": {"expression": "..."}}</tool_call>'
    " and give the final number in \\boxed{}.<|im_end|>\n"
    "<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
)


class CalculatorWorkflow(ReActLoop):
    name = "calculator"

    def default_template(self) -> str:
        return PROMPT

    def score(self, traj: Trajectory, task: Task, message: str, ctx: WorkflowContext) -> Trajectory:
        """The configured reward (`make_reward`), and the boxed number for the eval results."""
        traj = super().score(traj, task, message, ctx)
        traj.info["answer"] = rewards.extract_boxed(message) or ""
        return traj
