"""Security of every service, through the real `serve` commands on 127.0.0.1.

Loopback by default; a non-loopback bind without a token refuses to start; with a token every
HTTP route and every Flight call refuses a request without it; weights load only from the
configured folders; tokens reach no log, command line or written config; no service source
unpickles or evaluates data.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from types import SimpleNamespace
from unittest import mock

import pyarrow.flight as flight
import pytest

from areal_mem.security import SERVICES, token_env
from tests.source_tree import package_sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _listen_addresses(port: int) -> set:
    """Local addresses with a socket listening on `port` (from /proc/net/tcp*, nothing sent);
    IPv4-mapped IPv6 addresses (gRPC's sockets) are given as their IPv4 address."""
    import ipaddress

    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                hexaddr, p = local.split(":")
                if int(p, 16) != port or state != "0A":  # 0A: LISTEN
                    continue
                raw = bytes.fromhex(hexaddr)  # 32-bit words in host (little-endian) order
                addr = ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))
                out.add(str(getattr(addr, "ipv4_mapped", None) or addr))
    return out


def test_every_service_binds_loopback_by_default(retriever_service, generator_service, buffer_service):
    from urllib.parse import urlparse

    from areal_mem.config.buffer import BufferConfig
    from areal_mem.config.generator import GeneratorConfig
    from areal_mem.config.retriever import RetrieverConfig

    assert RetrieverConfig().host == GeneratorConfig().host == BufferConfig().host == "127.0.0.1"
    for url in (retriever_service.url, generator_service.url, buffer_service.url):
        u = urlparse(url)
        assert u.hostname == "127.0.0.1"
        assert _listen_addresses(u.port) == {"127.0.0.1"}, url  # not 0.0.0.0 or ::


SERVE = {
    "retriever": ["retriever", "serve", "--index", "/nonexistent-index"],
    "generator": ["generator", "serve", "--model", "/nonexistent-model"],
    "buffer": ["buffer", "serve", "--run-dir", "<tmp>/run"],
}


