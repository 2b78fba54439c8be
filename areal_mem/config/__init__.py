"""Typed configuration: one structured schema per component under one root `RunConfig`."""

from .loading import ConfigError, load_config, load_run, save_resolved, to_yaml
from .run import RunConfig

__all__ = ["ConfigError", "RunConfig", "load_config", "load_run", "save_resolved", "to_yaml"]
