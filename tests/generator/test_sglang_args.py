"""SGLang 0.5.23's own argument parser judges the `python -m sglang.launch_server` line that
`areal-mem generator serve` builds, for both production recipes and each generator option the
config exposes (model, host, port, token, tensor-parallel size, `generator.sglang_args`).

The line is captured where the generator command would start the child (the real command runs
in this process up to `ChildProcess`), then parsed in a subprocess by `_sglang_parse.py`, which
loads `sglang.srt.server_args` from the wheel (installed with `--no-deps`) and stands in inert
modules for its two imports a CPU machine cannot have (`triton`, `IPython`); see its docstring.
"""

import json
import os
import subprocess
import sys

import pytest

from areal_mem.app.cli import main
from areal_mem.config import load_run

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCH = [sys.executable, "-m", "sglang.launch_server"]


class _Captured(Exception):
    pass


def _launch_line(monkeypatch, recipe: str, overrides):
    """The argv `areal-mem generator serve --config RECIPE ...` would start SGLang with."""
    import areal_mem.rollout.generator.launch as launch

    seen = []

    class Capture:
        def __init__(self, name, cmd, log_path, env=None):
            seen.append(cmd)

        def start(self):
            raise _Captured()

    monkeypatch.setattr(launch, "ChildProcess", Capture)
    with pytest.raises(_Captured):
        main(["generator", "serve", "--config", recipe, "--port", "30011", *overrides])
    (cmd,) = seen
    assert cmd[:3] == LAUNCH
    return cmd[3:]


def _sglang_parse(*argvs):
    res = subprocess.run(
        [sys.executable, os.path.join(HERE, "_sglang_parse.py"), json.dumps(list(argvs))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return [json.loads(line) for line in res.stdout.splitlines()]


CASES = [
    ("memsearcher_qwen2.5_3b.yaml", []),
    ("memsearcher_qwen2.5_7b.yaml", []),
    (  # every generator option that reaches the line: bind, token, tensor-parallel size, extra flags
        "memsearcher_qwen2.5_3b.yaml",
        [
            "generator.host=0.0.0.0",
            "generator.token=s3cret",
            "launcher.gpus_per_generator=2",
            "learner.publish.ranks_per_server=2",
            'generator.sglang_args=["--mem-fraction-static","0.7","--dtype","bfloat16","--context-length","8192"]',
        ],
    ),
]


def test_sglangs_parser_accepts_every_line_the_launcher_builds(monkeypatch):
    lines = [_launch_line(monkeypatch, os.path.join(REPO, "configs", recipe), ov) for recipe, ov in CASES]
    parsed = _sglang_parse(*lines)
    for (recipe, overrides), got in zip(CASES, parsed):
        cfg = load_run([os.path.join(REPO, "configs", recipe)], overrides)
        extra = list(cfg.generator.sglang_args)
        want = {
            "model_path": cfg.model.path,
            "host": cfg.generator.host,
            "port": 30011,
            "tp_size": cfg.launcher.gpus_per_generator,
            "base_gpu_id": 0,  # the launcher's CUDA_VISIBLE_DEVICES picks the GPUs
            "api_key": cfg.generator.token or None,
            "mem_fraction_static": float(extra[extra.index("--mem-fraction-static") + 1]),
            "dtype": extra[extra.index("--dtype") + 1],
        }
        assert got == want, (recipe, overrides)


def test_sglangs_parser_refuses_a_flag_it_does_not_have(monkeypatch):
    """The judge can fail: a misspelt `generator.sglang_args` flag is refused by SGLang itself."""
    line = _launch_line(
        monkeypatch,
        os.path.join(REPO, "configs", "memsearcher_qwen2.5_3b.yaml"),
        ['generator.sglang_args=["--tp-sise","2"]'],
    )
    (got,) = _sglang_parse(line)
    assert "unrecognized arguments: --tp-sise 2" in got["error"]
