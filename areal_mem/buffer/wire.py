"""What the buffer's client and server agree on besides the row schema.

Kept apart from both so that the client (imported by every layer) never imports the server.
"""

from __future__ import annotations

TOKEN_ENV = "AREAL_MEM_BUFFER_TOKEN"  # the shared token, kept off command lines
BATCH_META = b"areal_mem.batch"  # schema-metadata key of a served batch: batch id, group ids, version
