"""configs/debug_gpu.yaml end to end on CPU: the one-GPU recipe with its devices overridden, so that
what does not depend on CUDA (the disk push between a learner and a generator that would share one
card, the recipe's sizes and keys) runs in CI."""

from benchmarks.harness.tiny import GPU_RECIPE_ON_CPU
from tests.launch.conftest import TinyTrain


def test_the_one_gpu_recipe_runs_on_cpu_with_the_devices_overridden(tmp_path):
    train = TinyTrain(tmp_path / "run", recipe="debug_gpu.yaml")
    code, out = train.run(*GPU_RECIPE_ON_CPU)
    assert code == 0, out[-4000:]
    train.check_finished(steps=2, groups=2)
    # weights went by disk: both pushes are in the run dir (learner.publish.keep_weights: 2)
    pushes = sorted(p.name for p in (train.run_dir / "weights").iterdir())
    assert pushes == ["v000001", "v000002"], pushes
    assert train.leftover_processes() == []
