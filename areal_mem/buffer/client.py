"""The replay buffer client for rollout workers and the learner.

Every call reconnects and retries (bounded, with backoff) when the service is
unreachable or the connection breaks, so a buffer restart is invisible to
callers. Retries are safe: a put is idempotent by group id and a batch request
carries its own id, so a retried `get_batch` receives the same batch.

Rollout worker::

    slot, version = client.acquire_slot(wait_s=5)  # "" while the bound says wait
    ...stamp start_version = version on every trajectory...
    client.put_group(group, slot=slot)   # accepted + slot released in one call
    # or, when the group is abandoned: client.release(slot)

Learner::

    batch = client.get_batch(8)          # blocks until 8 admissible groups
    train(batch.table or batch.groups)
    client.ack(batch.batch_id)
    client.set_version(v + 1)            # after each weight push

Calls are blocking and thread-safe; from asyncio use `asyncio.to_thread`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa
import pyarrow.flight as flight

from ..config.buffer import BufferConfig
from ..trajectory import Group
from .schema import group_to_table, table_to_groups
from .stats import BufferStats
from .wire import BATCH_META, TOKEN_ENV

log = logging.getLogger(__name__)
# Errors of the connection, not of the request: reconnect and retry.
RETRYABLE = (
    flight.FlightUnavailableError,
    flight.FlightTimedOutError,
    flight.FlightCancelledError,
    flight.FlightInternalError,
    ConnectionError,
)


class BufferRefusedError(ValueError):
    """The service refused the request; `code` is invalid|duplicate|unknown_batch|storage."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Batch:
    """One training batch: whole groups, oldest first.

    `table` has one row per context (schema `CONTEXT_SCHEMA` plus any extra
    columns); `groups` converts it to `Group` objects on first use.
    `dropped_stale` counts the groups dropped as too stale while this batch
    was requested; `version` is the buffer's learner version when it was formed.
    """

    batch_id: str
    table: pa.Table
    group_ids: List[str]
    dropped_stale: int
    version: int

    @property
    def n_groups(self) -> int:
        return len(self.group_ids)

    @cached_property
    def groups(self) -> List[Group]:
        return table_to_groups(self.table)


