"""The local launcher runs the whole asynchronous loop as real processes and leaves none behind."""


def test_debug_recipe_runs_two_steps_and_cleans_up(tiny_train):
    code, out = tiny_train.run()
    assert code == 0, out[-5000:]
    assert not tiny_train.leftover_processes()
    tiny_train.check_finished()
