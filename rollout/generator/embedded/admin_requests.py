"""The bodies of the embedded server's control routes, validated as SGLang validates them.

SGLang 0.5.23 declares these bodies as msgspec structs in `sglang/srt/managers/io_struct.py`
and FastAPI validates them through pydantic in lax mode with unknown keys ignored, so a
trainer that sends `"master_port": "29517"` or `"world_size": 2.0` is served, not refused.
The models below carry the same fields, types and defaults (a test reads io_struct.py from the
wheel and compares); a field SGLang has and this server does not implement is accepted at
its default only and refused by name otherwise (`NOT_IMPLEMENTED`), never silently ignored.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Type, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import BadRequest


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")  # as SGLang: keys it does not know are dropped

    rid: Optional[str] = None  # SGLang's BaseReq fields
    http_worker_ipc: Optional[str] = None


class InitWeightsUpdateGroup(_Body):
    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    group_name: str = "weight_update_group"
    # SGLang's default is nccl; None here picks by device (nccl on CUDA, gloo on CPU)
    backend: Optional[str] = None


class UpdateWeightsFromDistributed(_Body):
    names: List[str]
    dtypes: List[str]
    shapes: List[List[int]]
    group_name: str = "weight_update_group"
    flush_cache: bool = True
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    load_format: Optional[str] = None
    selector: Literal["target", "draft", "all"] = "all"
    torch_empty_cache: bool = False


class UpdateWeightFromDisk(_Body):
    model_path: str
    load_format: Optional[str] = None
    abort_all_requests: bool = False
    weight_version: Optional[str] = None
    is_async: bool = False
    torch_empty_cache: bool = False
    keep_pause: bool = False
    recapture_cuda_graph: bool = False
    token_step: int = 0
    flush_cache: bool = True
    manifest: Optional[Dict[str, Any]] = None


class UpdateWeightVersion(_Body):
    new_version: str
    abort_all_requests: bool = True


class PauseGeneration(_Body):
    mode: Literal["abort", "retract", "in_place"] = "abort"


class Abort(_Body):
    abort_all: bool = False
    finished_reason: Optional[Dict[str, Any]] = None
    abort_message: Optional[str] = None
    weight_versions: Optional[List[Dict[str, Any]]] = None


class CheckWeights(_Body):
    """`/weights_checker`: the embedded server answers `checksum` with `areal_mem.weight_fingerprint`."""

    action: str = "checksum"
    allow_quant_error: bool = False
    skip_tensor_list: Optional[List[str]] = None  # substrings of tensor names to leave out
    selector: Literal["target", "draft", "all"] = "all"


# Fields the embedded server accepts only at these values. flush_cache and torch_empty_cache
# are honoured trivially (no cache outlives a weight change; no CUDA cache to empty on CPU);
# `selector: all` (no draft model); load formats: what the route reads.
NOT_IMPLEMENTED: Dict[type, Dict[str, tuple]] = {
    UpdateWeightsFromDistributed: {"load_format": (None, "auto")},
    UpdateWeightFromDisk: {
        "load_format": (None, "auto", "safetensors"),
        "is_async": (False,),
        "keep_pause": (False,),
        "recapture_cuda_graph": (False,),
        "token_step": (0,),
        "manifest": (None,),
    },
    Abort: {"finished_reason": (None,), "weight_versions": (None,)},
    # snapshot / reset_tensors / compare keep copies on the server: the learner compares instead;
    # no quantised weights (allow_quant_error) and no draft model (selector: draft)
    CheckWeights: {"action": ("checksum",), "allow_quant_error": (False,), "selector": ("all", "target")},
}

B = TypeVar("B", bound=_Body)  # a control route's body model


def parse_body(model: Type[B], body: Any) -> B:
    """`body` validated as SGLang would (400 naming the first bad field), then the fields this
    server does not implement checked to hold their default."""
    try:
        out = model.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise BadRequest(f"{where}: {err['msg']} (got {str(err.get('input'))[:60]!r})") from None
    for name, allowed in NOT_IMPLEMENTED.get(model, {}).items():
        value = getattr(out, name)
        if value not in allowed:
            raise BadRequest(
                f"{name}={value!r:.60} is not supported by the embedded generator "
                f"(accepted: {', '.join(map(repr, allowed))})"
            )
    return out
