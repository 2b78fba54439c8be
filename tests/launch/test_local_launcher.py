"""The local launcher runs the whole asynchronous loop as real processes and leaves none behind."""

from areal_mem.rollout.tools.tape import read_tape


def test_debug_recipe_runs_two_steps_and_cleans_up(tiny_train):
    code, out = tiny_train.run("rollout.record_tools=true")
    assert code == 0, out[-5000:]
    assert not tiny_train.leftover_processes()
    tiny_train.check_finished()
    # the rollout worker recorded its searches (the untrained model may make none) in its own tape
    read_tape(str(tiny_train.run_dir / "tools" / "worker0.jsonl"))
