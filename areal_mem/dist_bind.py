"""torch.distributed stores and gloo groups that listen on the configured address only.

torch's `TCPStore` master listens on every interface (`::`) whatever host it is given, and a
gloo group binds the address of the machine's hostname; neither carries a token (as in every
framework of the field: the network must keep strangers off those ports). So the learner's
group and the weight-update group bind the address they were configured with: the store
listens on a socket bound here (torch's `master_listen_fd`), and gloo is pointed at the
interface that holds that address (`GLOO_SOCKET_IFNAME`, read when a group is created).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from datetime import timedelta
from typing import Iterator, Optional

import psutil  # type: ignore[import-untyped]
import torch.distributed as dist


def _ips(host: str) -> set:
    try:
        return {ipaddress.ip_address(str(a[4][0]).split("%")[0]) for a in socket.getaddrinfo(host, None)}
    except (OSError, ValueError):
        return set()


def interface_of(host: str) -> Optional[str]:
    """The name of the local network interface holding `host`'s address; None when no local
    interface holds it (another machine's address, or one that does not resolve)."""
    wanted = _ips(host)
    for name, addrs in psutil.net_if_addrs().items():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                with contextlib.suppress(ValueError):
                    if ipaddress.ip_address(a.address.split("%")[0]) in wanted:
                        return name
    return None


@contextlib.contextmanager
def gloo_on(host: str) -> Iterator[None]:
    """Gloo groups created inside bind the interface holding `host` when it is local (the
    variable is put back after, so the processes this one starts are not bound by it)."""
    iface = interface_of(host)
    old = os.environ.get("GLOO_SOCKET_IFNAME")
    if iface is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = iface
    try:
        yield
    finally:
        if iface is not None:
            if old is None:
                os.environ.pop("GLOO_SOCKET_IFNAME", None)
            else:
                os.environ["GLOO_SOCKET_IFNAME"] = old


def master_store(host: str, port: int, world_size: int, timeout: timedelta, wait_for_workers: bool) -> dist.TCPStore:
    """The master of a TCPStore, listening on `host:port` only (not on every interface)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    # the store owns the descriptor from here on (it closes it with the store)
    return dist.TCPStore(
        host,
        port,
        world_size,
        is_master=True,
        timeout=timeout,
        wait_for_workers=wait_for_workers,
        master_listen_fd=sock.detach(),
    )
