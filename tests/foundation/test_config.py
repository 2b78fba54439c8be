"""Config errors must name the key, where it came from, and what is allowed."""

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from areal_mem.config import ConfigError, load_config, save_resolved

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


def test_unknown_key_names_file_line_and_allowed_keys(tmp_path):
    path = write(tmp_path, "model:\n  path: m\nretriever:\n  kind: dense\n  topn: 3\n")
    with pytest.raises(ConfigError) as e:
        load_config([path])
    msg = str(e.value)
    assert f"{path}:5" in msg and "'retriever.topn'" in msg
    assert "top_n" in msg and "index_dir" in msg  # the allowed keys are listed


def test_wrong_type_from_override_names_key_and_type():
    with pytest.raises(ConfigError) as e:
        load_config([], ["model.path=m", "learner.lr=fast"])
    msg = str(e.value)
    assert "learner.lr=fast" in msg and "'learner.lr'" in msg and "expects float" in msg


def test_enum_lists_allowed_values():
    with pytest.raises(ConfigError) as e:
        load_config([], ["model.path=m", "retriever.kind=sparse"])
    assert "dense|bm25" in str(e.value)


def test_missing_required_value():
    with pytest.raises(ConfigError) as e:
        load_config([])
    assert "model.path" in str(e.value)


def test_malformed_override_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="expected key.sub=value"):
        load_config([], ["model.path"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config([str(tmp_path / "nope.yaml")])
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config([write(tmp_path, "model: [unclosed\n")])


def test_layering_interpolation_and_resolved_file(tmp_path):
    path = write(tmp_path, f"run_dir: {tmp_path}/run\nseed: 7\nmodel:\n  path: m\n")
    cfg = load_config([path], ["world.passages=300"])
    assert cfg.world.seed == 7 and cfg.world.dir == f"{tmp_path}/run/world"
    assert cfg.world.passages == 300
    saved = OmegaConf.load(save_resolved(cfg))
    assert saved.world.dir == f"{tmp_path}/run/world" and saved.world.seed == 7


def test_every_shipped_config_validates():
    configs = os.path.join(REPO, "configs")
    names = sorted(n for n in os.listdir(configs) if n.endswith(".yaml"))
    assert "debug_cpu.yaml" in names
    for name in names:
        load_config([os.path.join(configs, name)], ["model.path=m"])


def test_cli_config_command_prints_and_errors(tmp_path):
    cmd = [sys.executable, "-m", "areal_mem.app.cli", "config", "model.path=m", f"run_dir={tmp_path}", "--save"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "path: m" in out.stdout and os.path.exists(tmp_path / "config.yaml")
    bad = subprocess.run(
        [sys.executable, "-m", "areal_mem.app.cli", "config", "model.pth=m"], capture_output=True, text=True, cwd=REPO
    )
    assert bad.returncode == 2 and "unknown key 'model.pth'" in bad.stderr


@pytest.mark.parametrize("name", ["memsearcher_qwen2.5_3b.yaml", "memsearcher_qwen2.5_7b.yaml"])
def test_production_recipes_carry_the_released_hyper_parameters(name):
    cfg = load_config([os.path.join(REPO, "configs", name)])
    assert cfg.model.path.startswith("Qwen/Qwen2.5-") and cfg.generator.backend.value == "sglang"
    r, lr = cfg.rollout, cfg.learner
    lim = r.limits
    assert (r.group_size, lim.max_turns, lim.max_new_tokens, lim.max_memory_tokens, r.top_p) == (5, 5, 512, 1024, 0.99)
    assert r.prompt_style.value == "released" and cfg.buffer.batch_groups == 256 and lr.mini_batches == 2
    assert (lr.lr, lr.grad_clip, lr.weight_decay) == (1e-6, 1.0, 0.01)
    loss = lr.loss
    assert (loss.eps_clip_low, loss.eps_clip_high, loss.dual_clip) == (0.2, 0.2, 3.0)
    assert (loss.entropy_coef, loss.kl_coef, loss.kl_clamp) == (0.001, 0.001, 10.0)
    assert cfg.retriever.encoder.path == "intfloat/e5-base-v2"
    assert (cfg.retriever.encoder.query_prefix, cfg.retriever.encoder.passage_prefix) == ("query: ", "passage: ")
    assert cfg.eval.max_turns == 20 and cfg.eval.temperature == 0.0
    gens = cfg.generator.num_servers * cfg.launcher.gpus_per_generator
    assert not set(cfg.launcher.generator_gpus[:gens]) & set(cfg.launcher.learner_gpus)
