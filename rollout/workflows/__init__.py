"""Agent workflows: the plugin API, MemSearcher (default) and the ReAct baseline."""

from .base import Generator, Workflow, WorkflowContext, run_episode
from .qa import QAScoring
from .setup import build_context, build_workflow

__all__ = [
    "Generator",
    "QAScoring",
    "Workflow",
    "WorkflowContext",
    "build_context",
    "build_workflow",
    "run_episode",
]
