"""The synthetic search world: a fictional encyclopedia and questions only search can answer."""

from .build import build_world, check_built_world, world_filters, world_size

__all__ = ["build_world", "check_built_world", "world_filters", "world_size"]
