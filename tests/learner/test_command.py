"""The learner commands refuse unusable configs with a message that names the key."""

from areal_mem.app.cli import main


def test_learner_needs_a_buffer_and_generators(capsys):
    assert main(["learner", "model.path=/nowhere"]) == 2
    assert "buffer.url is empty" in capsys.readouterr().err
    assert main(["learner", "model.path=/nowhere", "buffer.url=grpc://127.0.0.1:1"]) == 2
    assert "generator.urls is empty" in capsys.readouterr().err


def test_bad_learner_keys_are_named(capsys):
    assert main(["learner", "model.path=/x", "learner.prox_logp=sometimes"]) == 2
    err = capsys.readouterr().err
    assert "learner.prox_logp" in err and "recompute" in err
    assert main(["learner", "model.path=/x", "learner.zero_stag=3"]) == 2
    assert "zero_stag" in capsys.readouterr().err


def test_sft_without_data_says_what_to_set(capsys):
    assert main(["sft", "model.path=/x"]) == 2
    assert "learner.sft.data" in capsys.readouterr().err
