"""Generator fixtures: real embedded servers on 127.0.0.1 and a client whose every request and
response is checked against SGLang's own published schema."""

from __future__ import annotations

from collections import Counter

import pytest
import torch


@pytest.fixture(scope="session")
def sglang_api():
    from areal_mem.rollout.generator.sglang_schema import INSTALL_HINT, load_sglang_api_types

    try:
        return load_sglang_api_types()
    except ImportError as e:
        pytest.fail(f"the SGLang contract tests need the schema: {INSTALL_HINT} ({e})")


class ContractChecker:
    """Client hooks that decode traffic with SGLang's structs (JsonContractError fails the test)."""

    def __init__(self, api):
        self.api = api
        self.checked = Counter()

    def request(self, route: str, payload) -> None:
        if route == "/generate":
            self.api.GenerateRequest.from_json_value(payload)
            self.checked["request"] += 1
        elif route == "/abort_request":
            self.api.AbortRequest.from_json_value(payload)

    def response(self, route: str, body) -> None:
        if route == "/generate":
            self.api.GenerateResponse.from_json_value(body)
            self.checked["response"] += 1
        elif route == "/model_info":
            self.api.GetModelInfoResponse.from_json_value(body)


@pytest.fixture
def checker(sglang_api):
    return ContractChecker(sglang_api)


@pytest.fixture(scope="session")
def ref_model(tiny_model_dir):
    """The same weights in this process, for teacher-forced reference log-probs."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def teacher_forced_logprobs(model, prompt, output, temperature: float = 1.0):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + output])).logits[0, len(prompt) - 1 : -1].float()
    lp = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    return lp.gather(1, torch.tensor(output)[:, None])[:, 0]


def perturbed_state(model, seed: int, scale: float = 0.5):
    """A different set of weights of the same shapes (every parameter changed)."""
    g = torch.Generator().manual_seed(seed)
    return {
        n: (p.detach() + scale * torch.randn(p.shape, generator=g) * p.detach().std().clamp(min=1e-3))
        for n, p in model.named_parameters()
    }


@pytest.fixture(scope="session")
def server(tiny_model_dir):
    """One embedded server shared by tests that leave its weights alone."""
    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.rollout.generator.launch import start_embedded_generator

    h = start_embedded_generator(tiny_model_dir, EmbeddedConfig(max_batch_size=16, torch_threads=1, device="cpu"))
    yield h
    h.stop()


@pytest.fixture
def fresh_server(tiny_model_dir, tmp_path_factory):
    """A server of its own (weights get changed, from checkpoints under pytest's temp folder)."""
    from areal_mem.config.generator import EmbeddedConfig
    from areal_mem.rollout.generator.launch import start_embedded_generator

    h = start_embedded_generator(
        tiny_model_dir,
        EmbeddedConfig(
            max_batch_size=16, torch_threads=1, weights_dirs=[str(tmp_path_factory.getbasetemp())], device="cpu"
        ),
    )
    yield h
    h.stop()


def make_prompts(n: int, vocab: int, seed: int = 0, lo: int = 4, hi: int = 24):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(3, vocab, (int(torch.randint(lo, hi, (1,), generator=g)),), generator=g).tolist()
        for _ in range(n)
    ]


def model_with(ref_model, state):
    """A copy of `ref_model` holding `state`."""
    import copy

    m = copy.deepcopy(ref_model)
    m.load_state_dict(state, strict=False)
    return m


class Helpers:
    """Shared test helpers, handed out as a fixture (test modules cannot import conftest)."""

    model_with = staticmethod(model_with)
    teacher_forced_logprobs = staticmethod(teacher_forced_logprobs)
    perturbed_state = staticmethod(perturbed_state)
    make_prompts = staticmethod(make_prompts)
    ContractChecker = ContractChecker


@pytest.fixture(scope="session")
def h():
    return Helpers


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Reference passes here share the CPUs with the servers: one thread avoids oversubscription."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
