"""Durable storage of accepted groups: one Arrow IPC file per group plus a ledger.

`groups/<seq>.arrow` is written and fsynced before the put is acknowledged; an
IPC file is readable only once its footer (written last) is there, so recovery
deletes the unreadable leftovers of a put that a crash cut short. The directory
is not fsynced: on journaling file systems (ext4, xfs) the fsync of a new file
commits its name too, and a second fsync per put would double the cost of a put
on the disk. `ledger.jsonl` (append-only, fsynced)
records what must survive a crash besides the files: acked and dropped group ids
(so a retried put of a trained group is still refused), the learner's version and the
admission clock (areal_mem/staleness.py), which counts the acked batches.
Acked and dropped files are deleted once the ledger says so; recovery finishes
any deletion a crash interrupted.

Days-long runs: each ack/drop record carries the newest start version of its
groups (`start`). Once that is older than `version - max_staleness`, a re-put of
those ids would be dropped as stale anyway, so recovery does not load them, and
rewrites the ledger without them once `compact_min_records` such records piled up
(`acked_total` and `acked_batches_total` keep the counts): memory and the ledger stay bounded.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Set, Tuple

import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)
_GROUP_FILE = re.compile(r"^(\d{12})\.arrow$")


@dataclass
class GroupEntry:
    seq: int  # acceptance order; batches take the earliest start_version first, then this
    group_id: str
    path: str
    start_version: int  # the oldest trajectory start in the group
    rows: int
    nbytes: int
    table: Optional[pa.Table] = None  # held in memory, or None: read back from disk


@dataclass
class Recovered:
    pending: List[GroupEntry]  # accepted, not acked or dropped, by seq
    done_ids: Set[str]  # acked or dropped (within the staleness horizon): refused if put again
    done_starts: Dict[str, int]  # done id -> newest start version of its ledger record
    acked: int  # groups trained; they still count as accepted for admission
    version: int
    next_seq: int
    acked_batches: int = 0  # ack records: batches the learner trained
    clock: Optional[int] = None  # the admission clock last recorded (None: none was)
    served: Dict[str, List[str]] = field(default_factory=dict)  # served, unacked batch id -> its group ids


class GroupStore:
    compact_min_records = 1000  # rewrite the ledger once this many records are past the horizon

    def __init__(self, root: str, fsync: bool = True) -> None:
        self.root = root
        self.fsync = fsync
        self.groups_dir = os.path.join(root, "groups")
        self.ledger_path = os.path.join(root, "ledger.jsonl")
        os.makedirs(self.groups_dir, exist_ok=True)
        # One service per run dir: two would both serve (and delete) the same groups.
        # The kernel drops the lock when the process dies, SIGKILL included.
        self._lock = open(os.path.join(root, "lock"), "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise ValueError(f"{root} is in use by another buffer service") from None
        # Deleting done files is off the ack's path; recovery finishes what a crash cut short.
        self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="buffer-delete")

    def close(self) -> None:
        """Finish pending deletions and release the run dir."""
        self._deleter.shutdown(wait=True)
        self._lock.close()

    def write(self, seq: int, group_id: str, table: pa.Table) -> GroupEntry:
        """Store one validated group; it is on disk (fsynced when configured) on return."""
        path = os.path.join(self.groups_dir, f"{seq:012d}.arrow")
        try:
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            if self.fsync:
                _fsync_path(path)
        except BaseException:
            _unlink(path)
            raise
        return GroupEntry(seq, group_id, path, start_version(table), table.num_rows, table.nbytes)

    @staticmethod
    def read(entry: GroupEntry) -> pa.Table:
        if entry.table is not None:
            return entry.table
        with pa.memory_map(entry.path) as source:
            return pa.ipc.open_file(source).read_all()

    def record_done(self, kind: str, entries: Iterable[GroupEntry], **extra) -> None:
        """Ledger `kind` ("ack" or "drop") for these groups, then delete their files."""
        entries = list(entries)
        start = max((e.start_version for e in entries), default=0)
        self._append({kind: [e.group_id for e in entries], "start": start, **extra})
        paths = [e.path for e in entries]
        self._deleter.submit(lambda: list(map(_unlink, paths)))

    def record_served(self, batch_id: str, group_ids: List[str]) -> None:
        """Ledger the groups served under `batch_id`: after a restart, an ack of that batch acks
        exactly these (and no group a caller merely names)."""
        self._append({"serve": batch_id, "groups": group_ids})

    def record_version(self, version: int, clock: Optional[int]) -> None:
        self._append({"version": version, "clock": clock})

    def recover(self, max_staleness: Optional[int] = None) -> Recovered:
        """Rebuild the state from the run dir: finish deletions, drop torn puts. With
        `max_staleness`, forget done ids past the staleness horizon and compact the ledger."""
        records, acked, version, batches, clock, served = self._read_ledger()
        horizon = None if max_staleness is None else version - max_staleness
        kept = [r for r in records if horizon is None or r.get("start", horizon) >= horizon]
        done: Dict[str, int] = {}
        for rec in records:  # every done id: a file left by a crash must still be deleted
            for gid in (*rec.get("ack", ()), *rec.get("drop", ())):
                done[gid] = rec.get("start", version)
        max_seq = -1  # file names may be reused once acked files are gone; order is kept
        pending: List[GroupEntry] = []
        for name in sorted(os.listdir(self.groups_dir)):
            path = os.path.join(self.groups_dir, name)
            m = _GROUP_FILE.match(name)
            if not m:
                continue
            seq = int(m.group(1))
            try:
                with pa.memory_map(path) as source:
                    table = pa.ipc.open_file(source).read_all()
            except (pa.ArrowInvalid, OSError) as e:  # no footer: the put never returned
                log.warning("%s: deleting a group file cut short by a crash (%s)", path, e)
                _unlink(path)
                continue
            max_seq = max(max_seq, seq)
            gid = table.column("group_id")[0].as_py()
            if gid in done:
                _unlink(path)  # the ledger says acked/dropped; the crash came before the delete
                continue
            pending.append(GroupEntry(seq, gid, path, start_version(table), table.num_rows, table.nbytes))
        done = {gid: rec.get("start", version) for rec in kept for gid in (*rec.get("ack", ()), *rec.get("drop", ()))}
        live = {e.group_id for e in pending}
        served = {b: gids for b, gids in served.items() if gids and all(g in live for g in gids)}
        if len(records) - len(kept) >= self.compact_min_records:
            kept_acked = sum(len(rec.get("ack", ())) for rec in kept)
            kept_batches = sum(1 for rec in kept if "ack" in rec)
            head = {
                "version": version,
                "acked_total": acked - kept_acked,
                "acked_batches_total": batches - kept_batches,
            }
            self._rewrite(
                [
                    {**head, **({} if clock is None else {"clock": clock})},
                    *({k: v for k, v in r.items() if k != "version"} for r in kept),
                    *({"serve": b, "groups": gids} for b, gids in served.items()),
                ]
            )
            log.info(
                "%s: compacted; %d record(s) past the staleness horizon forgotten",
                self.ledger_path,
                len(records) - len(kept),
            )
        return Recovered(pending, set(done), done, acked, version, max_seq + 1, batches, clock, served)

    def _read_ledger(self) -> Tuple[List[Dict], int, int, int, Optional[int], Dict[str, List[str]]]:
        """(ack/drop records, groups acked in all, version, batches acked in all, clock,
        served batches not acked: id -> group ids)."""
        records: List[Dict] = []
        served: Dict[str, List[str]] = {}
        acked = batches = version = 0
        clock = None
        if not os.path.exists(self.ledger_path):
            return records, acked, version, batches, clock, served
        with open(self.ledger_path, "rb") as f:
            data = f.read()
        complete = data.rfind(b"\n") + 1
        if complete < len(data):  # no newline: an append the crash cut short, never confirmed
            log.warning("%s: dropping a torn last record", self.ledger_path)
            os.truncate(self.ledger_path, complete)
        for lineno, line in enumerate(data[:complete].decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec: Dict = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{self.ledger_path}:{lineno}: corrupt ledger record: {e}") from None
            if "serve" in rec:
                served[rec["serve"]] = list(rec.get("groups", ()))
            if "ack" in rec and rec.get("batch_id") in served:
                del served[rec["batch_id"]]
            if "ack" in rec or "drop" in rec:
                records.append(rec)
            acked += len(rec.get("ack", ())) + rec.get("acked_total", 0)
            batches += ("ack" in rec) + rec.get("acked_batches_total", 0)
            version = rec.get("version", version)
            clock = rec.get("clock", clock)
        return records, acked, version, batches, clock, served

    def _rewrite(self, records: List[Dict]) -> None:
        """Replace the ledger atomically (write, fsync, rename, fsync the directory)."""
        tmp = self.ledger_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.ledger_path)
        _fsync_path(self.root)

    def _append(self, record: Dict) -> None:
        with open(self.ledger_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())


def start_version(table: pa.Table) -> int:
    """The oldest trajectory start of a group: what the staleness rule judges it by."""
    return int(pc.min(table.column("start_version")).as_py())


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
