"""The Ray launcher runs the plan's real processes inside actors of a local Ray instance."""

import os
import re
import signal
import subprocess
import time

import psutil
import pytest
from pyarrow import flight

ray = pytest.importorskip("ray")

from areal_mem.app.launch.plan import ProcessSpec  # noqa: E402
from areal_mem.app.launch.ray_launcher import RayLauncher  # noqa: E402
from areal_mem.buffer.client import BufferClient  # noqa: E402
from areal_mem.config import load_run, save_resolved  # noqa: E402
from areal_mem.trajectory import Context, Group, Trajectory  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOWHERE = "http://127.0.0.1:9"  # the services a test does not start


@pytest.fixture(scope="module")
def local_ray():
    # Loopback only: tests never send traffic to the machine's other addresses.
    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def only_buffer(tmp_path, *overrides):
    cfg = load_run(
        [os.path.join(REPO, "configs", "debug_cpu.yaml")],
        [
            f"run_dir={tmp_path / 'run'}",
            "launcher.kind=ray",
            "launcher.health_timeout_s=60",
            f"retriever.urls=[{NOWHERE}]",
            f"generator.urls=[{NOWHERE}]",
            *overrides,
        ],
    )
    return cfg, save_resolved(cfg)


def a_group(gid: str) -> Group:
    ctx = Context(input_ids=[5, 6, 7, 8], prompt_len=2, loss_mask=[1, 0], behav_logp=[-0.5, 0.0], versions=[0, -1])
    return Group(gid, [Trajectory(f"{gid}/0", [ctx], reward=1.0, start_version=0)])


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run_dir_processes(run_dir):
    return [p for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]


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
            assert client.stats().groups_put == 1
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
            assert client.stats().groups_put == 0
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
            assert client.stats().groups_put == 0
    finally:
        launcher.stop_all()
    assert not run_dir_processes(tmp_path)


def test_unknown_role_in_ray_resources_is_named(local_ray, tmp_path):
    cfg, path = only_buffer(tmp_path, "launcher.ray_resources.workers.num_cpus=2")
    with pytest.raises(ValueError, match=r"launcher.ray_resources.workers: unknown role"):
        RayLauncher(cfg, path)


def test_actor_options_follow_the_plan_and_the_config(local_ray, tmp_path):
    cfg, path = only_buffer(
        tmp_path,
        "launcher.ray_resources.learner.num_gpus=1",
        "launcher.ray_resources.rollout.resources={worker_node: 0.5}",
    )
    launcher = RayLauncher(cfg, path)
    gen = ProcessSpec("generator3", [], resources={"CPU": 1.0, "GPU": 1.0})
    assert launcher.actor_options(gen) == {"num_cpus": 1.0, "num_gpus": 1.0, "resources": {}}
    assert launcher.actor_options(ProcessSpec("learner1", [])) == {"num_cpus": 1.0, "num_gpus": 1.0, "resources": {}}
    assert launcher.actor_options(ProcessSpec("rollout0", [])) == {
        "num_cpus": 1.0,
        "num_gpus": 0.0,
        "resources": {"worker_node": 0.5},
    }


def test_cluster_script_starts_the_head_first_and_keeps_the_token_off_command_lines(tmp_path):
    script = os.path.join(REPO, "examples", "multinode", "ray_cluster.sh")
    hosts = tmp_path / "hosts"
    hosts.write_text("# the job's nodes\nnode-a\n\n  node-b slots=8\nnode-c\n")
    env = dict(
        os.environ, HOME=str(tmp_path), DRY_RUN="1", HEAD_IP="10.0.0.1", RAY_PORT="6400", RAY_START_ARGS="--num-gpus=8"
    )

    def run(*args):
        return subprocess.run(["bash", script, *args], env=env, capture_output=True, text=True, timeout=60)

    start = run(str(hosts), "start")
    assert start.returncode == 0, start.stderr
    lines = start.stdout.splitlines()
    ray_bin = os.path.join(REPO, ".venv", "bin", "ray")
    push = "umask 077 && mkdir -p ~/.ray && cat > ~/.ray/auth_token.new && mv ~/.ray/auth_token.new ~/.ray/auth_token"
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
    assert run(str(hosts), "stop").stdout.splitlines() == [f"[node-{h}] '{ray_bin}' stop" for h in "cba"]
    assert run(str(hosts), "address").stdout.strip() == "10.0.0.1:6400"
    empty = tmp_path / "empty"
    empty.write_text("# nobody\n")
    bad = run(str(empty), "start")
    assert bad.returncode == 2 and "no hosts in" in bad.stderr


def ray_daemons():
    return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] in ("gcs_server", "raylet")}


def learner_process(run_dir):
    """The learner rank's own process (the actor's child), found by its command line."""
    for p in run_dir_processes(run_dir):
        cmd = p.info["cmdline"]
        if "areal_mem.app.cli" in cmd and cmd[cmd.index("areal_mem.app.cli") + 1] == "learner":
            return p
    return None


def test_debug_recipe_through_ray_restarts_a_killed_learner_and_cleans_up(tiny_train):
    """`areal-mem train launcher.kind=ray` on its own Ray instance, gone after; the services bind the
    node's IP as on a multi-node cluster, so every request (weight pushes too) carries the run's token.
    The learner rank is SIGKILLed once it logged step 3: it comes back in a placement group acquired
    anew, resumes from its step-2 checkpoint, and the run ends at its last step."""
    daemons = ray_daemons()
    proc = tiny_train.start(
        "launcher.kind=ray",
        "launcher.ray_address=local",
        "launcher.ray_bind=node_ip",
        "learner.steps=6",
        "learner.checkpoint_interval=2",
    )
    killed = None
    try:
        deadline = time.monotonic() + 400
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            learner = learner_process(tiny_train.run_dir)
            if learner is not None and len(tiny_train.train_steps()) >= 3:
                killed = max(r["step"] for r in tiny_train.train_steps())
                learner.send_signal(signal.SIGKILL)
            time.sleep(0.2)
        out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed is not None and proc.returncode == 0, out[-5000:]
    assert "ray: 1 node(s), services bind their node IP (token auth)" in out
    groups = re.findall(r"learner: 1 rank\(s\) placed in placement group (\w+)", out)
    assert len(groups) == 2 and groups[0] != groups[1], out[-5000:]
    assert "restarting the learner (1 of at most" in out
    ip = ray.util.get_node_ip_address()
    with open(tiny_train.run_dir / "logs" / "generator0.log", encoding="utf-8") as f:
        assert f" on http://{ip}:" in f.read()
    with open(tiny_train.run_dir / "logs" / "learner.log", encoding="utf-8") as f:
        first, second = f.read().split("[learner] resumed from step ")
    killed_after = max(int(n) for n in re.findall(r"\[train step (\d+)\]", first))
    resumed = int(second.split(",")[0])
    # the last checkpoint before the kill: every 2 steps, written after the step's log line, so a
    # kill between the two (the learner can run ahead of this poll) leaves the one before it
    last_even = killed_after - killed_after % 2
    assert killed_after >= killed >= 3 and resumed in (last_even, last_even - 2)
    assert [r["step"] for r in tiny_train.train_steps()] == [*range(1, killed_after + 1), *range(resumed + 1, 7)]
    assert os.path.exists(tiny_train.run_dir / "final" / "config.json")
    assert not tiny_train.leftover_processes()
    assert not [p for p in ray_daemons() - daemons if running(p)]  # its Ray instance stopped too