@pytest.mark.parametrize("service", SERVICES)
def test_a_public_bind_without_token_refuses_to_start(service, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AREAL_MEM_")}
    ready = tmp_path / "ready"
    argv = [a.replace("<tmp>", str(tmp_path)) for a in SERVE[service]]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "areal_mem.app.cli",
            *argv,
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--ready-file",
            str(ready),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
    for needle in (f"{service}: refusing to bind '0.0.0.0' without a shared token", token_env(service), "127.0.0.1"):
        assert needle in r.stderr, (needle, r.stderr)
    assert "Traceback" not in r.stderr and not ready.exists()
    assert not (tmp_path / "run").exists()  # refused before it touched anything


BAD_AUTH = [
    {},
    {"Authorization": "Bearer wrong"},
    {"Authorization": "Bearer "},
    {"Authorization": "<token>"},
    {"Authorization": "Basic <token>"},
    {"Authorization": "Bearer <token>x"},
    {"Authorization": "bearer <token>x"},
    {"Authorization": "Bearer<token>"},
    {"X-Api-Key": "<token>"},
]


@pytest.mark.parametrize("name", ["retriever", "generator"])
def test_every_http_route_answers_401_without_the_token(name, routes, retriever_service, generator_service, checks):
    svc = {"retriever": retriever_service, "generator": generator_service}[name]
    for method, path in sorted(routes[name]):
        body = None if method in ("GET", "HEAD") else b"{}"
        for headers in BAD_AUTH:
            h = {k: v.replace("<token>", svc.token) for k, v in headers.items()}
            status, out = svc.call(method, path, raw=body, headers=h, auth=False)
            assert status == 401, (method, path, headers, status, out)
            if method != "HEAD":
                assert out == {"error": "missing or wrong bearer token"}
        status, _ = svc.call(method, path, raw=body)  # with the token: past the check
        assert status != 401 and status < 500, (method, path, status)
    checks[name](svc)


def _flight_calls(client, token_headers):
    opts = flight.FlightCallOptions(timeout=20, headers=token_headers)
    d = flight.FlightDescriptor.for_command(b"{}")

    def put():
        from areal_mem.buffer.schema import CONTEXT_SCHEMA

        writer, _ = client.do_put(d, CONTEXT_SCHEMA, opts)
        writer.write_table(CONTEXT_SCHEMA.empty_table())
        writer.close()

    def exchange():
        writer, reader = client.do_exchange(d, opts)
        writer.close()
        reader.read_all()

    from areal_mem.buffer.server.service import ACTIONS

    calls = {f"action {a}": (lambda a=a: list(client.do_action(flight.Action(a, b"{}"), opts))) for a in ACTIONS}
    calls.update(
        {
            "list_actions": lambda: list(client.list_actions(opts)),
            "do_put": put,
            "do_get": lambda: client.do_get(flight.Ticket(b'{"n": 1, "request_id": "r"}'), opts).read_all(),
            "list_flights": lambda: list(client.list_flights(b"", opts)),
            "get_flight_info": lambda: client.get_flight_info(d, opts),
            "get_schema": lambda: client.get_schema(d, opts),
            "do_exchange": exchange,
        }
    )
    return calls


def test_every_flight_call_is_unauthenticated_without_the_token(buffer_service):
    token = buffer_service.token
    client = flight.FlightClient(buffer_service.url)
    try:
        for bad in (
            [],
            [(b"authorization", b"Bearer wrong")],
            [(b"authorization", token.encode())],
            [(b"authorization", f"Bearer {token}x".encode())],
        ):
            for name, fn in _flight_calls(client, bad).items():
                with pytest.raises((flight.FlightUnauthenticatedError, OSError)) as e:
                    fn()
                assert "Unauthenticated" in str(e.value) or isinstance(e.value, flight.FlightUnauthenticatedError), (
                    name,
                    e.value,
                )
        good = _flight_calls(client, [(b"authorization", f"Bearer {token}".encode())])
        assert [a.type for a in good["list_actions"]()][:1] == ["acquire"]
        assert json.loads(good["action stats"]()[0].body.to_pybytes())["running"] == 0
    finally:
        client.close()
    with buffer_service.client() as c:  # the service is still up and unchanged
        assert c.stats().refused_invalid >= 0


def test_update_weights_from_disk_loads_only_inside_the_configured_folders(generator_service, tiny_model_dir, checks):
    svc, allowed = generator_service, generator_service.extra["allowed"]
    sibling = allowed + "-evil"  # a prefix match of the folder name must not pass
    if not os.path.exists(sibling):
        import shutil

        shutil.copytree(tiny_model_dir, sibling)
        os.symlink(tiny_model_dir, os.path.join(allowed, "link-out"))
    for path in (
        tiny_model_dir,
        sibling,
        os.path.join(allowed, "link-out"),
        os.path.join(allowed, "copy", "..", "..", os.path.basename(sibling)),
        "/etc",
        ".",
    ):
        status, out = svc.call("POST", "/update_weights_from_disk", {"model_path": path})
        assert status == 403 and out["success"] is False, (path, status, out)
        assert allowed in out["message"] and "weights_dirs" in out["message"], out
    status, out = svc.call(
        "POST", "/update_weights_from_disk", {"model_path": os.path.join(allowed, "x", "..", "copy")}
    )
    assert status == 200 and out["success"] is True, out
    checks["generator"](svc)  # same weights as before: the copy of the served model


def test_default_weights_folders_cover_the_disk_publisher_and_restarts(tmp_path):
    from areal_mem.app.launch.local import latest_weights
    from areal_mem.config import load_run
    from areal_mem.config.learner import PublishConfig, PublisherKind
    from areal_mem.learner.publishers import make_publisher
    from areal_mem.rollout.generator.command import _weights_dirs
    from areal_mem.rollout.generator.embedded.disk_weights import allowed_path
    from areal_mem.rollout.generator.embedded.errors import ForbiddenPath

    cfg = load_run(overrides=[f"run_dir={tmp_path}/run", f"model.path={tmp_path}/model"])
    dirs = _weights_dirs(cfg, cfg.model.path)
    engine = SimpleNamespace(rank=1, cfg=cfg.learner)  # what make_publisher reads of an engine
    publisher = make_publisher(PublishConfig(kind=PublisherKind.disk), engine, None, cfg.run_dir)
    push = publisher.path(7)
    os.makedirs(push)
    open(os.path.join(push, "config.json"), "w").close()
    restart_model, version = latest_weights(cfg.run_dir)
    assert (restart_model, version) == (push, 7)
    for path in (push, cfg.model.path, os.path.abspath(push)):
        assert allowed_path(path, dirs) == os.path.realpath(path)
    # a restarted generator serves the push: its own folder and the run's weights stay allowed
    assert allowed_path(publisher.path(8), _weights_dirs(cfg, restart_model))
    with pytest.raises(ForbiddenPath, match="weights_dirs"):
        allowed_path(str(tmp_path / "elsewhere"), dirs)
    only = load_run(overrides=[f"model.path={tmp_path}/model", f"generator.embedded.weights_dirs=[{tmp_path}/w]"])
    assert _weights_dirs(only, only.model.path) == [f"{tmp_path}/w"]


def test_tokens_reach_no_log_command_line_or_written_config(
    retriever_service, generator_service, buffer_service, tmp_path
):
    token = retriever_service.token
    for svc in (retriever_service, generator_service):
        for auth in ({"Authorization": f"Bearer {token}"}, {"Authorization": f"Bearer {token}-wrong"}, {}):
            svc.call(
                "POST", "/search" if svc is retriever_service else "/generate", raw=b"{bad", headers=auth, auth=False
            )
    bad = flight.FlightClient(buffer_service.url)
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(
            bad.do_action(
                flight.Action("stats", b"{}"),
                flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}-wrong".encode())]),
            )
        )
    bad.close()
    with buffer_service.client() as c:
        c.stats()
    for log in (retriever_service.log_path, generator_service.log_path, buffer_service.log_path):
        with open(log, encoding="utf-8", errors="replace") as f:
            text = f.read()
        assert text and token not in text, log
    for pid in (retriever_service.pid, generator_service.pid, buffer_service.child.proc.pid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert token.encode() not in f.read()

    # a config with tokens: printed and saved without them; the children get them from the env
    cfg_file = tmp_path / "tokens.yaml"
    cfg_file.write_text("".join(f"{s}:\n  token: {token}\n" for s in SERVICES))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AREAL_MEM_")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "areal_mem.app.cli",
            "config",
            "--config",
            str(cfg_file),
            "--save",
            f"run_dir={tmp_path}/run",
            "model.path=/m",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert token not in r.stdout + r.stderr and "token: ''" in r.stdout
    assert token not in (tmp_path / "run" / "config.yaml").read_text()

    from areal_mem.app.train import TrainPipeline
    from areal_mem.config import load_run

    with mock.patch.dict(os.environ, clear=False):
        cfg = load_run([str(cfg_file)], [f"run_dir={tmp_path}/train", "model.path=/m"])
        pipeline = TrainPipeline(cfg, evaluate=False)
        assert token not in open(pipeline.config_path).read()
        assert all(os.environ[token_env(s)] == token for s in SERVICES)  # what its children inherit
        reread = load_run([pipeline.config_path])
        from areal_mem.buffer.client import BufferClient

        assert reread.buffer.token == "" and BufferClient("grpc://127.0.0.1:1").token == token


# ---- no unpickling or evaluation of data in the service packages ----------------------------
PACKAGES = ("areal_mem", "retriever", "rollout", "learner")
UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve", "jsonpickle"}
ALLOWED: dict = {}  # {"path:line": "why it is safe"}; nothing needs an exception today


def _unsafe_calls(path: str):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in UNSAFE_MODULES:
                    yield node.lineno, f"import {a.name}"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in UNSAFE_MODULES:
            yield node.lineno, f"from {node.module} import"
        elif isinstance(node, ast.Call):
            f, kw = node.func, {k.arg: k.value for k in node.keywords}
            if isinstance(f, ast.Name) and f.id in ("eval", "exec"):
                yield node.lineno, f"{f.id}()"
            if not isinstance(f, ast.Attribute):
                continue
            owner = f.value.id if isinstance(f.value, ast.Name) else ""
            if (
                owner == "torch"
                and f.attr == "load"
                and not (isinstance(kw.get("weights_only"), ast.Constant) and kw["weights_only"].value is True)
            ):
                yield node.lineno, "torch.load without weights_only=True"
            if owner == "yaml" and f.attr in ("load", "load_all", "unsafe_load", "full_load"):
                loader = kw.get("Loader")
                name = getattr(loader, "attr", getattr(loader, "id", ""))
                if name not in ("SafeLoader", "CSafeLoader"):
                    yield node.lineno, f"yaml.{f.attr} without a safe loader"
            if (
                f.attr == "load"
                and owner in ("np", "numpy")
                and isinstance(kw.get("allow_pickle"), ast.Constant)
                and kw["allow_pickle"].value
            ):
                yield node.lineno, "numpy.load(allow_pickle=True)"
            if f.attr in ("read_pickle", "register_extension_type", "PyExtensionType", "set_auto_load"):
                yield node.lineno, f".{f.attr}()"
            if f.attr in ("eval", "exec") and owner == "builtins":
                yield node.lineno, f"builtins.{f.attr}()"


def test_no_service_unpickles_or_evaluates_data():
    found = []
    for rel, path in package_sources():
        found += [f"{rel}:{line}: {what}" for line, what in _unsafe_calls(path) if f"{rel}:{line}" not in ALLOWED]
    assert not found, "unsafe deserialisation or evaluation:\n" + "\n".join(found)


def test_the_source_check_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle\nimport torch, yaml\nx = eval('1')\ntorch.load('f')\n"
        "torch.load('f', weights_only=True)\nyaml.load(s)\nyaml.load(s, Loader=yaml.SafeLoader)\n"
    )
    assert [line for line, _ in _unsafe_calls(str(bad))] == [1, 3, 4, 6]


def test_arrow_cannot_unpickle_extension_types():
    """pyarrow IPC reads in the buffer see no pickled (PyExtensionType) types: this pyarrow has none."""
    import pyarrow as pa

    assert not hasattr(pa, "PyExtensionType") or not getattr(pa.PyExtensionType, "_auto_load", False)
