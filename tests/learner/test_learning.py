"""GRPO on the tiny model through the whole loop: buffer, embedded generator, `areal-mem
learner` with distributed pushes and probe checks. The mean reward rises from near chance to
above 0.9; a learner killed mid-run resumes (`resume: auto`) at the next step and version."""

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from areal_mem.buffer.server.launch import BufferProcess
from areal_mem.config.generator import EmbeddedConfig
from areal_mem.rollout.generator.client import GeneratorClient
from areal_mem.rollout.generator.launch import start_embedded_generator
from tests.learner._task import Producer

STEP_LINE = re.compile(r"\[train step (\d+)\] reward=([0-9.e-]+).*")


def _learner(run_dir, model_dir, buffer_url, gen_url, log_path):
    cmd = [
        sys.executable,
        "-m",
        "areal_mem.app.cli",
        "learner",
        f"run_dir={run_dir}",
        f"model.path={model_dir}",
        f"buffer.url={buffer_url}",
        f"generator.urls=[{gen_url}]",
        "buffer.batch_groups=8",
        "learner.steps=40",
        "learner.lr=3e-2",
        "learner.loss.entropy_coef=0",
        "learner.checkpoint_interval=3",
        "learner.publish.probe_check=true",
        "learner.export_hf=false",
        "learner.publish.kind=distributed",
        "learner.micro_batch_tokens=1024",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    log = open(log_path, "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env), log


def _generator_version(url):
    async def go():
        async with GeneratorClient([url]) as c:
            return (await c.weight_versions())[url]

    return asyncio.run(go())


def _steps(log_path):
    with open(log_path) as f:
        text = f.read()
    return [(int(m.group(1)), float(m.group(2))) for m in STEP_LINE.finditer(text)], text


def _wait(pred, proc, log_path, producer, timeout, buffer):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if proc.poll() is not None or not producer.is_alive():
            break
        time.sleep(0.5)
    with buffer.client() as c:
        stats = c.stats()
    pytest.fail(
        f"learner exit code {proc.poll()}, producer alive {producer.is_alive()} "
        f"put {producer.groups_put} errors {producer.errors[-3:]}, buffer {stats}:\n"
        f"{_steps(log_path)[1][-5000:]}"
    )


def test_grpo_learns_first_token_and_resumes_after_kill(tiny_model_dir, tmp_path):
    run_dir = str(tmp_path / "run")
    buffer = BufferProcess(run_dir, overrides=["buffer.max_staleness=1", "buffer.batch_groups=8"])
    gen = start_embedded_generator(tiny_model_dir, EmbeddedConfig(max_batch_size=16, torch_threads=1, device="cpu"))
    producer = Producer(gen.url, buffer.url)
    producer.start()
    procs = []
    try:
        # First learner: killed (SIGKILL, no goodbye) once a checkpoint exists and a step more ran.
        log1 = str(tmp_path / "learner1.log")
        p1, f1 = _learner(run_dir, tiny_model_dir, buffer.url, gen.url, log1)
        procs.append(p1)
        state_path = os.path.join(run_dir, "checkpoints", "state.json")
        _wait(
            lambda: os.path.exists(state_path) and max((s for s, _ in _steps(log1)[0]), default=0) >= 4,
            p1,
            log1,
            producer,
            180,
            buffer,
        )
        p1.kill()
        p1.wait()
        f1.close()
        with open(state_path) as f:
            saved = json.load(f)
        assert saved["step"] % 3 == 0 and saved["version"] == saved["step"]
        first, _ = _steps(log1)
        assert first[0][1] < 0.4  # near chance (1/8) at the start

        # Second learner: resumes from the checkpoint, pushes its weights, continues.
        log2 = str(tmp_path / "learner2.log")
        p2, f2 = _learner(run_dir, tiny_model_dir, buffer.url, gen.url, log2)
        procs.append(p2)

        def learned():
            steps = _steps(log2)[0]
            return len(steps) >= 2 and min(r for _, r in steps[-2:]) > 0.9

        _wait(learned, p2, log2, producer, 180, buffer)
        p2.send_signal(signal.SIGTERM)  # graceful: finish the step, checkpoint, exit
        assert p2.wait(60) == 0
        f2.close()
        steps, text = _steps(log2)
        m = re.search(r"resumed from step (\d+), version (\d+)", text)
        assert m and int(m.group(1)) == saved["step"]
        resumed_version = int(m.group(2))  # above the checkpoint's when the dead learner pushed more
        assert resumed_version >= saved["version"]
        assert steps[0][0] == saved["step"] + 1  # the next step
        assert steps[-1][0] <= 40  # within the bounded number of steps
        with open(state_path) as f:
            final = json.load(f)
        assert final["step"] == steps[-1][0]
        assert final["version"] == resumed_version + final["step"] - saved["step"]
        assert _generator_version(gen.url) == final["version"]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        producer.stop()
        gen.stop()
        buffer.stop()


@pytest.mark.slow
@pytest.mark.parametrize("publisher", ["distributed", "disk"])
def test_two_rank_zero3_loop_pushes_and_resumes(tiny_model_dir, tmp_path, publisher):
    """`areal-mem learner` under torchrun with 2 ranks and ZeRO-3: gathered pushes pass the probe
    check; a second run resumes from the first one's checkpoint."""
    from areal_mem.net import free_port

    run_dir = str(tmp_path / "run")
    buffer = BufferProcess(run_dir, overrides=["buffer.max_staleness=1", "buffer.batch_groups=4"])
    gen = start_embedded_generator(
        tiny_model_dir, EmbeddedConfig(max_batch_size=16, torch_threads=1, weights_dirs=[run_dir], device="cpu")
    )  # the disk publisher writes there
    producer = Producer(gen.url, buffer.url)
    producer.start()
    try:
        for steps in (2, 3):
            cmd = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc_per_node",
                "2",
                "--master_addr",
                "127.0.0.1",
                "--master_port",
                str(free_port()),
                "-m",
                "areal_mem.app.cli",
                "learner",
                f"run_dir={run_dir}",
                f"model.path={tiny_model_dir}",
                f"buffer.url={buffer.url}",
                f"generator.urls=[{gen.url}]",
                "buffer.batch_groups=4",
                f"learner.steps={steps}",
                "learner.lr=1e-2",
                "learner.checkpoint_interval=2",
                "learner.publish.probe_check=true",
                f"learner.publish.kind={publisher}",
                "learner.zero_stage=3",
            ]
            p = subprocess.run(
                cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1")
            )
            assert p.returncode == 0, (p.stdout + p.stderr)[-5000:]
            assert f"[learner] done: step {steps}, version {steps}" in p.stdout + p.stderr
        assert "resumed from step 2, version 2" in p.stdout + p.stderr
        assert _generator_version(gen.url) == 3
    finally:
        producer.stop()
        gen.stop()
        buffer.stop()
