"""The debug recipes shrunk to seconds per step: overrides shared by the tests that run them and by
`benchmarks/gpu_check.py --smoke`."""

TINY_RECIPE = [
    "world.passages=200",
    "world.questions=120",
    "model.init.hidden_size=32",
    "model.init.intermediate_size=64",
    "model.init.num_hidden_layers=1",
    "model.init.num_attention_heads=2",
    "model.init.num_key_value_heads=1",
    "model.init.vocab_size=800",
    "rollout.group_size=2",
    "rollout.limits.max_turns=2",
    "rollout.limits.max_new_tokens=24",
    "rollout.max_concurrent_groups=4",
    "buffer.batch_groups=2",
    # an untrained tiny model's rewards are mostly all equal: train those groups' rows anyway,
    # so the tests run the learner's real forward and backward
    "learner.skip_zero_adv_groups=false",
    # no evaluation beside training: a few steps' runs would spend their time starting it
    # (tests/launch/test_eval_during_training.py turns it on)
    "eval.interval=0",
]

# configs/debug_gpu.yaml with its devices on the CPU (and a CPU-sized batch): what runs in CI
GPU_RECIPE_ON_CPU = [
    "generator.embedded.device=cpu",
    "generator.embedded.dtype=float32",
    "learner.dtype=float32",
    "launcher.generator_gpus=[]",
    "launcher.learner_gpus=[]",
    "retriever.threads=1",
    "generator.embedded.max_batch_size=16",
    "rollout.max_concurrent_groups=4",
]
