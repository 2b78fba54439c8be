"""The learner's process group and the weight-update group listen on the configured address only:
torch's store master listens on every interface (`::`) unless given a socket bound to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from areal_mem.net import free_port

LISTENING = """
import json, os, sys, psutil
def listening():
    return sorted({c.laddr.ip for c in psutil.Process().net_connections("inet") if c.status == "LISTEN"})
"""


def _run(body: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", LISTENING + textwrap.dedent(body)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_torchs_own_store_listens_on_every_interface():
    """What the project works around (if torch changes this, the workaround may go)."""
    got = _run("""
        from datetime import timedelta
        import torch.distributed as dist
        from areal_mem.net import free_port
        store = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True, timeout=timedelta(seconds=30))
        print(json.dumps({"ips": listening()}))
    """)
    assert got["ips"] == ["::"]


RANK = """
from areal_mem.learner import distributed as D
D.init_group("gloo")
print(json.dumps({"ips": listening(), "sum": D.all_reduce_sums({"a": 1.0 + D.rank()})["a"]}))
"""


def test_the_learners_group_listens_on_its_master_address_only():
    """Two ranks as the launcher starts them (env://), and a group of one: every listening socket
    of every rank is on 127.0.0.1 (torch's env:// store would listen on `::`)."""
    port = free_port()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", LISTENING + RANK], env={**env, "RANK": str(r)}, stdout=subprocess.PIPE, text=True
        )
        for r in (0, 1)
    ]
    outs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in ranks]
    assert outs == [{"ips": ["127.0.0.1"], "sum": 3.0}] * 2
    alone = _run(RANK)
    assert alone == {"ips": ["127.0.0.1"], "sum": 1.0}


CHILD = """
import torch
from areal_mem.weight_transport import BucketMeta, WeightGroup
group = WeightGroup.join("127.0.0.1", int(sys.argv[1]), 2, 1, "w", "gloo", 60.0)
ips = listening()
got = group.receive_bucket(BucketMeta(["w"], ["float32"], [[6]]))[0][1].tolist()
print(json.dumps({"ips": ips, "got": got}))
"""


def test_the_weight_group_listens_on_the_master_address_only():
    """Rank 0 (the learner) here, a generator rank in a child process, both on 127.0.0.1: one
    broadcast arrives, and nothing of either listens beyond 127.0.0.1 (the store, gloo's pairs)."""
    got = _run(f"""
        import subprocess, torch
        from areal_mem.net import free_port
        from areal_mem.weight_transport import WeightGroup
        port = free_port()
        child = subprocess.Popen([sys.executable, "-c", {LISTENING + CHILD!r}, str(port)], stdout=subprocess.PIPE, text=True)
        group = WeightGroup.join("127.0.0.1", port, 2, 0, "w", "gloo", 60.0)
        ips = listening()
        group.broadcast_bucket([("w", torch.arange(6, dtype=torch.float32))])
        out, _ = child.communicate(timeout=60)
        print(json.dumps({{"ips": ips, "child": json.loads(out.strip().splitlines()[-1])}}))
    """)
    assert got == {"ips": ["127.0.0.1"], "child": {"ips": ["127.0.0.1"], "got": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}}
