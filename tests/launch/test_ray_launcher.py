"""The Ray launcher runs the plan's real processes inside actors of a local Ray instance."""
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from pyarrow import flight

ray = pytest.importorskip("ray")

from areal_mem.buffer.client import BufferClient  # noqa: E402
from areal_mem.config import load_config, save_resolved  # noqa: E402
from areal_mem.launch.plan import ProcessSpec  # noqa: E402
from areal_mem.launch.ray_launcher import RayLauncher  # noqa: E402
from areal_mem.net import free_port  # noqa: E402
from areal_mem.trajectory import Context, Group, Trajectory  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOWHERE = "http://127.0.0.1:9"  # the services a test does not start


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def only_buffer(tmp_path, *overrides):
    cfg = load_config([os.path.join(REPO, "configs", "debug_cpu.yaml")], [
        f"run_dir={tmp_path / 'run'}", "launcher.kind=ray", "launcher.health_timeout_s=60",
        f"retriever.urls=[{NOWHERE}]", f"generator.urls=[{NOWHERE}]", *overrides])
    return cfg, save_resolved(cfg)


def a_group(gid: str) -> Group:
    ctx = Context(input_ids=[5, 6, 7, 8], prompt_len=2, loss_mask=[1, 0], behav_logp=[-0.5, 0.0],
                  versions=[0, -1])
    return Group(gid, [Trajectory(f"{gid}/0", [ctx], reward=1.0, start_version=0)])


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run_dir_processes(run_dir):
    return [p for p in psutil.process_iter(["cmdline"])
            if str(run_dir) in " ".join(p.info["cmdline"] or [])]


def test_buffer_service_in_an_actor_serves_and_stops(local_ray, tmp_path):
    cfg, path = only_buffer(tmp_path)
    launcher = RayLauncher(cfg, path)
    try:
        addresses = launcher.start_services()
        assert list(launcher.children) == ["buffer"]
        assert addresses.buffer.startswith("grpc://127.0.0.1:")  # one node: loopback, no token
        assert addresses.overrides()[1] == f"buffer.url={addresses.buffer}"
        pid = ray.get(launcher.actors["buffer"].pid.remote())
        assert psutil.Process(pid).is_running()
        with BufferClient(addresses.buffer) as client:
            assert client.put_group(a_group("g0"))
            batch = client.get_batch(1, timeout_s=10)
            assert batch.group_ids == ["g0"]
            assert batch.table.column("input_ids").to_pylist() == [[5, 6, 7, 8]]
            assert client.stats()["groups_put"] == 1
        assert launcher.children["buffer"].alive()
    finally:
        launcher.stop_all()
    assert not running(pid)
    assert not run_dir_processes(tmp_path)
    assert not launcher.actors and ray.is_initialized()  # the test's instance is not ours to stop
    with open(os.path.join(cfg.run_dir, "logs", "buffer.log"), encoding="utf-8") as f:
        assert "areal-mem buffer: serving" in f.read()


def test_node_ip_bind_uses_a_per_run_token_from_the_environment(local_ray, tmp_path):
    cfg, path = only_buffer(tmp_path, "launcher.ray_bind=node_ip")
    launcher = RayLauncher(cfg, path)
    try:
        url = launcher.start_services().buffer
        ip = ray.util.get_node_ip_address()
        assert url.startswith(f"grpc://{ip}:")
        token = launcher.token_env["AREAL_MEM_BUFFER_TOKEN"]
        assert len(token) == 32 and set(launcher.token_env.values()) == {token}
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(flight.FlightClient(url).do_action(flight.Action("stats", b"{}")))
        with BufferClient(url, token=token) as client:
            assert client.stats()["groups_put"] == 0
        pid = ray.get(launcher.actors["buffer"].pid.remote())
        assert token not in " ".join(psutil.Process(pid).cmdline())
        assert psutil.Process(pid).environ()["AREAL_MEM_BUFFER_TOKEN"] == token
    finally:
        launcher.stop_all()
    with open(os.path.join(cfg.run_dir, "logs", "buffer.log"), encoding="utf-8") as f:
        assert token not in f.read()
    assert not run_dir_processes(tmp_path)
    # another run gets another token
    assert RayLauncher(cfg, path).token_env["AREAL_MEM_BUFFER_TOKEN"] != token