@dataclass
class BufferClient:
    url: str  # grpc://host:port
    token: str = ""  # empty: $AREAL_MEM_BUFFER_TOKEN, else none
    max_retries: int = 5  # reconnect attempts per call (at least; see retry_window_s)
    retry_window_s: float = 0.0  # ...and keep retrying this long (a buffer restart takes seconds)
    timeout_s: float = 60.0  # per call, on top of any server-side wait
    backoff_s: float = 0.2  # doubled after each failed attempt, capped at 5 s
    _client: Optional[flight.FlightClient] = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    # group ids of the batches this client got, newest last: an ack after a buffer restart names them
    _served: OrderedDict[str, List[str]] = field(default_factory=OrderedDict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.token = self.token or os.environ.get(TOKEN_ENV, "")

    @classmethod
    def from_config(cls, cfg: BufferConfig) -> BufferClient:
        """A client of `cfg.url` (a `BufferConfig`) that waits out a restart of the buffer."""
        return cls(cfg.url, token=cfg.token, retry_window_s=cfg.client_retry_window_s)

    # -- rollout side ---------------------------------------------------------
    def acquire(self, wait_s: float = 0.0) -> str:
        """A slot id when a new group may start now (waiting up to `wait_s`), else ""."""
        return self.acquire_slot(wait_s)[0]

    def acquire_slot(self, wait_s: float = 0.0) -> Tuple[str, int]:
        """(slot id or "", the learner's version now: the group's `start_version`)."""
        answer = self._action("acquire", {"wait_s": wait_s}, wait_s)
        return answer["slot"], answer["version"]

    def release(self, slot: str) -> bool:
        """Give back a slot whose group will not be put; False if unknown or already freed."""
        return self._action("release", {"slot": slot})["released"]

    def put_group(self, group: Group, slot: str = "") -> bool:
        """Store one whole group; True if stored by this call, False if it already was."""
        return self.put_table(group_to_table(group), group.group_id, slot)

    def put_table(self, table: pa.Table, group_id: str, slot: str = "") -> bool:
        """`put_group` for a table of context rows that is already built."""
        # `rows`: the service stores the group only if the whole stream arrived (a cut put is refused)
        body = {"group_id": group_id, "rows": table.num_rows, "slot": slot}
        descriptor = flight.FlightDescriptor.for_command(json.dumps(body).encode())

        def put(client: flight.FlightClient) -> bool:
            writer, _ = client.do_put(descriptor, table.schema, self._options())
            writer.write_table(table)
            writer.close()
            return True

        try:
            return self._retry(put)
        except BufferRefusedError as e:
            if e.code == "duplicate":
                return False
            raise

    # -- learner side ---------------------------------------------------------
    def get_batch(self, n_groups: int, timeout_s: Optional[float] = None, poll_s: float = 10.0) -> Batch:
        """The oldest `n_groups` admissible groups; waits for them (TimeoutError after
        `timeout_s`, forever when None). Serve it again with the same id on retry."""
        request_id = uuid.uuid4().hex
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        dropped = 0
        while True:
            wait = poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic()))
            ticket = flight.Ticket(json.dumps({"n": n_groups, "request_id": request_id, "wait_s": wait}).encode())
            try:
                table = self._retry(lambda c: c.do_get(ticket, self._options(wait)).read_all())
            except pa.ArrowCancelled:
                # a signal landed while pyarrow read the batch and its Python handler returned
                # (the learner's SIGTERM: finish this step, then stop): pyarrow cancels the read
                # all the same; the same request id is served the same batch again
                log.info("buffer %s: reading a batch was cancelled by a signal; asking again", self.url)
                continue
            meta = json.loads(table.schema.metadata[BATCH_META])
            dropped += meta["dropped_stale"]
            if meta["batch_id"]:
                with self._lock:
                    self._served[meta["batch_id"]] = list(meta["group_ids"])
                    while len(self._served) > 64:
                        self._served.popitem(last=False)
                return Batch(
                    meta["batch_id"], table.replace_schema_metadata(None), meta["group_ids"], dropped, meta["version"]
                )
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"buffer {self.url}: fewer than {n_groups} admissible groups after {timeout_s} s")

    def ack(self, batch_id: str) -> int:
        """The batch was trained: its groups are never served again. Returns their count
        (0 when this batch was acked already)."""
        with self._lock:
            group_ids = self._served.pop(batch_id, [])
        return self._action("ack", {"batch_id": batch_id, "group_ids": group_ids})["acked"]

    def requeue(self, batch_id: str = "") -> int:
        """Put an unacked batch (all of them when no id) back at the head of the queue."""
        return self._action("requeue", {"batch_id": batch_id})["requeued"]

    def set_version(self, version: int) -> Dict[str, Any]:
        """The learner's weight version after a push: `{"version", "dropped_stale"}`."""
        return self._action("set_version", {"version": version})

    def stats(self) -> BufferStats:
        """The admission state, what is held, and the counters since the service started."""
        return BufferStats.from_wire(self._action("stats", {}))

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> BufferClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------
    def _action(self, name: str, body: Dict[str, Any], wait_s: float = 0.0) -> Dict[str, Any]:
        action = flight.Action(name, json.dumps(body).encode())

        def call(client: flight.FlightClient) -> Dict[str, Any]:
            results = list(client.do_action(action, self._options(wait_s)))
            return json.loads(results[0].body.to_pybytes())

        return self._retry(call)

    def _options(self, wait_s: float = 0.0) -> flight.FlightCallOptions:
        headers = [(b"authorization", f"Bearer {self.token}".encode())] if self.token else []
        return flight.FlightCallOptions(timeout=self.timeout_s + wait_s, headers=headers)

    def _retry(self, fn: Callable[[flight.FlightClient], Any]) -> Any:
        delay = self.backoff_s
        deadline = time.monotonic() + self.retry_window_s
        attempt = 0
        while True:
            attempt += 1
            with self._lock:
                if self._client is None:
                    self._client = flight.FlightClient(self.url)
                client = self._client
            try:
                return fn(client)
            except flight.FlightServerError as e:
                raise _refusal(e) from None
            except RETRYABLE as e:
                if attempt > self.max_retries and time.monotonic() >= deadline:
                    raise ConnectionError(
                        f"buffer {self.url}: unreachable after {attempt} attempts in {self.retry_window_s:.0f}+ s: {e}"
                    ) from e
                log.warning("buffer %s: %s; reconnecting in %.1f s", self.url, str(e).splitlines()[0], delay)
                with self._lock:  # a fresh connection; other threads may still use the old one
                    if self._client is client:
                        self._client = None
                time.sleep(delay)
                delay = min(delay * 2, 5.0)


def _refusal(e: flight.FlightServerError) -> Exception:
    try:
        code = json.loads(e.extra_info or b"{}").get("code", "")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        code = ""
    message = str(e).split(". Detail:")[0]
    return BufferRefusedError(code or "server", message)
