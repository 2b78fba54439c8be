"""The policy model: a local path or hub id, and the shape of a locally built tiny model."""

from dataclasses import dataclass, field

from omegaconf import MISSING


@dataclass
class TinyModelConfig:
    """Shape of the randomly initialised Qwen2 model that `areal-mem init-model` writes."""

    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    # The tokenizer's training text holds the run's workflow text (its prompt template and the
    # instructions it injects) this many times more, so those strings, present in every context
    # row, become whole words (the short prompt and the memory instruction: 105 tokens instead
    # of 231 at vocabulary 2048); 0: the released prompt once, as before. Not a Qwen2Config field.
    workflow_text_repeats: int = 0


@dataclass
class ModelConfig:
    path: str = MISSING  # local folder in Hugging Face format, or a hub id (production)
    tokenizer_path: str = ""  # empty: the tokenizer lives next to the model
    dtype: str = "float32"  # float32 | bfloat16 | float16
    build: bool = False  # build a tiny model (shape below) at `path` when none is there
    # import this model into `path` when none is there (`areal-mem model import SOURCE`): a .gguf
    # file, a transformers folder, or a known name (smollm2-135m-instruct); empty: none
    source: str = ""
    init: TinyModelConfig = field(default_factory=TinyModelConfig)
