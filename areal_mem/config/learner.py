"""The DeepSpeed learner: optimisation, loss, publishing and checkpoints."""
from dataclasses import dataclass


@dataclass
class LearnerConfig:
    steps: int = 100
    lr: float = 1e-6
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    zero_stage: int = 2
    dtype: str = "float32"
    micro_batch_tokens: int = 8192
    mini_batches: int = 1
    eps_clip_low: float = 0.2
    eps_clip_high: float = 0.2
    dual_clip: float = 3.0
    behav_weight_cap: float = 5.0
    decoupled: bool = True
    adv_norm_std: bool = True
    entropy_coef: float = 0.001
    kl_coef: float = 0.0
    publisher: str = "distributed"  # distributed | disk
    publish_interval: int = 1
    checkpoint_interval: int = 50
    resume: str = "auto"  # auto | never
