"""The Arrow Flight replay buffer: the row schema and the client every layer shares; the server in `server/`."""

from .client import Batch, BufferClient, BufferRefusedError
from .schema import CONTEXT_SCHEMA, SchemaError, group_to_table, table_to_groups, validate_group
from .stats import BufferStats

__all__ = [
    "Batch",
    "BufferClient",
    "BufferRefusedError",
    "BufferStats",
    "CONTEXT_SCHEMA",
    "SchemaError",
    "group_to_table",
    "table_to_groups",
    "validate_group",
]
