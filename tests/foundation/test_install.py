"""The install resolves as README says: pip's real resolver (`pip install --dry-run --report`) on the
extras, against the package index, with one faiss build per install.

Needs the package index (PyPI), as CI has; nothing is installed. SGLang 0.5.23 pins torch 2.14.1,
transformers 5.19.0 and tokenizers 0.23.2, so the `gpu` extra must resolve beside exactly those.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAISS = {"faiss", "faiss-cpu", "faiss-gpu", "faiss-gpu-cu11", "faiss-gpu-cu12", "faiss-cuda"}


def _resolve(tmp_path, *requirements: str) -> dict:
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    res = subprocess.run(
        [*cmd, "--report", str(report), *requirements], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert res.returncode == 0, res.stderr[-4000:]
    with open(report, encoding="utf-8") as f:
        return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.load(f)["install"]}


def test_the_gpu_extra_resolves_beside_sglangs_pins_with_one_faiss(tmp_path):
    got = _resolve(tmp_path, f"{ROOT}[gpu]")  # README: pip install -e '.[gpu]' (SGLang pins the torch)
    assert (got["sglang"], got["torch"], got["transformers"], got["tokenizers"]) == (
        "0.5.23",
        "2.14.1",
        "5.19.0",
        "0.23.2",
    )
    assert sorted(FAISS & set(got)) == ["faiss-gpu-cu12"]
    assert "deepspeed" in got and "areal-mem" in got


def test_the_cpu_install_takes_the_cpu_faiss_and_no_cuda(tmp_path):
    got = _resolve(tmp_path, "torch==2.13.0", f"{ROOT}[cpu]")
    assert sorted(FAISS & set(got)) == ["faiss-cpu"]
    assert "sglang" not in got and not [n for n in got if n.startswith("nvidia-")]
    assert got["torch"].startswith("2.13.0")


@pytest.mark.parametrize("extras", ["", "[ray,test]"])
def test_no_faiss_without_the_cpu_or_gpu_extra(tmp_path, extras):
    got = _resolve(tmp_path, "torch==2.13.0", f"{ROOT}{extras}")
    assert not FAISS & set(got)
