"""Fuzzed requests to every HTTP route of the retriever and the embedded generator.

Every route the routers register must be in the tables below (a new route fails the first
test until it is fuzzed too). Each bad request must get a 4xx with a JSON error that names the
field at fault, and the service must then give the next good request its exact answer.

Unknown fields: the retriever's own APIs refuse them (400 naming the field); the generator
follows SGLang's schema, whose request objects ignore unknown top-level keys while
`sampling_params` refuses them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

# ---- JSON values and bad values --------------------------------------------------------------
HUGE_INTS = st.sampled_from([2**63, -(2**63) - 1, 10**30, 2**64, -(10**400)])
SCALARS = (
    st.booleans() | st.integers() | HUGE_INTS | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS | st.none(),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
    max_leaves=6,
)


def _is(value: Any, kinds: tuple) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, tuple(k for k in kinds if k is not bool))


def not_(*kinds) -> st.SearchStrategy:
    """JSON values of any other type (null is left out: it means "the default" on these APIs)."""
    return VALUES.filter(lambda v: v is not None and not _is(v, kinds))


STR, INT, BOOL, LIST, DICT, NUM = (str,), (int,), (bool,), (list,), (dict,), (int, float)
BLANK = st.sampled_from(["", "   ", "\n\t"])
SURROGATE = st.sampled_from(["\ud800 lone surrogate", "\udfff", "a\udc80b"])
NON_FINITE = st.sampled_from([float("nan"), float("inf"), float("-inf")])
# every numeric field also gets these: NaN/inf, integers past int64 and float, negative ones
NUMERIC_EDGES = NON_FINITE | HUGE_INTS | st.integers(max_value=-1)
# a seed's range is torch's, 0..2**64-1: 2**63 is a good seed, so the edges past int64 are left out
SEED_EDGES = NON_FINITE | st.integers(min_value=2**64) | st.integers(max_value=-1)


@dataclass
class Route:
    base: Optional[Dict[str, Any]]  # a valid, harmless body; None: the route reads no body
    fields: Dict[str, st.SearchStrategy] = field(default_factory=dict)  # dotted path -> bad values
    unknown: str = ""  # "refused" | "ignored" | "" (not fuzzed: a valid body has side effects)
    reads_body: bool = True


def _search(query_key: str, n_key: str, flag_key: str, many: bool) -> Route:
    bad_query = (
        (
            not_(*LIST)
            | st.just([])
            | st.lists(not_(*STR), min_size=1, max_size=3)
            | st.lists(BLANK | SURROGATE, min_size=1, max_size=2)
        )
        if many
        else not_(*STR) | BLANK | SURROGATE
    )
    return Route(
        {query_key: ["alpha"] if many else "alpha", n_key: 2, flag_key: False},
        {
            query_key: bad_query,
            n_key: not_(*INT) | st.integers(max_value=0) | st.integers(min_value=101) | HUGE_INTS,
            flag_key: not_(*BOOL),
        },
        "refused",
    )


NO_BODY = Route(None, reads_body=False)
RETRIEVER = {
    ("POST", "/search"): _search("query", "top_n", "return_score", many=False),
    ("POST", "/batch_search"): _search("query", "top_n", "return_score", many=True),
    ("POST", "/retrieve"): _search("queries", "topk", "return_scores", many=True),
    ("GET", "/health"): NO_BODY,
    ("HEAD", "/health"): NO_BODY,
}

VOCAB = 1 << 20  # more than the tiny model's vocabulary: ids from here up are refused
BAD_IDS = st.lists(st.integers(max_value=-1) | st.integers(min_value=VOCAB) | not_(*INT), min_size=1, max_size=3).map(
    lambda bad: [5] + bad
)
SP = "sampling_params."
# values pydantic's lax mode cannot coerce to the type
LAX_NOT_STR = st.sampled_from([1, 2.5, [], {}, True])
LAX_NOT_INT = st.sampled_from(["x", 1.5, [], {}, "1.5"])
LAX_NOT_NUM = st.sampled_from(["x", [], {}, "nan?"])
LAX_NOT_BOOL = st.sampled_from(["maybe", 2, [], {}, 0.5])
GENERATOR = {
    ("POST", "/generate"): Route(
        {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 1}},
        {
            "input_ids": not_(*LIST) | st.just([]) | BAD_IDS,
            "text": not_(*STR) | st.text(max_size=5) | SURROGATE | st.lists(SURROGATE, min_size=1, max_size=2),
            "rid": not_(*STR) | SURROGATE,
            "top_logprobs_num": not_(*INT) | st.integers(min_value=21) | NUMERIC_EDGES,
            "stream": not_(*BOOL),
            "return_logprob": not_(*BOOL),
            "sampling_params": not_(DICT[0], LIST[0]) | st.lists(not_(*DICT), min_size=1, max_size=1),
            SP + "max_new_tokens": not_(*INT) | st.integers(max_value=-1) | HUGE_INTS,
            SP + "temperature": not_(*NUM)
            | st.floats(max_value=-1e-9)
            | st.sampled_from([float("nan"), float("inf"), 10**400]),
            SP + "top_p": not_(*NUM) | st.floats(max_value=0) | st.floats(min_value=1.0001) | NUMERIC_EDGES,
            SP + "top_k": not_(*INT) | st.integers(max_value=-2) | st.just(0) | HUGE_INTS | NON_FINITE,
            SP + "min_p": not_(*NUM) | st.floats(max_value=-1e-9) | st.floats(min_value=1.0001) | NUMERIC_EDGES,
            SP + "min_new_tokens": not_(*INT) | NUMERIC_EDGES,
            SP + "stop": not_(STR[0], LIST[0])
            | st.lists(not_(*STR) | st.just("") | SURROGATE, min_size=1, max_size=2)
            | SURROGATE,
            SP + "stop_token_ids": not_(*LIST) | BAD_IDS | st.lists(NUMERIC_EDGES, min_size=1, max_size=2),
            SP + "sampling_seed": not_(*INT) | SEED_EDGES,
            SP + "ignore_eos": not_(*BOOL),
            SP + "skip_special_tokens": not_(*BOOL),
            SP + "n": st.integers(max_value=0) | st.integers(min_value=1025) | not_(*INT) | NUMERIC_EDGES,
            SP + "stream_interval": not_(*INT) | st.integers(max_value=0) | NUMERIC_EDGES,
        },
        "ignored",
    ),
    ("POST", "/pause_generation"): Route(
        {"mode": "in_place"},
        {
            "mode": not_(*STR)
            | st.text(max_size=8).filter(lambda s: s not in ("abort", "retract", "in_place"))
            | SURROGATE
        },
        "ignored",
    ),
    ("POST", "/continue_generation"): Route({}, {}, "ignored"),
    ("POST", "/abort_request"): Route(
        {"rid": "nothing-in-flight"}, {"rid": not_(*STR) | SURROGATE, "abort_all": not_(*BOOL)}, "ignored"
    ),
    ("POST", "/update_weights_from_disk"): Route(
        {"model_path": "<allowed>/copy"},
        {
            "model_path": not_(*STR)
            | st.sampled_from(["", "/", "/etc", "<allowed>/../..", "relative/dir"])
            | SURROGATE,
            "load_format": st.text(min_size=1, max_size=6).filter(lambda s: s not in ("auto", "safetensors"))
            | not_(*STR),
            "weight_version": not_(*STR) | SURROGATE,
            "abort_all_requests": not_(*BOOL),
            "flush_cache": not_(*BOOL),
        },
        "ignored",
    ),
    ("POST", "/init_weights_update_group"): Route(
        {
            "master_address": "127.0.0.1",
            "master_port": 1,
            "rank_offset": 1,
            "world_size": 2,
            "group_name": "fuzz",
            "backend": "gloo",
        },
        {
            "master_address": not_(*STR) | st.just("") | SURROGATE,
            "master_port": not_(*INT) | st.integers(max_value=0) | st.integers(min_value=65536) | NUMERIC_EDGES,
            "rank_offset": not_(*INT) | st.integers(max_value=0) | st.integers(min_value=2) | NUMERIC_EDGES,
            "world_size": not_(*INT) | st.integers(max_value=1) | st.integers(min_value=(1 << 16) + 1) | NUMERIC_EDGES,
            "group_name": not_(*STR) | st.just("") | SURROGATE,
            "backend": st.text(max_size=6).filter(lambda s: s not in ("", "nccl", "gloo")) | not_(*STR),
        },
    ),
    ("POST", "/update_weights_from_distributed"): Route(
        {"names": ["x"], "dtypes": ["float32"], "shapes": [[1]], "group_name": "no-such-group"},
        {
            "names": not_(*LIST) | st.lists(not_(*STR) | SURROGATE, min_size=1, max_size=1),
            "dtypes": not_(*LIST) | st.lists(not_(*STR), min_size=1, max_size=1),
            "shapes": not_(*LIST)
            | st.lists(not_(*LIST), min_size=1, max_size=1)
            | st.lists(st.lists(NUMERIC_EDGES, min_size=1, max_size=2), min_size=1, max_size=1),
            "group_name": not_(*STR) | SURROGATE,
        },
        "ignored",
    ),
    ("POST", "/update_weight_version"): Route(
        {"new_version": "0", "abort_all_requests": False},
        {"new_version": not_(*STR) | SURROGATE, "abort_all_requests": not_(*BOOL)},
        "ignored",
    ),
    # SGLang's LoRA routes (io_struct's LoRA requests; the fuzzed server runs without LoRA, so a
    # good body is refused as "not enabled" and a bad one names its field first)
    ("POST", "/load_lora_adapter"): Route(
        {"lora_name": "fuzz", "lora_path": "<allowed>/no-such-adapter"},
        {"lora_name": not_(*STR), "lora_path": not_(*STR)},
        "ignored",
    ),
    ("POST", "/load_lora_adapter_from_tensors"): Route(
        {"lora_name": "fuzz", "config_dict": {}, "serialized_named_tensors": []},
        {"lora_name": not_(*STR), "config_dict": not_(*DICT), "serialized_named_tensors": not_(*LIST)},
        "ignored",
    ),
    ("POST", "/unload_lora_adapter"): Route({"lora_name": "fuzz"}, {"lora_name": not_(*STR)}, "ignored"),
    # OpenAI-compatible (pydantic lax, as SGLang and vLLM validate: "5" is an int there), bad
    # fields are refused before the model name is looked up
    ("POST", "/v1/completions"): Route(
        {"model": "fuzz", "prompt": [5, 6], "max_tokens": 1},
        {
            "model": LAX_NOT_STR | SURROGATE,
            "prompt": not_(STR[0], LIST[0])
            | st.just([[5], "a"])
            | SURROGATE
            | st.lists(SURROGATE, min_size=1, max_size=2),
            "max_tokens": LAX_NOT_INT | NUMERIC_EDGES,
            "temperature": LAX_NOT_NUM | st.floats(max_value=-1e-9) | st.floats(min_value=2.0001) | NUMERIC_EDGES,
            "top_p": LAX_NOT_NUM | st.floats(max_value=0) | st.floats(min_value=1.0001) | NUMERIC_EDGES,
            "n": LAX_NOT_INT | st.integers(max_value=0) | st.integers(min_value=129) | NUMERIC_EDGES,
            "stream": LAX_NOT_BOOL,
            "logprobs": LAX_NOT_INT | st.integers(min_value=21) | NUMERIC_EDGES,
            "presence_penalty": LAX_NOT_NUM | st.floats(min_value=0.001, max_value=2.0) | NON_FINITE,
            "seed": LAX_NOT_INT | SEED_EDGES,
            "min_p": LAX_NOT_NUM | st.floats(min_value=1.0001) | NUMERIC_EDGES,
            "min_tokens": LAX_NOT_INT | NUMERIC_EDGES,
            "top_k": LAX_NOT_INT | st.just(0) | HUGE_INTS | st.integers(max_value=-2) | NON_FINITE,
            "stop_token_ids": st.lists(NUMERIC_EDGES | st.integers(min_value=VOCAB), min_size=1, max_size=2),
            "stop": st.lists(SURROGATE, min_size=1, max_size=2) | SURROGATE,
        },
    ),
    ("POST", "/v1/chat/completions"): Route(
        {"model": "fuzz", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
        {
            "messages": st.sampled_from(["x", 3, {}])
            | st.just([])
            | st.just([{"role": "robot", "content": "x"}])
            | SURROGATE.map(lambda s: [{"role": "user", "content": s}]),
            "max_completion_tokens": LAX_NOT_INT | NUMERIC_EDGES,
            "logprobs": LAX_NOT_BOOL,
            "top_logprobs": LAX_NOT_INT | st.integers(min_value=21) | NUMERIC_EDGES,
            "stop": not_(STR[0], LIST[0]) | SURROGATE,
            "temperature": LAX_NOT_NUM | NUMERIC_EDGES,
            "stop_token_ids": st.lists(NUMERIC_EDGES | st.integers(min_value=VOCAB), min_size=1, max_size=2),
        },
    ),
    ("POST", "/flush_cache"): Route({}, {}, "ignored"),
    ("GET", "/flush_cache"): Route({}, {}, "ignored"),
    ("POST", "/weights_checker"): Route(
        {"action": "checksum"},
        {
            "action": not_(*STR) | st.text(max_size=8).filter(lambda s: s != "checksum"),
            "allow_quant_error": not_(*BOOL),
            "skip_tensor_list": not_(*LIST) | st.lists(not_(*STR), min_size=1, max_size=1),
            "selector": not_(*STR) | st.text(max_size=6).filter(lambda s: s not in ("target", "draft", "all")),
        },
        "ignored",
    ),
    ("GET", "/weights_checker"): Route({}, {}, "ignored"),
    ("HEAD", "/weights_checker"): NO_BODY,
    **{
        (m, p): NO_BODY
        for m in ("GET", "HEAD")
        for p in (
            "/health",
            "/health_generate",
            "/model_info",
            "/get_model_info",
            "/server_info",
            "/get_server_info",
            "/v1/models",
            "/v1/models/{model}",
        )
    },
    ("HEAD", "/flush_cache"): NO_BODY,
}
TABLES = {"retriever": RETRIEVER, "generator": GENERATOR}
FIELD_CASES = [(svc, route, f) for svc, table in TABLES.items() for route, spec in table.items() for f in spec.fields]
BODY_ROUTES = [(svc, route) for svc, table in TABLES.items() for route, spec in table.items() if spec.reads_body]
UNKNOWN_ROUTES = [(svc, route) for svc, table in TABLES.items() for route, spec in table.items() if spec.unknown]
MALFORMED = [
    b"{",
    b'{"query": ',
    b"\xff\xfe\x00garbage",
    b"[]",
    b"[1, 2]",
    b"123",
    b'"text"',
    b"null",
    b"true",
    b"[" * 50_000 + b"]" * 50_000,
    b"a=1&b=2",
    b"\x00" * 64,
]


@pytest.fixture(scope="session")
def service(retriever_service, generator_service):
    return {"retriever": retriever_service, "generator": generator_service}


def _with(base: Dict[str, Any], path: str, value: Any, allowed: str) -> Dict[str, Any]:
    body = json.loads(json.dumps(base).replace("<allowed>", allowed))
    if isinstance(value, str):
        value = value.replace("<allowed>", allowed)
    node = body
    *parents, leaf = path.split(".")
    for p in parents:
        node = node[p]
    node[leaf] = value
    return body


def _message(svc: str, body: Any) -> str:
    """The error text of a JSON error body, in the service's own shape."""
    assert isinstance(body, dict), f"the error is not a JSON object: {body!r:.200}"
    if svc == "retriever":
        return f"{body['field']}: {body['error']}"
    if "error_message" in body:  # SGLang's LoRA answers: {"success", "error_message", "loaded_adapters"}
        return body["error_message"]
    return body["error"]["message"] if "error" in body else body["message"]