def test_a_dead_restartable_process_is_restarted_in_its_actor(local_ray, tmp_path):
    cfg, path = only_buffer(tmp_path)
    launcher = RayLauncher(cfg, path, poll_s=0.1)
    try:
        launcher.start_services()
        launcher.specs["buffer"].restart = True  # as the plan marks generators and workers
        first = ray.get(launcher.actors["buffer"].pid.remote())
        os.killpg(first, signal.SIGKILL)

        class Restarted(Exception):
            pass

        def tick():
            if launcher.children["buffer"].restarts:
                raise Restarted

        with pytest.raises(Restarted):
            launcher.supervise(on_tick=tick)
        child = launcher.children["buffer"]
        assert child.restarts == 1 and child.alive()
        second = ray.get(launcher.actors["buffer"].pid.remote())
        assert second != first and not running(first)
        with BufferClient(child.url) as client:  # the durable buffer serves again
            assert client.stats()["groups_put"] == 0
    finally:
        launcher.stop_all()
    assert not run_dir_processes(tmp_path)


OWN_INSTANCE = """
import json, sys, psutil
from areal_mem.buffer.client import BufferClient
from areal_mem.config import load_config, save_resolved
from areal_mem.launch.ray_launcher import RayLauncher
cfg = load_config([sys.argv[1]], sys.argv[2:])
launcher = RayLauncher(cfg, save_resolved(cfg))
url = launcher.start_services().buffer
groups = BufferClient(url).stats()["groups_put"]
pids = [p.pid for p in psutil.Process().children(recursive=True)]
launcher.stop_all()
print(json.dumps({"owns": launcher.owns_ray, "url": url, "groups": groups, "pids": pids}))
"""


def test_unknown_role_in_ray_resources_is_named(local_ray, tmp_path):
    cfg, path = only_buffer(tmp_path, "launcher.ray_resources.workers.num_cpus=2")
    with pytest.raises(ValueError, match=r"launcher.ray_resources.workers: unknown role"):
        RayLauncher(cfg, path)


def test_actor_options_follow_the_plan_and_the_config(local_ray, tmp_path):
    cfg, path = only_buffer(tmp_path, "launcher.ray_resources.learner.num_gpus=1",
                            "launcher.ray_resources.rollout.resources={worker_node: 0.5}")
    launcher = RayLauncher(cfg, path)
    gen = ProcessSpec("generator3", [], resources={"CPU": 1.0, "GPU": 1.0})
    assert launcher.actor_options(gen) == {"num_cpus": 1.0, "num_gpus": 1.0, "resources": {}}
    assert launcher.actor_options(ProcessSpec("learner1", [])) == {
        "num_cpus": 1.0, "num_gpus": 1.0, "resources": {}}
    assert launcher.actor_options(ProcessSpec("rollout0", [])) == {
        "num_cpus": 1.0, "num_gpus": 0.0, "resources": {"worker_node": 0.5}}


