"""LoRA adapters served by the embedded engine, per request, as SGLang serves them (`--enable-lora`).

The base weights are never touched: each target Linear layer gets a forward hook that adds
scale x (x A^T) B^T of the adapter its row asked for. Adapters live in slots of preallocated
tensors (slot 0 is "no adapter": zeros), padded to `max_rank` with zeros, which is exact, so a
batch mixing adapters and the base is one forward pass (batched matmuls over the rows' slots);
a batch on one adapter, the RL case, is two plain matmuls per layer. Merging into the base
weights instead (a pristine copy kept) would serve one adapter at a time and cost a pass over
every adapted weight per load; hooks cost ~2 x rank / hidden of the adapted layers' compute.

An adapter is checked whole before any slot changes (`parse`): rank within 1..max_rank, every
tensor a module the server adapts with the shape that module needs, finite values, a config
the hooks implement; a refused adapter leaves every loaded one serving.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from areal_mem.weight_fingerprint import fingerprints

PREFIXES = ("base_model.model.",)  # PEFT's saved names start with the PeftModel's path to the base


class AdapterError(ValueError):
    """An adapter this server cannot serve (the message names the field or tensor)."""


@dataclass
class Adapter:
    """One checked adapter: per adapted module (its path in the model), A [r, in] and B [out, r]."""

    rank: int
    scale: float
    weights: Dict[str, Tuple[torch.Tensor, torch.Tensor]]
    tensors: Dict[str, torch.Tensor] = field(default_factory=dict)  # as given, for fingerprints
    path: str = ""  # where it was loaded from (SGLang's lora_path; "__tensor__" from tensors)


def _module_path(name: str) -> Tuple[str, str]:
    """`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight` -> (module path, "A")."""
    for p in PREFIXES:
        name = name.removeprefix(p)
    for part, which in ((".lora_A.", "A"), (".lora_B.", "B")):
        if part in name:
            head, _, tail = name.partition(part)
            if tail in ("weight", "default.weight"):
                return head, which
    raise AdapterError(f"tensor {name!r}: not a LoRA tensor (<module>.lora_A.weight or <module>.lora_B.weight)")


class LoraAdapters:
    def __init__(self, model: torch.nn.Module, max_rank: int, target_modules: Sequence[str], max_loras: int):
        """Hook the model's Linear layers whose last name is in `target_modules` (all of them must
        exist: a server asked to adapt a layer its model lacks does not start)."""
        if max_rank < 1 or max_loras < 1:
            raise ValueError(f"max_lora_rank ({max_rank}) and max_loras ({max_loras}) must be >= 1")
        linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        have = sorted({n.rsplit(".", 1)[-1] for n in linears})
        missing = [t for t in target_modules if t not in have]
        if not target_modules or missing:
            raise ValueError(
                f"lora target modules {missing or '(none)'}: not Linear layers of this model (it has {have})"
            )
        self.targets = tuple(sorted(target_modules))
        self.max_rank, self.max_loras = max_rank, max_loras
        self.modules = {n: m for n, m in linears.items() if n.rsplit(".", 1)[-1] in self.targets}
        w = next(iter(self.modules.values())).weight
        slots = max_loras + 1
        self.A = {n: w.new_zeros((slots, max_rank, m.in_features)) for n, m in self.modules.items()}
        self.B = {n: w.new_zeros((slots, m.out_features, max_rank)) for n, m in self.modules.items()}
        self.scale = w.new_zeros(slots)
        self.loaded: Dict[str, Tuple[int, Adapter]] = {}  # lora_name -> (slot, adapter)
        self.rows: Optional[List[int]] = None  # the slot of each row of the forward pass now running
        for n, m in self.modules.items():
            m.register_forward_hook(self._hook(n))

    # ---- serving ----
    def _hook(self, path: str):
        def hook(module, inputs, out):
            rows = self.rows
            if not rows or not any(rows):
                return out
            x = inputs[0]
            if all(s == rows[0] for s in rows):  # one adapter for the whole batch
                s = rows[0]
                return out + self.scale[s] * ((x @ self.A[path][s].T) @ self.B[path][s].T)
            idx = torch.tensor(rows, device=x.device)
            a, b = self.A[path][idx], self.B[path][idx]  # [rows, r, in], [rows, out, r]
            delta = torch.bmm(torch.bmm(x, a.transpose(1, 2)), b.transpose(1, 2))
            return out + self.scale[idx].view(-1, 1, 1) * delta

        return hook

    def slot(self, name: Optional[str]) -> int:
        """The slot serving `name` (0: the base); KeyError for a name not loaded."""
        return 0 if name is None else self.loaded[name][0]

    def names(self) -> List[str]:
        return sorted(self.loaded)

    # ---- loading ----
    def parse(self, config: dict, named: Sequence[Tuple[str, torch.Tensor]], path: str = "") -> Adapter:
        """Check a PEFT adapter (its adapter_config.json and tensors) against the served model;
        raises AdapterError naming the first problems."""
        rank, alpha = config.get("r"), config.get("lora_alpha")
        if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= self.max_rank:
            raise AdapterError(f"r: {rank!r} is outside 1..{self.max_rank} (this server's max_lora_rank)")
        if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not math.isfinite(alpha):
            raise AdapterError(f"lora_alpha: expected a finite number, got {alpha!r:.40}")
        for key, neutral in (("use_dora", False), ("bias", "none"), ("modules_to_save", None)):
            if config.get(key, neutral) not in (neutral, [], False, None):
                raise AdapterError(f"{key}={config[key]!r:.60}: not served by the embedded generator")
        targets = config.get("target_modules")
        names = [targets] if isinstance(targets, str) else list(targets or [])
        extra = [t for t in names if t not in self.targets]
        if extra:
            raise AdapterError(
                f"target_modules: {extra} are not adapted by this server (--lora-target-modules {' '.join(self.targets)})"
            )
        parts: Dict[str, Dict[str, torch.Tensor]] = {}
        errors = []
        for name, t in named:
            module, which = _module_path(name)
            m = self.modules.get(module)
            if m is None:
                errors.append(f"tensor {name!r}: the model has no adapted module {module!r}")
                continue
            want = (rank, m.in_features) if which == "A" else (m.out_features, rank)
            if tuple(t.shape) != want:
                errors.append(f"tensor {name!r}: shape {list(t.shape)} does not fit {module} (needs {list(want)})")
            elif not bool(torch.isfinite(t).all()):
                errors.append(f"tensor {name!r}: values that are not finite")
            parts.setdefault(module, {})[which] = t
        errors += [f"module {p}: lora_A and lora_B must both be given" for p, ab in parts.items() if len(ab) != 2]
        if not parts and not errors:
            errors.append("no LoRA tensors")
        if errors:
            raise AdapterError("; ".join(errors[:3]) + (f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""))
        scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
        return Adapter(rank, float(scale), {p: (ab["A"], ab["B"]) for p, ab in parts.items()}, dict(named), path)

    def load(self, name: str, adapter: Adapter) -> int:
        """Put a parsed adapter in a free slot (call between engine steps); returns the slot."""
        if name in self.loaded:
            raise AdapterError(f"lora_name {name!r}: an adapter of that name is already loaded; unload it first")
        used = {s for s, _ in self.loaded.values()}
        free = [s for s in range(1, self.max_loras + 1) if s not in used]
        if not free:
            raise AdapterError(f"{self.max_loras} adapters are loaded (max_loras_per_batch); unload one first")
        s = free[0]
        with torch.no_grad():
            for path in self.modules:
                self.A[path][s].zero_()
                self.B[path][s].zero_()
                if path in adapter.weights:
                    a, b = adapter.weights[path]
                    self.A[path][s, : adapter.rank].copy_(a)
                    self.B[path][s, :, : adapter.rank].copy_(b)
            self.scale[s] = adapter.scale
        self.loaded[name] = (s, adapter)
        return s

    def unload(self, name: str) -> None:
        if name not in self.loaded:
            raise AdapterError(f"lora_name {name!r}: no adapter of that name is loaded (loaded: {self.names()})")
        s, _ = self.loaded.pop(name)
        self.scale[s] = 0.0

    def fingerprints(self) -> Dict[str, str]:
        """`lora/<name>/<tensor name as loaded>` -> fingerprint, of every loaded adapter."""
        out = {}
        for name, (_, adapter) in self.loaded.items():
            for t_name, fp in fingerprints(list(adapter.tensors.items())).items():
                out[f"lora/{name}/{t_name}"] = fp
        return out
