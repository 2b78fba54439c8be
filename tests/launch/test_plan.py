"""The launch plan: what a run starts, with its GPU split, before anything starts."""

import pytest

from areal_mem.app.launch.plan import Addresses, evaluator_specs, learner_specs, service_specs, worker_specs
from areal_mem.config import ConfigError, load_run


def plan_cfg(*overrides):
    return load_run([], ["model.path=m", *overrides])


def test_gpu_split_between_generators_and_learner_ranks():
    cfg = plan_cfg(
        "generator.num_servers=2",
        "launcher.generator_gpus=[0,1,2,3]",
        "launcher.gpus_per_generator=2",
        "launcher.learner_ranks=2",
        "launcher.learner_gpus=[4,5]",
    )
    gens = [s for s in service_specs(cfg, "c.yaml") if s.name.startswith("generator")]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in gens] == ["0,1", "2,3"]
    ranks = learner_specs(cfg, "c.yaml", Addresses(["r"], ["g"], "b"), "10.0.0.1", 29500)
    assert [(s.name, s.env["RANK"], s.env["LOCAL_RANK"], s.env["CUDA_VISIBLE_DEVICES"]) for s in ranks] == [
        ("learner0", "0", "0", "4,5"),
        ("learner1", "1", "1", "4,5"),
    ]
    assert all(s.env["MASTER_ADDR"] == "10.0.0.1" and s.env["WORLD_SIZE"] == "2" for s in ranks)


def test_no_split_sets_no_devices_and_addresses_reach_every_worker():
    cfg = plan_cfg("rollout.num_workers=3")
    assert all("CUDA_VISIBLE_DEVICES" not in s.env for s in service_specs(cfg, "c.yaml"))
    workers = worker_specs(cfg, "c.yaml", Addresses(["http://r"], ["http://g1", "http://g2"], "grpc://b"))
    assert [s.name for s in workers] == ["rollout0", "rollout1", "rollout2"]
    assert all(
        "generator.urls=[http://g1,http://g2]" in s.argv
        and "buffer.url=grpc://b" in s.argv
        and "retriever.urls=[http://r]" in s.argv
        and s.restart
        for s in workers
    )


def test_a_too_small_gpu_list_names_the_keys():
    cfg = plan_cfg("generator.num_servers=2", "launcher.generator_gpus=[0]")
    with pytest.raises(ConfigError, match="launcher.generator_gpus"):
        service_specs(cfg, "c.yaml")
    cfg = plan_cfg("launcher.learner_ranks=2", "launcher.learner_gpus=[0]")
    with pytest.raises(ConfigError, match="launcher.learner_gpus"):
        learner_specs(cfg, "c.yaml", Addresses(), "127.0.0.1", 1)


def test_rollout_workers_without_a_publisher_are_refused_before_anything_starts(tmp_path):
    from areal_mem.app.train import TrainPipeline

    cfg = plan_cfg("learner.publish.kind=none", f"run_dir={tmp_path}")
    with pytest.raises(
        ConfigError,
        match=r"learner.publish.kind=none with rollout workers: .* "
        r"\(buffer.max_staleness \+ 1\) x buffer.batch_groups",
    ):
        worker_specs(cfg, "c.yaml", Addresses())
    with pytest.raises(ConfigError, match="learner.publish.kind=none"):
        TrainPipeline(cfg)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_distributed_push_into_sglang_needs_a_weight_rank_per_tensor_parallel_rank():
    """Each SGLang server joins the weight group with all its tp ranks; a mismatch would hang the join."""
    from areal_mem.app.launch.plan import require_publisher

    tp2 = ("generator.backend=sglang", "launcher.gpus_per_generator=2")
    with pytest.raises(ConfigError, match=r"ranks_per_server=1, but .*launcher.gpus_per_generator=2"):
        require_publisher(plan_cfg(*tp2))
    require_publisher(plan_cfg(*tp2, "learner.publish.ranks_per_server=2"))
    require_publisher(plan_cfg(*tp2, "learner.publish.kind=disk"))  # a disk push has no group


def test_the_one_gpu_recipe_puts_generation_and_training_on_one_card_and_pushes_by_disk():
    """configs/debug_gpu.yaml, planned here on a machine without CUDA: nothing in the plan needs one."""
    import os

    from areal_mem.app.launch.plan import require_publisher
    from areal_mem.config.learner import Dtype, PublisherKind

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cfg = load_run([os.path.join(repo, "configs", "debug_gpu.yaml")], ["run_dir=/tmp/plan-gpu"])
    assert cfg.generator.embedded.device == "cuda" and cfg.learner.dtype == Dtype.bfloat16
    assert cfg.learner.publish.kind == PublisherKind.disk and cfg.retriever.kind.value == "bm25"
    require_publisher(cfg)
    specs = {s.name: s for s in service_specs(cfg, "c.yaml")}
    assert specs["generator0"].env["CUDA_VISIBLE_DEVICES"] == "0"
    assert "CUDA_VISIBLE_DEVICES" not in specs["retriever"].env  # BM25 on the CPU
    (rank,) = learner_specs(cfg, "c.yaml", Addresses(["r"], ["g"], "b"), "127.0.0.1", 29500)
    assert rank.env["CUDA_VISIBLE_DEVICES"] == "0" and rank.env["WORLD_SIZE"] == "1"
    with pytest.raises(ConfigError, match=r"share GPU\(s\) \[0\].*learner.publish.kind=disk"):
        require_publisher(
            load_run([os.path.join(repo, "configs", "debug_gpu.yaml")], ["learner.publish.kind=distributed"])
        )


def test_the_evaluator_beside_training_is_planned_only_when_asked_and_refuses_sglang_without_priorities():
    addresses = Addresses(["http://r"], ["http://g"], "grpc://b")
    assert evaluator_specs(plan_cfg(), "c.yaml", addresses) == []
    [own] = evaluator_specs(plan_cfg("eval.interval=5", "launcher.cpu_affinity={evaluator: [1]}"), "c.yaml", addresses)
    assert own.argv[:3] == ["evaluator", "--config", "c.yaml"] and "generator.urls=[http://g]" in own.argv
    assert own.restart and own.resources == {"CPU": 1.0} and own.env["AREAL_MEM_CPUS"] == "1"
    [gpu] = evaluator_specs(plan_cfg("eval.interval=5", "generator.backend=sglang"), "c.yaml", addresses)
    assert gpu.resources == {"CPU": 1.0, "GPU": 1.0}  # its own SGLang server needs a device
    shared = ["eval.interval=5", "eval.placement=shared", "generator.backend=sglang"]
    with pytest.raises(ConfigError, match="--enable-priority-scheduling and --default-priority-value"):
        evaluator_specs(plan_cfg(*shared), "c.yaml", addresses)
    args = "generator.sglang_args=[--enable-priority-scheduling,--default-priority-value,'0']"
    [ok] = evaluator_specs(plan_cfg(*shared, args), "c.yaml", addresses)
    assert ok.resources == {"CPU": 1.0}
