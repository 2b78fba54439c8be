"""Agent workflows: the plugin API, MemSearcher (default) and the ReAct baseline."""

from .base import Generator, Workflow, WorkflowContext, run_episode, score_trajectory
from .setup import build_context, build_workflow

__all__ = [
    "Generator",
    "Workflow",
    "WorkflowContext",
    "build_context",
    "build_workflow",
    "run_episode",
    "score_trajectory",
]
