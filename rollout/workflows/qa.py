"""Question-answering scoring, shared by MemSearcher and ReAct (and any QA workflow of a plugin).

The episode's answer is the last `\\boxed{}` of the final message; EM, F1 and substring
accuracy against the golden answers and the format check go into `Trajectory.info`, where
evaluation and the buffer's extra columns read them. Kept out of the `Workflow` base so that a
workflow that is not question answering (the calculator example) is not scored as one.
"""

from __future__ import annotations

from areal_mem.data.task import Task
from areal_mem.rollout.rewards.answer import extract_boxed
from areal_mem.rollout.rewards.answer_reward import format_error
from areal_mem.rollout.rewards.metrics import exact_match, f1_score, substring_match
from areal_mem.trajectory import Trajectory

from .base import Workflow, WorkflowContext


class QAScoring(Workflow):
    """A `Workflow` whose `score` adds the answer metrics to the configured reward. Mix it in
    before the episode loop's class: `class ReActWorkflow(QAScoring, ReActLoop)`."""

    def score(self, traj: Trajectory, task: Task, message: str, ctx: WorkflowContext) -> Trajectory:
        answer = extract_boxed(message)
        traj = super().score(traj, task, message, ctx)
        golden = task.golden_answers
        traj.info.update(
            answer=answer or "",
            em=exact_match(answer, golden) if answer is not None else 0.0,
            f1=f1_score(answer, golden) if answer is not None else 0.0,
            acc=substring_match(answer, golden) if answer is not None else 0.0,
            format_error=format_error(message) or "",
            num_contexts=len(traj.contexts),
        )
        return traj
