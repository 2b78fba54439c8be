"""Where the synthetic search world lives and how big it is."""
from dataclasses import dataclass

from omegaconf import II


@dataclass
class WorldConfig:
    dir: str = "${run_dir}/world"  # folder with corpus.jsonl and train/dev/test.jsonl
    seed: int = II("seed")  # defaults to the run seed
    passages: int = 2000  # roughly how many corpus passages to write
    questions: int = 5000  # how many questions over all splits
    dev_fraction: float = 0.1
    test_fraction: float = 0.1
