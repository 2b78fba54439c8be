"""The synthetic search world: a fictional encyclopedia and questions only search can answer."""

from .build import build_world

__all__ = ["build_world"]