def _send(svc, route, body: Optional[bytes], headers=None):
    return svc.call(route[0], route[1], raw=body, headers=headers)


def test_the_tables_cover_every_registered_route(routes):
    for name, table in TABLES.items():
        missing = routes[name] - set(table)
        assert not missing, f"{name}: routes without fuzz cases: {sorted(missing)}"
        assert set(table) <= routes[name], f"{name}: stale table entries {sorted(set(table) - routes[name])}"


@pytest.mark.parametrize("svc_name,route", BODY_ROUTES, ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_malformed_bodies_get_400_naming_the_body(svc_name, route, service, checks):
    svc = service[svc_name]
    for raw in MALFORMED:
        status, body = _send(svc, route, raw, {"Content-Type": "application/json"})
        assert status == 400, (route, raw[:40], status, body)
        msg = _message(svc_name, body)
        assert "JSON" in msg or "body" in msg, msg
    checks[svc_name](svc)


@pytest.mark.parametrize("svc_name,route", BODY_ROUTES, ids=lambda x: x if isinstance(x, str) else " ".join(x))
@given(raw=st.binary(min_size=1, max_size=200))
def test_random_bytes_never_get_a_5xx(svc_name, route, service, checks, raw):
    svc = service[svc_name]
    status, body = _send(svc, route, raw, {"Content-Type": "application/octet-stream"})
    assert 400 <= status < 500 or (status == 200 and raw.strip() in (b"", b"{}")), (raw, status, body)
    checks[svc_name](svc)


@pytest.mark.parametrize("svc_name,route,path", FIELD_CASES, ids=lambda x: x if isinstance(x, str) else " ".join(x))
@given(data=st.data())
def test_a_bad_value_in_any_field_gets_a_4xx_naming_it(svc_name, route, path, service, checks, data):
    svc = service[svc_name]
    spec = TABLES[svc_name][route]
    value = data.draw(spec.fields[path], label=path)
    body = _with(spec.base, path, value, svc.extra.get("allowed", ""))
    status, answer = _send(svc, route, json.dumps(body).encode(), {"Content-Type": "application/json"})
    assert 400 <= status < 500, (route, body, status, answer)
    leaf = path.split(".")[-1]
    assert leaf in _message(svc_name, answer), (path, answer)
    checks[svc_name](svc)


@pytest.mark.parametrize("svc_name,route", UNKNOWN_ROUTES, ids=lambda x: x if isinstance(x, str) else " ".join(x))
@given(key=st.text(min_size=1, max_size=10), value=VALUES)
def test_unknown_fields_are_refused_or_ignored_as_documented(svc_name, route, service, checks, key, value):
    svc = service[svc_name]
    spec = TABLES[svc_name][route]
    base = json.loads(json.dumps(spec.base).replace("<allowed>", svc.extra.get("allowed", "")))
    if key in base or key in spec.fields or (svc_name == "generator" and route[1] == "/generate"):
        key = "x_unknown_" + key  # /generate: SGLang's top level has dozens of optional fields
    status, answer = svc.call(*route, {**base, key: value})
    if spec.unknown == "refused":
        assert status == 400 and answer["field"] == key, answer
    else:  # the same answer as without the unknown field
        status0, answer0 = svc.call(*route, base)
        assert status == status0, (answer, answer0)
        if status >= 400:
            assert _message(svc_name, answer) == _message(svc_name, answer0)
    checks[svc_name](svc)


def test_sampling_params_refuse_unknown_keys_like_sglang(generator_service):
    from areal_mem.rollout.generator.sglang_schema import load_sglang_api_types

    sglang_api = load_sglang_api_types()
    status, body = generator_service.call("POST", "/generate", {"input_ids": [5], "sampling_params": {"max_tokens": 2}})
    assert status == 400 and "unknown field `max_tokens`" in body["error"]["message"]
    with pytest.raises(sglang_api.JsonContractError, match="unknown field `max_tokens`"):
        sglang_api.SamplingParams.from_json_value({"max_tokens": 2})


def test_bodies_over_the_limit_get_413_and_the_services_stay_up(retriever_service, generator_service, checks):
    from areal_mem.config.retriever import RetrieverConfig
    from areal_mem.rollout.generator.embedded.validator import MAX_BODY_BYTES

    pad = b" " * RetrieverConfig().max_body_bytes
    status, body = retriever_service.call("POST", "/search", raw=b'{"query": "a"}' + pad)
    assert status == 413 and body["field"] == "body" and "limit" in body["error"]
    status, body = generator_service.call("POST", "/generate", raw=b'{"input_ids": [5]}' + b" " * MAX_BODY_BYTES)
    assert status == 413 and "larger than the limit" in body["error"]["message"]
    checks["retriever"](retriever_service)
    checks["generator"](generator_service)


def test_content_type_is_not_trusted_only_the_body(retriever_service, generator_service, checks):
    """JSON is parsed whatever the Content-Type says (as SGLang's `request.json()` does); a form
    body is not JSON and gets 400."""
    good, docs = retriever_service.extra["good"]
    assert retriever_service.call(
        "POST", "/search", raw=json.dumps(good).encode(), headers={"Content-Type": "text/plain"}
    ) == (200, docs)
    status, body = retriever_service.call(
        "POST", "/search", raw=b"query=a&top_n=2", headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert status == 400 and body["field"] == "body"
    status, out = generator_service.call(
        "POST",
        "/generate",
        raw=json.dumps(
            {"input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}}
        ).encode(),
        headers={"Content-Type": "text/plain"},
    )
    assert status == 200 and out["output_ids"] == generator_service.extra["good"]
    status, body = generator_service.call(
        "POST", "/generate", raw=b"input_ids=5", headers={"Content-Type": "multipart/form-data; boundary=x"}
    )
    assert status == 400 and "not JSON" in body["error"]["message"]


def test_a_corrupt_checkpoint_in_an_allowed_folder_is_a_400(generator_service, checks):
    import os

    bad = os.path.join(generator_service.extra["allowed"], "corrupt")
    os.makedirs(bad, exist_ok=True)
    with open(os.path.join(bad, "model.safetensors"), "wb") as f:
        f.write(b"\x08\x00\x00\x00\x00\x00\x00\x00{not a header")
    status, out = generator_service.call("POST", "/update_weights_from_disk", {"model_path": bad})
    assert status == 400 and out["success"] is False and "not a readable safetensors file" in out["message"]
    checks["generator"](generator_service)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_methods_a_route_does_not_serve_get_405(name, routes, service, checks):
    svc = service[name]
    for path in sorted({p for _, p in routes[name]}):
        served = {m for m, p in routes[name] if p == path}
        for method in sorted({"GET", "POST", "PUT", "DELETE", "PATCH"} - served):
            status, _ = svc.call(method, path, raw=b"{}")
            assert status == 405, (method, path, status)
    assert svc.call("POST", "/no-such-route", {})[0] == 404
    checks[name](svc)
