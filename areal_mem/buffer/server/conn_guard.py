"""Bounds on the connections to the buffer's Flight port, which gRPC itself does not bound here.

pyarrow's Flight server exposes no gRPC server option (no keepalive, max connection idle or
age, no connection cap), and gRPC keeps a connection that finished its HTTP/2 handshake open
for ever: a client without the token can open connections until the process runs out of file
handles, and then an honest put waits until DEADLINE_EXCEEDED. The connections are this
process's own sockets, so a thread looks at them every `scan_s` (/proc/self/fd and
/proc/net/tcp*: which socket is a connection to the port, and from where; the kernel's
TCP_INFO: bytes received, milliseconds since data last moved) and shuts down:

- a connection that sent no byte within `first_byte_s` of being seen (a real gRPC client sends
  its preface at once);
- a connection with no data either way for `idle_s` (longer than any call's server-side wait,
  so a waiting `do_get` is never cut; an honest client reconnects on its next call);
- past `per_address` connections from one address, the newest ones.

gRPC sees the shutdown as the peer leaving and frees the connection. A shut-down honest
connection costs its client one reconnect, which the client's retry covers.

The guard itself needs file handles to look (the /proc files, a dup of each socket): the service
raises its soft handle limit to the hard one (1,024 is a common soft limit; floods from one
address stay far below any limit under the cap), and the guard holds a few spare handles that
it gives up for a scan that found none left.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import socket
import struct
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

log = logging.getLogger(__name__)

ESTABLISHED = "01"
# struct tcp_info (linux/tcp.h): u32 tcpi_last_data_sent at 44, tcpi_last_data_recv at 52,
# u64 tcpi_bytes_received at 128 (kernel >= 4.1)
TCP_INFO_LEN = 136
SPARE_HANDLES = 8


@dataclass(frozen=True)
class ConnLimits:
    first_byte_s: float = 10.0
    idle_s: float = 300.0
    per_address: int = 256
    scan_s: float = 1.0


def _hex_addr(text: str) -> str:
    """'0100007F:1F90' -> '127.0.0.1' (IPv4 or IPv6 as /proc/net/tcp* writes them)."""
    raw = bytes.fromhex(text.split(":")[0])
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    if words[:12] == b"\0" * 10 + b"\xff\xff":  # an IPv4 client of a dual-stack socket
        return socket.inet_ntop(socket.AF_INET, words[12:])
    return socket.inet_ntop(socket.AF_INET6, words)


def connections(port: int) -> Dict[int, str]:
    """Established connections to local `port`: socket inode -> peer address."""
    out: Dict[int, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == ESTABLISHED and int(cols[1].split(":")[1], 16) == port:
                        out[int(cols[9])] = _hex_addr(cols[2])
        except FileNotFoundError:  # no IPv6
            continue
    return out


def socket_fds() -> Dict[int, int]:
    """This process's socket descriptors: inode -> fd."""
    out: Dict[int, int] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out[int(target[8:-1])] = int(name)
    return out


def _info(fd: int, inode: int) -> Optional[Tuple[int, float]]:
    """(bytes received, seconds since data last moved either way) of the socket `fd` if it is
    still `inode` (the fd may have been closed and reused since it was listed)."""
    try:
        dup = os.dup(fd)
    except OSError:
        return None
    try:
        if os.fstat(dup).st_ino != inode:
            return None
        with socket.socket(fileno=dup) as s:
            dup = -1
            raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
    except OSError:
        return None
    finally:
        if dup >= 0:
            os.close(dup)
    if len(raw) < TCP_INFO_LEN:
        return None
    sent, recv = struct.unpack_from("<I", raw, 44)[0], struct.unpack_from("<I", raw, 52)[0]
    return struct.unpack_from("<Q", raw, 128)[0], min(sent, recv) / 1000.0


def _shut(fd: int, inode: int) -> bool:
    try:
        dup = os.dup(fd)
    except OSError:
        return False
    try:
        if os.fstat(dup).st_ino != inode:
            return False
        with socket.socket(fileno=dup) as s:
            dup = -1
            s.shutdown(socket.SHUT_RDWR)
        return True
    except OSError:
        return False
    finally:
        if dup >= 0:
            os.close(dup)


def raise_handle_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            return want
        except (ValueError, OSError):
            pass
    return soft


class ConnectionGuard:
    """The thread that applies `limits` to the connections of `port` (module docstring)."""

    def __init__(self, port: int, limits: ConnLimits) -> None:
        self.port, self.limits = port, limits
        self.first_seen: Dict[int, float] = {}  # inode -> monotonic time first listed
        self.closed = {"first_byte": 0, "idle": 0, "per_address": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flight-conn-guard", daemon=True)
        self._spare: List[int] = []
        self._reserve()

    def _reserve(self) -> None:
        try:
            while len(self._spare) < SPARE_HANDLES:
                self._spare.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass

    def start(self) -> ConnectionGuard:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for fd in self._spare:
            os.close(fd)
        self._spare = []

    def _run(self) -> None:
        while not self._stop.wait(self.limits.scan_s):
            try:
                try:
                    self.scan()
                except OSError as e:
                    if e.errno != errno.EMFILE or not self._spare:
                        raise
                    for fd in self._spare:  # out of handles (the flood took them): use the spares
                        os.close(fd)
                    self._spare = []
                    self.scan()
                    self._reserve()
            except Exception:  # noqa: BLE001 - the guard must outlive one bad scan
                log.exception("connection guard scan failed")

    def scan(self) -> List[Tuple[str, str]]:
        """One pass; the (peer, reason) of each connection shut down."""
        now, lim = time.monotonic(), self.limits
        conns, fds = connections(self.port), socket_fds()
        self.first_seen = {i: self.first_seen.get(i, now) for i in conns}
        by_peer: Dict[str, List[int]] = defaultdict(list)
        shut: List[Tuple[str, str]] = []
        for inode, peer in conns.items():
            fd = fds.get(inode)
            info = None if fd is None else _info(fd, inode)
            if fd is None or info is None:
                continue  # the client's end of a connection in this process, or gone
            received, quiet_s = info
            reason = None
            if received == 0 and now - self.first_seen[inode] >= lim.first_byte_s:
                reason = "first_byte"
            elif quiet_s >= lim.idle_s:
                reason = "idle"
            if reason and _shut(fd, inode):
                shut.append((peer, reason))
            elif not reason:
                by_peer[peer].append(inode)
        for peer, inodes in by_peer.items():
            for inode in sorted(inodes, key=lambda i: (self.first_seen[i], i))[lim.per_address :]:
                if _shut(fds[inode], inode):
                    shut.append((peer, "per_address"))
        for _peer, reason in shut:
            self.closed[reason] += 1
        if shut:
            log.warning("closed %d connection(s) to the Flight port: %s", len(shut), dict(self.closed))
        return shut
