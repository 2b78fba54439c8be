"""The DeepSpeed learner: optimisation, loss, publishing and checkpoints."""

from dataclasses import dataclass, field
from enum import Enum
from typing import List


class Dtype(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"


class ProxMode(str, Enum):
    recompute = "recompute"  # forward pass with the weights before this step's update
    loglinear = "loglinear"  # interpolate behaviour and current log-probs by version (no pass)


class LRSchedule(str, Enum):
    constant = "constant"
    cosine = "cosine"  # linear warm-up, then cosine decay to min_lr_ratio x lr (DeepSpeed's WarmupCosineLR)


class CapMode(str, Enum):
    truncate = "truncate"  # clamp the behaviour weight at the cap
    mask = "mask"  # drop tokens (or sequences) whose weight exceeds the cap


class CapLevel(str, Enum):
    token = "token"
    sequence = "sequence"  # geometric mean of the token weights of one context


class LossAgg(str, Enum):
    """How the per-token losses of a mini-batch are averaged (`learner.loss_agg`)."""

    token_mean = "token_mean"  # as released: every model token of every context weighs the same
    trajectory_mean = "trajectory_mean"  # every trajectory weighs the same, whatever its contexts and tokens
    context_mean = "context_mean"  # every context weighs the same, whatever its tokens


class PublisherKind(str, Enum):
    distributed = "distributed"  # torch.distributed broadcast into the generators (SGLang handshake)
    disk = "disk"  # HF safetensors in the run dir + /update_weights_from_disk
    none = "none"  # no generators to update (SFT, offline tests)


class VerifyMode(str, Enum):
    """`learner.publish.verify`: compare the generators' weight fingerprints with the learner's after each push."""

    auto = "auto"  # on where the generators report comparable fingerprints (embedded), off for SGLang
    on = "on"  # and a generator that cannot report them (SGLang) is an error
    off = "off"


class ResumeMode(str, Enum):
    auto = "auto"  # continue from the latest checkpoint in run_dir if there is one
    never = "never"


@dataclass
class LossConfig:
    """The decoupled PPO loss per token (docs/learner.md "The loss"); `learner.loss.*`."""

    eps_clip_low: float = 0.2
    eps_clip_high: float = 0.2
    dual_clip: float = 3.0  # c for A < 0; 0 turns dual clip off
    decoupled: bool = True  # false: the behaviour policy is the proximal one (plain PPO/GRPO)
    behav_weight_cap: float = 5.0  # 0 turns the cap off
    behav_weight_cap_mode: CapMode = CapMode.truncate
    behav_weight_cap_level: CapLevel = CapLevel.token
    entropy_coef: float = 0.001
    kl_coef: float = 0.0  # low_var_kl to the frozen initial model; 0 loads no reference
    kl_clamp: float = 10.0


@dataclass
class PublishConfig:
    """Weights to the generators after a step (`learner.publish.*`): pause -> push -> continue."""

    kind: PublisherKind = PublisherKind.distributed
    interval: int = 1  # push every N steps
    pause_mode: str = "abort"  # /pause_generation mode: abort | retract | in_place
    bucket_mb: float = 512.0  # distributed: bytes per broadcast bucket, in MiB
    master_address: str = "127.0.0.1"  # distributed: this host as the generators reach it
    ranks_per_server: int = 1  # distributed: weight-group ranks per generator (SGLang tp size)
    keep_weights: int = 2  # disk: how many pushed checkpoints to keep
    probe_check: bool = False  # after a push, compare the generator's log-probs on a probe
    probe_tolerance: float = 1e-4
    # After every push (and re-delivery) each generator reports a fingerprint of every tensor it
    # serves (/weights_checker); one that differs from the learner's is a WeightMismatch naming
    # the generator and the tensors (docs/learner.md "Verified pushes": cost per push measured).
    verify: VerifyMode = VerifyMode.auto
    # Surviving generator restarts: the publisher keeps a host copy of the weights it last pushed
    # (distributed publisher: one model's size in CPU memory), checks the generators every
    # heal_interval_s and pushes that copy into one that came back (or failed a push) once it is
    # up; a push waits up to restart_timeout_s for it. Off: a failed push fails the run.
    heal: bool = True
    heal_interval_s: float = 1.0
    restart_timeout_s: float = 300.0


@dataclass
class SFTConfig:
    """`areal-mem sft`: supervised warm start on context rows (loss on masked-in tokens)."""

    data: List[str] = field(default_factory=list)  # jsonl or Arrow (.arrow/.parquet) files of context rows
    epochs: int = 1
    batch_rows: int = 64  # contexts per optimiser step (when batch_tokens is 0)
    # > 0: each step trains rows of similar length whose rows x longest row stays within this
    # many tokens, in place of batch_rows rows drawn at random (docs/learner.md "SFT batches")
    batch_tokens: int = 0
    lr: float = 1e-4
    # decaying the rate lets a short SFT end where a longer constant-rate one would (docs/debug_recipe.md)
    lr_schedule: LRSchedule = LRSchedule.constant
    warmup_steps: int = 0  # cosine: steps of linear warm-up from 0
    min_lr_ratio: float = 0.0  # cosine: the rate at the last step, as a share of lr
    out_dir: str = ""  # empty: <run_dir>/sft/model (checkpoints in <run_dir>/sft/checkpoints)
    # `areal-mem train`: warm-start from oracle demonstrations of the synthetic world before RL.
    warm_start: bool = False
    oracle_questions: int = 0  # train questions to demonstrate; 0: all
    oracle_mistake_rate: float = 0.1  # share of scripted mistakes, so RL has room to improve
    # torch threads of the SFT stage of `areal-mem train`, which runs alone; 0: every core
    threads: int = 0


class LoraInit(str, Enum):
    """How a new adapter starts (peft's `init_lora_weights`)."""

    default = "default"  # A Kaiming-uniform, B zero: the adapted model starts as the base model
    gaussian = "gaussian"  # A Gaussian (std 1/rank), B zero


@dataclass
class LoraConfig:
    """`learner.lora.*`: train a LoRA adapter (peft) in place of every parameter; the base stays
    frozen, checkpoints hold the adapter and its optimiser state, pushes carry the adapter only
    (docs/learner.md "LoRA")."""

    enabled: bool = False
    rank: int = 8
    alpha: float = 16.0  # the update is (alpha / rank) x B A
    dropout: float = 0.0  # on the adapter's input in training (the generators apply none)
    target_modules: List[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    init: LoraInit = LoraInit.default
    name: str = "policy"  # the adapter's name on the generators (rollout requests name it)


@dataclass
class LearnerConfig:
    steps: int = 100  # optimiser steps (batches) to train
    lr: float = 1e-6
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    zero_stage: int = 2  # DeepSpeed ZeRO stage 0..3
    dtype: Dtype = Dtype.float32  # training precision (bf16 keeps fp32 master weights)
    gradient_checkpointing: bool = False
    micro_batch_tokens: int = 8192  # padded tokens (rows x longest row) per forward pass
    mini_batches: int = 1  # optimiser updates per batch (PPO epochs over mini-batches)
    # Compute each prompt prefix that rows of a micro-batch share once, every row attending to it
    # (learner/shared_prefix.py); micro_batch_tokens then counts the tokens of the prefix tree.
    # Off by default: on the debug recipe's tiny model it was slower (docs/reports/shared_prefix.md)
    shared_prefix: bool = False
    shared_prefix_min_tokens: int = 32  # a shared run shorter than this is recomputed per row
    loss: LossConfig = field(default_factory=LossConfig)
    prox_logp: ProxMode = ProxMode.recompute  # how the proximal log-probs of the decoupled loss are had
    adv_norm_std: bool = True  # divide group-centred rewards by their unbiased std + 1e-6
    # Train no rows of a group whose rewards are all equal (zero advantage: no policy gradient);
    # faster steps, and the token-mean is over the groups that carry a signal (DAPO). Off as released.
    skip_zero_adv_groups: bool = False
    # token_mean pools every token, so an episode of five contexts weighs five times one of a
    # single context (and a long answer more than a short one); the other two modes undo that.
    loss_agg: LossAgg = LossAgg.token_mean
    temperature: float = 1.0  # the rollout temperature: log-probs are of logits / temperature
    publish: PublishConfig = field(default_factory=PublishConfig)
    # Checkpoints and logs.
    checkpoint_interval: int = 50  # steps between DeepSpeed checkpoints (and one at shutdown)
    keep_checkpoints: int = 2
    resume: ResumeMode = ResumeMode.auto
    export_hf: bool = True  # write the final model in HF format to <run_dir>/final
    log_interval: int = 1
    batch_timeout_s: float = 600.0  # give up waiting for the buffer after this long
    sft: SFTConfig = field(default_factory=SFTConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
