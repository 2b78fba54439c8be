"""With `learner.lora`, the SGLang line gains `--enable-lora`, `--max-lora-rank`,
`--lora-target-modules` and `--max-loras-per-batch`, as SGLang 0.5.23's own parser reads them."""

import json
import os
import subprocess
import sys

from tests.generator.test_sglang_args import HERE, REPO, _launch_line

LORA_FIELDS = ["enable_lora", "max_lora_rank", "lora_target_modules", "max_loras_per_batch"]


def test_sglangs_parser_reads_the_lora_flags(monkeypatch):
    recipe = os.path.join(REPO, "configs", "memsearcher_qwen2.5_3b.yaml")
    overrides = ["learner.lora.enabled=true", "learner.lora.rank=16", 'learner.lora.target_modules=["q_proj","v_proj"]']
    plain = _launch_line(monkeypatch, recipe, [])
    line = _launch_line(monkeypatch, recipe, overrides)
    assert "--enable-lora" not in plain
    res = subprocess.run(
        [sys.executable, os.path.join(HERE, "_sglang_parse.py"), json.dumps([line]), json.dumps(LORA_FIELDS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.splitlines()[0])
    assert {k: got[k] for k in LORA_FIELDS} == {
        "enable_lora": True,
        "max_lora_rank": 16,
        "lora_target_modules": ["q_proj", "v_proj"],
        "max_loras_per_batch": 4,
    }, got