def test_cluster_script_starts_the_head_first_and_keeps_the_token_off_command_lines(tmp_path):

    script = os.path.join(REPO, "examples", "multinode", "ray_cluster.sh")
    hosts = tmp_path / "hosts"
    hosts.write_text("# the job's nodes\nnode-a\n\n  node-b slots=8\nnode-c\n")
    env = dict(os.environ, HOME=str(tmp_path), DRY_RUN="1", HEAD_IP="10.0.0.1", RAY_PORT="6400",
               RAY_START_ARGS="--num-gpus=8")

    def run(*args):
        return subprocess.run(["bash", script, *args], env=env, capture_output=True, text=True, timeout=60)

    start = run(str(hosts), "start")
    assert start.returncode == 0, start.stderr
    lines = start.stdout.splitlines()
    ray_bin = os.path.join(REPO, ".venv", "bin", "ray")
    push = ("umask 077 && mkdir -p ~/.ray && cat > ~/.ray/auth_token.new && "
            "mv ~/.ray/auth_token.new ~/.ray/auth_token")
    assert lines[:6] == [
        f"[node-a] {push}",
        f"[node-a] cd '{REPO}' && RAY_AUTH_MODE=token '{ray_bin}' start --disable-usage-stats --head "
        "--port=6400 --node-ip-address=10.0.0.1 --include-dashboard=false --num-gpus=8",
        f"[node-b] {push}",
        f"[node-b] cd '{REPO}' && RAY_AUTH_MODE=token '{ray_bin}' start --disable-usage-stats "
        "--address=10.0.0.1:6400 --num-gpus=8",
        f"[node-c] {push}",
        f"[node-c] cd '{REPO}' && RAY_AUTH_MODE=token '{ray_bin}' start --disable-usage-stats "
        "--address=10.0.0.1:6400 --num-gpus=8",
    ]
    token_file = tmp_path / ".ray" / "auth_token"
    token = token_file.read_text().strip()
    assert len(token) == 64 and token not in start.stdout
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert run(str(hosts), "start").returncode == 0 and token_file.read_text().strip() == token  # kept
    assert run(str(hosts), "stop").stdout.splitlines() == [
        f"[node-{h}] '{ray_bin}' stop" for h in "cba"]
    assert run(str(hosts), "address").stdout.strip() == "10.0.0.1:6400"
    empty = tmp_path / "empty"
    empty.write_text("# nobody\n")
    bad = run(str(empty), "start")
    assert bad.returncode == 2 and "no hosts in" in bad.stderr


def ray_daemons():
    return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] in ("gcs_server", "raylet")}


def test_debug_recipe_runs_two_steps_through_ray_and_cleans_up(tmp_path):
    """`areal-mem train launcher.kind=ray` with no cluster to join: its own Ray instance, gone after."""

    run_dir = tmp_path / "run"
    overrides = [  # the sizes of tests/launch/test_local_launcher.py
        f"run_dir={run_dir}", "world.passages=200", "world.questions=120",
        "model.init.hidden_size=32", "model.init.intermediate_size=64",
        "model.init.num_hidden_layers=1", "model.init.num_attention_heads=2",
        "model.init.num_key_value_heads=1", "model.init.vocab_size=800",
        "rollout.group_size=2", "rollout.max_turns=2", "rollout.max_new_tokens=24",
        "rollout.max_concurrent_groups=4", "buffer.batch_groups=2", "learner.steps=2",
        "learner.checkpoint_interval=100", "learner.sft.warm_start=false",
        "launcher.kind=ray", "launcher.ray_address=local",
    ]
    daemons = ray_daemons()
    cmd = [sys.executable, "-m", "areal_mem.cli", "train", "--config",
           os.path.join(REPO, "configs", "debug_cpu.yaml"), "--no-eval", *overrides]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=420)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-5000:]
    assert "ray: 1 node(s), services bind 127.0.0.1" in out
    assert not run_dir_processes(run_dir)
    assert not [p for p in ray_daemons() - daemons if running(p)]  # its Ray instance stopped too
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as f:
        steps = [json.loads(line) for line in f]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(s["groups"] == 2 for s in steps)
    assert os.path.exists(run_dir / "final" / "config.json")
    for name in ("retriever", "generator0", "buffer", "learner", "rollout0"):
        assert os.path.exists(run_dir / "logs" / f"{name}.log"), name


