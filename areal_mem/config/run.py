"""The root schema of one run: every component's config under one key."""

from dataclasses import dataclass, field

from .buffer import BufferConfig
from .eval import EvalConfig
from .generator import GeneratorConfig
from .launcher import LauncherConfig
from .learner import LearnerConfig
from .model import ModelConfig
from .retriever import RetrieverConfig
from .rollout import RolloutConfig
from .world import WorldConfig


@dataclass
class RunConfig:
    run_dir: str = "runs/debug"
    seed: int = 0
    world: WorldConfig = field(default_factory=WorldConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    launcher: LauncherConfig = field(default_factory=LauncherConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        """The generators serve the learner's adapters: `generator.lora` follows `learner.lora`."""
        gen, learn = self.generator.lora, self.learner.lora
        gen.enabled = gen.enabled or learn.enabled
        gen.max_rank = gen.max_rank or learn.rank
        gen.target_modules = list(gen.target_modules or learn.target_modules)
        gen.adapter = gen.adapter or (learn.name if learn.enabled else "")
        if learn.enabled and learn.rank > gen.max_rank:
            raise ValueError(f"learner.lora.rank {learn.rank} is above generator.lora.max_rank {gen.max_rank}")
        missing = sorted(set(learn.target_modules) - set(gen.target_modules)) if learn.enabled else []
        if missing:
            raise ValueError(f"learner.lora.target_modules {missing} are not in generator.lora.target_modules")
