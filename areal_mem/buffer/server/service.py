"""The replay buffer as an Arrow Flight service.

- `do_put` (descriptor: JSON command `{"group_id", "rows", "slot"?}`): one whole group
  per stream, validated against the context-row schema (types and values: `validate_group`),
  refused if its id was ever accepted or if it is already stale ("stale": never stored, so an
  id dropped as stale stays refused after the horizon forgets it), on disk before the call returns. `rows` is the row
  count the writer sends: a stream that ends short of it (a writer that died mid-put: gRPC
  ends the cancelled stream like a finished one) is refused and nothing is stored, so a
  retry of the whole group is accepted.
- `do_get` (ticket: JSON `{"n", "request_id", "wait_s"?}`): the `n` admissible
  groups that started at the earliest versions (then in acceptance order) as one
  stream; stale groups are dropped and counted first.
  The batch id is the request id, so a retried ticket streams the same batch
  again; the schema metadata `areal_mem.batch` carries
  `{"batch_id", "group_ids", "dropped_stale", "version"}` (batch_id "" when
  `wait_s` passed with fewer than `n` groups).
- A put stream is refused as "invalid" at the first record batch that takes it over
  `max_group_bytes` (counted over the whole put), so the service holds at most the limit plus
  one batch of a stream (gRPC receives one batch whole before the service sees it; the
  client sends a group as one batch); a schema of more than `max_columns` columns or with
  duplicate names is refused before any batch is read.
- Versions only move forward, by at most `max_version_step` per `set_version`; an `ack`
  acks exactly the groups served under its batch id (after a restart of the buffer: the
  ids the ledger recorded when it served them), never a group named by the caller alone.
- `do_action` (JSON bodies, JSON results): acquire, release, set_version, ack,
  requeue, stats (see `ACTIONS`).

Refusals are `FlightServerError`s whose `extra_info` is JSON `{"code": ...}`
("invalid", "duplicate", "stale", "unknown_batch", "storage"); the service stays up.
JSON bodies are strict: unknown fields, wrong types and bodies over `MAX_JSON_BYTES` are
refused as "invalid" naming the field (this is our own protocol; a typo must not pass).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import Counter, OrderedDict
from typing import Any, Dict, List, Optional

import pyarrow as pa
import pyarrow.flight as flight

from ...config.buffer import BufferConfig
from ...security import check_bind, token_matches
from ...staleness import StalenessManager
from ..schema import CONTEXT_SCHEMA, SchemaError, concat_groups, validate_group
from ..wire import BATCH_META
from .conn_guard import ConnectionGuard, ConnLimits, raise_handle_limit
from .store import GroupEntry, GroupStore, start_version

log = logging.getLogger(__name__)
MAX_WAIT_S = 30.0  # longest server-side wait of one call; clients poll again
ACKED_BATCHES_KEPT = 1024  # acked batch ids remembered to answer a retried ack "already"
MAX_JSON_BYTES = 64 << 10  # a descriptor, ticket or action body is a few fields
MAX_VERSION = 2**31 - 1  # versions are int32 in the context rows
ACTIONS = {
    "acquire": '{"wait_s"?} -> {"slot": id or "", "capacity", "version"}',
    "release": '{"slot"} -> {"released": bool}',
    "set_version": '{"version"} -> {"version", "dropped_stale"}',
    "ack": '{"batch_id", "group_ids"?} -> {"acked": groups, "already": bool}',
    "requeue": '{"batch_id"?} -> {"requeued": groups} (all unacked batches when no id)',
    "stats": "{} -> counters",
}
FIELDS = {  # the fields each JSON body may hold
    "do_put": ("group_id", "rows", "slot"),
    "do_get": ("n", "request_id", "wait_s"),
    "acquire": ("wait_s",),
    "release": ("slot",),
    "set_version": ("version",),
    "ack": ("batch_id", "group_ids"),
    "requeue": ("batch_id",),
    "stats": (),
}


def refuse(code: str, message: str) -> flight.FlightServerError:
    return flight.FlightServerError(message, json.dumps({"code": code}).encode())


class BufferService(flight.FlightServerBase):
    def __init__(self, data_dir: str, cfg: BufferConfig) -> None:
        """`cfg.max_running_groups` must be set (the command derives it from the rollout config)."""
        check_bind("buffer", cfg.host, cfg.token)
        if cfg.max_group_mb <= 0:  # before the store is opened and recovered
            raise ValueError(f"buffer.max_group_mb must be > 0, got {cfg.max_group_mb:g}")
        if cfg.max_running_groups < 1:
            raise ValueError(f"buffer.max_running_groups must be at least 1, got {cfg.max_running_groups}")
        self.store = GroupStore(data_dir, fsync=cfg.fsync)
        rec = self.store.recover(cfg.max_staleness)
        self.staleness = StalenessManager(
            cfg.max_staleness,
            cfg.batch_groups,
            cfg.max_running_groups,
            version=rec.version,
            trained_batches=rec.acked_batches,
            clock=rec.clock,
        )
        self.max_memory_groups = cfg.max_memory_groups
        self.max_group_bytes = int(cfg.max_group_mb * (1 << 20))
        self.max_columns = cfg.max_columns
        self.vocab_size = cfg.vocab_size
        self.max_version_step = cfg.max_version_step
        # batches served before a restart and not acked: id -> group ids (from the ledger)
        self._served_before: Dict[str, List[str]] = dict(rec.served)
        self.slot_ttl_s = cfg.slot_ttl_s
        self._cond = threading.Condition()
        self._pending: Dict[int, GroupEntry] = {e.seq: e for e in rec.pending}
        # Refused if put again: pending or served ids, and done ids until they fall behind the
        # staleness horizon (a re-put of those would be dropped as stale), so both stay bounded.
        self._live_ids = {e.group_id for e in rec.pending}
        self._done_ids: Dict[str, int] = dict(rec.done_starts)  # id -> start version
        self._reserved: set = set()  # puts in progress
        self._next_seq = rec.next_seq
        self._batches: Dict[str, List[GroupEntry]] = {}  # served, not acked
        self._acked_batches: OrderedDict[str, None] = OrderedDict()  # the newest ACKED_BATCHES_KEPT
        self._slots: Dict[str, float] = {}  # slot id -> expiry (monotonic; inf: none)
        self._held = 0  # groups whose table is in memory (bounded by max_memory_groups)
        self.staleness.accepted = len(rec.pending) + rec.acked
        self.counters = {
            "groups_put": 0,
            "bytes_put": 0,
            "groups_served": 0,
            "bytes_served": 0,
            "groups_acked": 0,
            "dropped_stale": 0,
            "slots_expired": 0,
            "refused_invalid": 0,
            "refused_duplicate": 0,
            "recovered_groups": len(rec.pending),
        }
        middleware = {"auth": _TokenAuth(cfg.token)} if cfg.token else {}
        netloc = f"[{cfg.host}]" if ":" in cfg.host else cfg.host  # an IPv6 address
        super().__init__(f"grpc://{netloc}:{cfg.port}", middleware=middleware)
        self.url = f"grpc://{netloc}:{self.port}"
        raise_handle_limit()
        limits = ConnLimits(cfg.conn_first_byte_s, cfg.conn_idle_s, cfg.max_connections_per_address)
        self.conn_guard = ConnectionGuard(self.port, limits).start()

    def shutdown(self) -> None:
        self.conn_guard.stop()
        super().shutdown()
        self.store.close()

    # -- do_put ---------------------------------------------------------------
    def _read_group(self, reader, context, rows: int) -> pa.Table:
        """Read a put stream batch by batch, refusing it as soon as it passes `max_group_bytes`
        or `rows`; refuse a stream that ended short of `rows` or was cancelled (a cut put)."""
        names = reader.schema.names
        if len(names) > self.max_columns:
            raise SchemaError(f"the put has {len(names)} columns, more than buffer.max_columns = {self.max_columns}")
        dup = sorted(n for n, k in Counter(names).items() if k > 1)
        if dup:
            raise SchemaError(f"duplicate column(s) {[d[:80] for d in dup[:5]]}")
        chunks: list = []
        size, got = 0, 0
        for chunk in reader:
            if chunk.data is None:  # a metadata-only message carries no rows
                continue
            size += chunk.data.nbytes
            got += chunk.data.num_rows
            if size > self.max_group_bytes:
                del chunk, chunks  # the refused stream's buffers go back to the pool ...
                pa.default_memory_pool().release_unused()  # ... and the pool's to the system
                raise SchemaError(
                    f"the stream passed {size} bytes, over the limit of "
                    f"{self.max_group_bytes} bytes (buffer.max_group_mb)"
                )
            if got > rows:
                raise SchemaError(
                    f"the stream carried more than the {rows} rows its descriptor announced (field 'rows')"
                )
            chunks.append(chunk.data)
        if context.is_cancelled():
            raise SchemaError("the put stream was cancelled before it completed")
        if got != rows:
            raise SchemaError(
                f"the stream ended after {got} of the {rows} rows its descriptor announced (field 'rows'): "
                f"a put cut short"
            )
        return pa.Table.from_batches(chunks, schema=reader.schema)

    def do_put(self, context, descriptor, reader, writer) -> None:
        body = _json_object(descriptor.command, "do_put descriptor", FIELDS["do_put"])
        group_id = _get(body, "group_id", str, "")
        slot = _get(body, "slot", str, "")
        rows = _get(body, "rows", int, None)
        if rows is None or not 1 <= rows <= MAX_VERSION:
            raise refuse(
                "invalid",
                f"group {group_id[:200]!r} refused, nothing stored: do_put descriptor needs field 'rows' (the "
                f"row count the stream carries, 1..{MAX_VERSION}); got {str(rows)[:40]}",
            )
        try:
            table = self._read_group(reader, context, rows)
            group_id = validate_group(
                table,
                group_id,
                vocab_size=self.vocab_size,
                # a token may be sampled by the version a push is delivering before set_version
                max_version=self.staleness.version + self.staleness.max_staleness + 1,
            )
        except (SchemaError, pa.ArrowException) as e:
            with self._cond:
                self.counters["refused_invalid"] += 1
            raise refuse("invalid", f"group {group_id[:200]!r} refused, nothing stored: {e}") from None
        with self._cond:
            if group_id in self._live_ids or group_id in self._done_ids or group_id in self._reserved:
                self.counters["refused_duplicate"] += 1
                if self._slots.pop(slot, None) is not None:  # its group is in already
                    self.staleness.release()
                raise refuse("duplicate", f"group {group_id!r} was already accepted")
            start = start_version(table)
            if self.staleness.is_stale(start):
                # never stored, so a re-put of an id dropped as stale and then forgotten (past the
                # horizon) is refused here too: ids dropped as stale stay refused
                self.counters["dropped_stale"] += 1
                if self._slots.pop(slot, None) is not None:
                    self.staleness.release()
                raise refuse(
                    "stale",
                    f"group {group_id!r} refused, nothing stored: it started at version {start}, older than "
                    f"version {self.staleness.version} - max_staleness {self.staleness.max_staleness} allows",
                )
            self._reserved.add(group_id)
            seq = self._next_seq
            self._next_seq += 1
        table = table.replace_schema_metadata(None)
        try:
            entry = self.store.write(seq, group_id, table)
        except OSError as e:
            with self._cond:
                self._reserved.discard(group_id)
            raise refuse("storage", f"group {group_id!r} could not be stored: {e}") from None
        with self._cond:
            self._reserved.discard(group_id)
            self._live_ids.add(group_id)
            if self._held < self.max_memory_groups:
                entry.table = table
                self._held += 1
            self._pending[seq] = entry
            self.staleness.on_accepted(held_slot=self._slots.pop(slot, None) is not None)
            self.counters["groups_put"] += 1
            self.counters["bytes_put"] += entry.nbytes
            self._cond.notify_all()

    # -- do_get ---------------------------------------------------------------
    def do_get(self, context, ticket):
        body = _json_object(ticket.ticket, "do_get ticket", FIELDS["do_get"])
        n = _get(body, "n", int, 0)
        request_id = _get(body, "request_id", str, "")
        wait_s = _wait_s(body)
        if not 1 <= n <= MAX_VERSION or not request_id:
            raise refuse(
                "invalid",
                f"do_get ticket needs n >= 1 (field 'n', at most {MAX_VERSION}) and a "
                f"non-empty field 'request_id'; got n={str(n)[:40]}, "
                f"request_id={request_id[:80]!r}",
            )
        entries, dropped = self._take(request_id, n, wait_s)
        tables = [self.store.read(e) for e in entries]
        table = concat_groups(tables) if tables else CONTEXT_SCHEMA.empty_table()
        meta = {
            "batch_id": request_id if entries else "",
            "group_ids": [e.group_id for e in entries],
            "dropped_stale": dropped,
            "version": self.staleness.version,
        }
        table = table.replace_schema_metadata({BATCH_META: json.dumps(meta).encode()})
        with self._cond:
            self.counters["bytes_served"] += table.nbytes
        return flight.RecordBatchStream(table)

    def _take(self, batch_id: str, n: int, wait_s: float):
        deadline = time.monotonic() + wait_s
        with self._cond:
            if batch_id in self._batches:  # a retried request: the same batch again
                return self._batches[batch_id], 0
            if batch_id in self._acked_batches:
                raise refuse("invalid", f"batch {batch_id!r} was already acked")
            dropped = 0
            while True:
                dropped += self._drop_stale()
                if len(self._pending) >= n:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return [], dropped
                self._cond.wait(left)
            # earliest start first (then acceptance order): a slow group that finished late is
            # trained before the younger groups that overtook it, not left to turn stale behind them
            order = sorted(self._pending, key=lambda seq: (self._pending[seq].start_version, seq))
            entries = [self._pending.pop(seq) for seq in order[:n]]
            self.store.record_served(batch_id, [e.group_id for e in entries])
            self._batches[batch_id] = entries
            self.counters["groups_served"] += n
            return entries, dropped

    def _drop_stale(self) -> int:
        stale = [e for e in self._pending.values() if self.staleness.is_stale(e.start_version)]
        if not stale:
            return 0
        self.store.record_done("drop", stale, version=self.staleness.version)
        for e in stale:
            del self._pending[e.seq]
        self._mark_done(stale)
        self._forget_tables(stale)
        self.staleness.on_dropped(len(stale))
        self.counters["dropped_stale"] += len(stale)
        log.info("dropped %d stale group(s) at version %d", len(stale), self.staleness.version)
        self._cond.notify_all()  # admission capacity grew
        return len(stale)

    # -- do_action ------------------------------------------------------------
    def list_actions(self, context):
        return [(name, doc) for name, doc in ACTIONS.items()]

    def do_action(self, context, action):
        handler = getattr(self, f"_action_{action.type}", None)
        if action.type not in ACTIONS or handler is None:
            raise refuse("invalid", f"unknown action {action.type!r}; known: {', '.join(ACTIONS)}")
        result = handler(_json_object(action.body.to_pybytes(), f"action {action.type!r} body", FIELDS[action.type]))
        yield flight.Result(json.dumps(result).encode())

    def _action_acquire(self, body: Dict[str, Any]) -> Dict[str, Any]:
        deadline = time.monotonic() + _wait_s(body)
        with self._cond:
            while True:
                self._expire_slots()
                if self.staleness.try_acquire():
                    slot = uuid.uuid4().hex
                    self._slots[slot] = time.monotonic() + self.slot_ttl_s if self.slot_ttl_s else float("inf")
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    slot = ""
                    break
                self._cond.wait(min(left, 1.0) if self.slot_ttl_s else left)
            return {"slot": slot, "capacity": self.staleness.capacity(), "version": self.staleness.version}

    def _action_release(self, body: Dict[str, Any]) -> Dict[str, Any]:
        slot = _get(body, "slot", str, "")
        with self._cond:
            released = self._slots.pop(slot, None) is not None
            if released:
                self.staleness.release()
                self._cond.notify_all()
            return {"released": released}

    def _action_set_version(self, body: Dict[str, Any]) -> Dict[str, Any]:
        version = _get(body, "version", int, None)
        if version is None or not 0 <= version <= MAX_VERSION:
            raise refuse(
                "invalid", f"field 'version': set_version needs a version in 0..{MAX_VERSION}; got {str(version)[:40]}"
            )
        with self._cond:
            now = self.staleness.version
            if not now <= version <= now + self.max_version_step:
                raise refuse(
                    "invalid",
                    f"field 'version': {version} is not in {now}..{now + self.max_version_step} (versions only "
                    f"move forward, by at most buffer.max_version_step = {self.max_version_step} a call)",
                )
            if version != now:
                self.staleness.set_version(version)
                self.store.record_version(version, self.staleness.clock)
                horizon = version - self.staleness.max_staleness
                for gid in [g for g, start in self._done_ids.items() if start < horizon]:
                    del self._done_ids[gid]
            dropped = self._drop_stale()
            self._cond.notify_all()
            return {"version": version, "dropped_stale": dropped}

    def _action_ack(self, body: Dict[str, Any]) -> Dict[str, Any]:
        batch_id = _get(body, "batch_id", str, "")
        group_ids = _get(body, "group_ids", list, [])
        with self._cond:
            if batch_id in self._acked_batches:
                return {"acked": 0, "already": True}
            entries = self._batches.pop(batch_id, None)
            if entries is None and batch_id in self._served_before:
                # served before a restart of the buffer (the ledger says which groups): ack them
                # if none was served again; the caller's ids must be those, if it names any
                served = self._served_before[batch_id]
                if not group_ids or sorted(group_ids) == sorted(served):
                    entries = self._requeued(served)
                    if entries is not None:
                        del self._served_before[batch_id]
            if entries is None:
                raise refuse(
                    "unknown_batch",
                    f"unknown batch {batch_id[:200]!r} (never served, acked already, or its groups were "
                    f"served again after a restart of the buffer); an ack acks only the groups served "
                    f"under its batch id",
                )
            self.store.record_done("ack", entries, batch_id=batch_id)
            self._acked_batches[batch_id] = None
            while len(self._acked_batches) > ACKED_BATCHES_KEPT:
                self._acked_batches.popitem(last=False)
            self._mark_done(entries)
            self._forget_tables(entries)
            self.staleness.on_trained()
            self.counters["groups_acked"] += len(entries)
            return {"acked": len(entries), "already": False}

    def _action_requeue(self, body: Dict[str, Any]) -> Dict[str, Any]:
        batch_id = _get(body, "batch_id", str, "")
        with self._cond:
            ids = [batch_id] if batch_id else list(self._batches)
            if batch_id and batch_id not in self._batches:
                raise refuse("unknown_batch", f"unknown batch {batch_id!r}")
            n = 0
            for bid in ids:
                for e in self._batches.pop(bid):
                    self._pending[e.seq] = e
                    n += 1
            self._cond.notify_all()
            return {"requeued": n}

    def _action_stats(self, body: Dict[str, Any]) -> Dict[str, Any]:
        return self.stats()

    def stats(self) -> Dict[str, Any]:
        with self._cond:
            self._expire_slots()
            s = self.staleness
            return {
                **self.counters,
                "version": s.version,
                "clock": s.clock,
                "accepted": s.accepted,
                "running": s.running,
                "capacity": s.capacity(),
                "max_staleness": s.max_staleness,
                "batch_groups": s.batch_groups,
                "max_running": s.max_running,
                "pending_groups": len(self._pending),
                "outstanding_batches": len(self._batches),
                "outstanding_groups": sum(len(b) for b in self._batches.values()),
                "in_memory_groups": self._held,
            }

    # -- helpers --------------------------------------------------------------
    def _requeued(self, group_ids: List[Any]) -> Optional[List[GroupEntry]]:
        """The pending entries of exactly these ids (a batch the learner trained while the buffer
        restarted), taken out of the queue; None if any is not pending."""
        by_id = {e.group_id: e for e in self._pending.values()}
        if not group_ids or not all(isinstance(g, str) and g in by_id for g in group_ids):
            return None
        entries = [by_id[g] for g in group_ids]
        for e in entries:
            del self._pending[e.seq]
        return entries

    def _mark_done(self, entries: List[GroupEntry]) -> None:
        for e in entries:
            self._live_ids.discard(e.group_id)
            self._done_ids[e.group_id] = e.start_version

    def _forget_tables(self, entries: List[GroupEntry]) -> None:
        for e in entries:
            if e.table is not None:
                e.table = None
                self._held -= 1

    def _expire_slots(self) -> None:
        now = time.monotonic()
        for slot in [s for s, t in self._slots.items() if t <= now]:
            del self._slots[slot]
            self.staleness.release()
            self.counters["slots_expired"] += 1
            log.warning("rollout slot %s expired after %.0f s without a put or release", slot, self.slot_ttl_s)


class _TokenAuth(flight.ServerMiddlewareFactory):
    """Refuse every call that does not carry `authorization: Bearer <token>`."""

    def __init__(self, token: str) -> None:
        self.token = token

    def start_call(self, info, headers):
        values = headers.get("authorization", [])
        if not any(token_matches(v, self.token) for v in values):
            raise flight.FlightUnauthenticatedError("missing or wrong bearer token")
        return None


def _json_object(raw: bytes, what: str, allowed: tuple) -> Dict[str, Any]:
    """A JSON object with only `allowed` fields (empty bytes: {})."""
    if raw and len(raw) > MAX_JSON_BYTES:
        raise refuse("invalid", f"{what} is {len(raw)} bytes, more than the limit of {MAX_JSON_BYTES}")
    try:
        body = json.loads(raw or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise refuse("invalid", f"{what} is not JSON: {type(e).__name__}: {str(e)[:200]}") from None
    if not isinstance(body, dict):
        raise refuse("invalid", f"{what} must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise refuse("invalid", f"{what}: unknown field {unknown[0][:80]!r}; allowed: {', '.join(allowed) or 'none'}")
    return body


def _wait_s(body: Dict[str, Any]) -> float:
    """The server-side wait a call asks for, within 0..MAX_WAIT_S (NaN counts as 0)."""
    wait = _get(body, "wait_s", (int, float), 0.0)
    return float(min(wait, MAX_WAIT_S)) if wait > 0 else 0.0


def _get(body: Dict[str, Any], key: str, typ, default):
    value = body.get(key, default)
    if value is not default and (not isinstance(value, typ) or isinstance(value, bool)):
        names = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
        raise refuse("invalid", f"field {key!r} must be {names}, got {type(value).__name__} {str(value)[:60]}")
    return value