@pytest.mark.slow
def test_cluster_script_starts_a_real_cluster_the_launcher_can_use(tmp_path):
    """REMOTE=local: the one "host" is this machine; the cluster lives in the script's process group."""

    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\n")
    port = free_port()
    env = dict(os.environ, HOME=str(tmp_path), REMOTE="local", RAY_BLOCK="1", RAY_PORT=str(port),
               HEAD_IP="127.0.0.1", RAY_START_ARGS="--num-cpus=4")
    log = tmp_path / "script.log"  # a file: `ray start --block` keeps a pipe open forever
    with open(log, "w") as out:
        script = subprocess.Popen(["bash", os.path.join(REPO, "examples", "multinode", "ray_cluster.sh"),
                                   str(hosts), "start"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        assert script.wait(timeout=120) == 0, log.read_text()[-3000:]
        assert f"ray cluster at 127.0.0.1:{port}: 1 nodes" in log.read_text()
        done = subprocess.run(
            [sys.executable, "-c", OWN_INSTANCE, os.path.join(REPO, "configs", "debug_cpu.yaml"),
             f"run_dir={tmp_path / 'run'}", "launcher.kind=ray",
             f"launcher.ray_address=127.0.0.1:{port}",
             f"retriever.urls=[{NOWHERE}]", f"generator.urls=[{NOWHERE}]"],
            cwd=REPO, capture_output=True, text=True, timeout=120,
            env=dict(os.environ, HOME=str(tmp_path), RAY_AUTH_MODE="token"))
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert not result["owns"] and result["groups"] == 0
        assert not run_dir_processes(tmp_path / "run")
    finally:
        # SIGTERM to `ray start --block` alone: it stops the node's processes itself
        members = set(group_members(script.pid))
        for p in psutil.process_iter(["pid", "cmdline"]):
            if p.info["pid"] in members and "--block" in (p.info["cmdline"] or []):
                os.kill(p.info["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 60
        while group_members(script.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = group_members(script.pid)
        if left:
            os.killpg(script.pid, signal.SIGKILL)
        current = "/tmp/ray/ray_current_cluster"  # `ray stop` would remove it; "auto" reads it
        if os.path.exists(current):
            with open(current, encoding="utf-8") as f:
                stale = f.read().strip().endswith(f":{port}")
            if stale:
                os.unlink(current)
    assert not left


def group_members(pgid: int):
    def in_group(pid: int) -> bool:
        try:
            return os.getpgid(pid) == pgid and running(pid)
        except ProcessLookupError:
            return False

    return [p.pid for p in psutil.process_iter() if in_group(p.pid)]


@pytest.mark.slow  # about 30 s; the CI test above runs the learner in a placement group of one rank
def test_two_learner_ranks_in_one_placement_group_train_a_step(local_ray, tmp_path, tiny_model_dir):
    cfg, path = only_buffer(tmp_path, f"model.path={tiny_model_dir}", "launcher.learner_ranks=2",
                            "learner.publisher=none", "learner.steps=1", "buffer.batch_groups=2",
                            "learner.checkpoint_interval=100")
    launcher = RayLauncher(cfg, path, poll_s=0.2)
    try:
        addresses = launcher.start_services()
        with BufferClient(addresses.buffer) as client:
            for g in range(2):
                trajs = [Trajectory(f"g{g}/{t}", [Context(input_ids=[5 + t, 6, 7, 8, 9], prompt_len=2,
                                                          loss_mask=[1, 1, 1], behav_logp=[-2.0] * 3,
                                                          versions=[0] * 3)],
                                    reward=float(t), start_version=0) for t in range(2)]
                assert client.put_group(Group(f"g{g}", trajs))
        launcher.start_learner()
        table = ray.util.placement_group_table(launcher.pg)
        assert table["state"] == "CREATED" and len(table["bundles"]) == 2
        envs = [launcher.specs[f"learner{r}"].env for r in range(2)]
        assert [e["RANK"] for e in envs] == ["0", "1"] and {e["WORLD_SIZE"] for e in envs} == {"2"}
        assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"} and len({e["MASTER_PORT"] for e in envs}) == 1
        assert launcher.supervise() == 0
        assert [c.returncode for c in launcher.learners] == [0, 0]
        with BufferClient(addresses.buffer) as client:  # the step trained on both groups
            assert client.stats()["groups_acked"] == 2
        pg = launcher.pg
    finally:
        launcher.stop_all()
    assert ray.util.placement_group_table(pg)["state"] == "REMOVED"
    with open(os.path.join(cfg.run_dir, "logs", "learner0.log"), encoding="utf-8") as f:
        assert "[learner] done: step 1" in f.read()
    assert os.path.exists(os.path.join(cfg.run_dir, "final", "config.json"))
    assert not run_dir_processes(tmp_path)
