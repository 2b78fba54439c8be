"""Connection floods without a token, and clients that never read their answers, against the real
retriever and embedded generator (`areal_mem/http_guard.py`). The attacker connects from
127.0.0.1, the honest client from 127.0.0.2 (all of 127.0.0.0/8 is loopback): a flood of idle
connections from one address must not lock another address out, and a client that does not read
its `/retrieve` answers holds a bounded number of answer bytes for a bounded time.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from urllib.parse import urlparse

import pytest

HONEST = "127.0.0.2"


def _loopback_alias_works() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 9), timeout=0.2, source_address=(HONEST, 0)):
            pass
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _loopback_alias_works(), reason="no 127.0.0.2 on this host's loopback")


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _honest_call(url: str, token: str, method: str, path: str, body=None, timeout: float = 10.0):
    """(status, JSON) of one request from 127.0.0.2 on a fresh connection; status 0 if refused."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout, source_address=(HONEST, 0))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"null")
    except OSError:
        return 0, None
    finally:
        conn.close()


class IdleFlood:
    """`n` idle connections (no byte sent) from 127.0.0.1, reopened as soon as the server closes
    one, as the probe's attacker did; counts the connections it (re)opened."""

    def __init__(self, url: str, n: int):
        u = urlparse(url)
        self.addr, self.n, self.stop, self.opened = (u.hostname, u.port), n, threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self):
        try:
            s = socket.create_connection(self.addr, timeout=1.0, source_address=("127.0.0.1", 0))
        except OSError:
            return None
        s.setblocking(False)
        self.opened += 1
        return s

    def _run(self) -> None:
        socks = [s for s in (self._connect() for _ in range(self.n)) if s is not None]
        while not self.stop.is_set():
            for i, s in enumerate(socks):
                try:
                    if s.recv(1) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                s.close()  # closed by the server: retake the slot
                socks[i] = self._connect() or s
            time.sleep(0.05)
        for s in socks:
            s.close()

    def __enter__(self):
        self.thread.start()
        time.sleep(2.0)  # the flood is in place
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _answer_rate(url: str, token: str, path: str, body, count: int) -> float:
    ok = 0
    for _ in range(count):
        status, _ = _honest_call(url, token, "POST" if body is not None else "GET", path, body)
        ok += status == 200
    return ok / count


@pytest.fixture(scope="module")
def guarded_retriever(world_dir, tmp_path_factory):
    """BM25 over the world's corpus with the default connection limits, and a 2 s idle timeout."""
    from areal_mem.retriever.build import build_index
    from areal_mem.retriever.launch import start_retriever

    index = str(tmp_path_factory.mktemp("conn") / "bm25")
    build_index(os.path.join(world_dir, "corpus.jsonl"), index, "bm25", show_progress=False)
    overrides = [
        "retriever.threads=1",
        "retriever.http_idle_timeout_s=2",
        "retriever.http_read_timeout_s=3",
        "retriever.max_unsent_mb_per_client=4",
        "retriever.max_top_n=100",
    ]
    with start_retriever(index, token="conn-token", overrides=overrides) as handle:
        yield handle


def test_an_idle_flood_from_one_address_leaves_another_served(guarded_retriever):
    """1,100 idle connections from 127.0.0.1 (past the 1,024 slots), reopened whenever closed:
    127.0.0.2 keeps every answer; the server holds at most `max_connections_per_client` (512)
    of the flood's sockets."""
    h = guarded_retriever
    pid = h.child.proc.pid
    base = _fds(pid)
    with IdleFlood(h.url, 1100) as flood:
        rate = _answer_rate(h.url, "conn-token", "/search", {"query": "capital city", "top_n": 2}, 100)
        held = _fds(pid) - base
    print(f"retriever: 1,100 idle sockets from 127.0.0.1 ({flood.opened} opened): 127.0.0.2 answered {rate:.0%}")
    print(f"  server fds held by the flood: {held}")
    assert rate >= 0.99
    assert held <= 512 + 16


def test_the_generator_serves_another_address_through_an_idle_flood(generator_service):
    """The same flood against the embedded generator (default limits, 5 s idle timeout)."""
    svc = generator_service
    body = {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 1}}
    with IdleFlood(svc.url, 1100) as flood:
        rate = _answer_rate(svc.url, svc.token, "/generate", body, 50)
        health = _answer_rate(svc.url, svc.token, "/health", None, 50)
    print(f"generator: 1,100 idle sockets ({flood.opened} opened): /generate {rate:.0%}, /health {health:.0%}")
    assert rate >= 0.99 and health >= 0.99


def _unread_retrieve(url: str, token: str, n_queries: int) -> socket.socket:
    """Send one /retrieve from 127.0.0.1 with a small receive buffer and never read the answer."""
    u = urlparse(url)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.bind(("127.0.0.1", 0))
    s.connect((u.hostname, u.port))
    body = json.dumps({"queries": [f"city river {i}" for i in range(n_queries)], "topk": 100}).encode()
    head = f"POST /retrieve HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
    s.sendall(head.encode() + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    return s


def _unread_round(h, n: int, queries: int):
    """`n` unread /retrieve answers from 127.0.0.1 while 127.0.0.2 searches; once the read
    timeout is past: (peak RSS, connections the server ended, honest statuses)."""
    pid = h.child.proc.pid
    socks = [_unread_retrieve(h.url, "conn-token", queries) for _ in range(n)]
    try:
        peak, statuses = _rss_mb(pid), []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            statuses.append(_honest_call(h.url, "conn-token", "POST", "/search", {"query": "capital", "top_n": 2})[0])
            peak = max(peak, _rss_mb(pid))
        time.sleep(3.5)  # past the read timeout: every answer not taken is dropped
        ended = 0
        for s in socks:
            s.settimeout(0.5)
            try:
                while s.recv(1 << 20):
                    pass
                ended += 1  # closed by the server
            except (ConnectionResetError, TimeoutError):
                ended += 1
    finally:
        for s in socks:
            s.close()
    return peak, _rss_mb(pid), ended, statuses, h.health()["connections"]


def test_a_client_that_never_reads_its_answers_holds_bounded_memory(guarded_retriever):
    """Rounds of 20 connections each asking for a ~7 MB /retrieve answer and never reading it:
    past 4 MiB (`max_unsent_mb_per_client`) of answers not taken, the next ones are a 429; the
    ones taken are aborted after `http_read_timeout_s` (3 s), so nothing accumulates from one
    round to the next (before: every unread answer stayed, 310 -> 1,009 MB in the probe).
    127.0.0.2 is served throughout."""
    h = guarded_retriever
    pid = h.child.proc.pid
    _, one = _honest_call(h.url, "conn-token", "POST", "/retrieve", {"queries": ["city river 1"], "topk": 100})
    answer_mb = len(json.dumps(one)) * 400 / 2**20
    base = _rss_mb(pid)
    rounds = [_unread_round(h, 20, 400) for _ in range(4)]
    aborted = 0
    for i, (peak, after, ended, statuses, conns) in enumerate(rounds):
        print(
            f"round {i}: 20 unread ~{answer_mb:.1f} MB /retrieve answers: RSS {base:.0f} MB -> peak {peak - base:+.0f}"
            f" -> after {after - base:+.0f} MB; {ended} of 20 connections ended;"
            f" 127.0.0.2: {statuses.count(200)}/{len(statuses)} answered; service: {conns}"
        )
        assert ended == 20
        assert statuses and statuses.count(200) == len(statuses)
        assert conns["unsent_bytes"] == 0  # every answer not taken was dropped
        assert conns["aborted"] > aborted  # by the read timeout, this round too
        aborted = conns["aborted"]
    assert answer_mb > 4  # each answer alone is over the budget: one at a time goes through
    # 80 answers were left unread; what stays is the allocator's high-water mark of computing 20
    # answers at once (held answers would be 80 x answer_mb and grow with every round)
    assert rounds[-1][1] - base < 0.5 * 80 * answer_mb
    assert _honest_call(h.url, "conn-token", "GET", "/health")[0] == 200
