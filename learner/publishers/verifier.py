"""Verified pushes (`learner.publish.verify`): a push that did not land is an error, not a success.

Before the first push rank 0 asks every generator once for its `/weights_checker` fingerprints,
to learn which dtype it serves each tensor in; each push then fingerprints what it sends in that
dtype (`areal_mem.weight_fingerprint`; the transport says where: per bucket on the device, or
from the checkpoint written), and after the push (and after every re-delivery), while generation
is still paused, every generator's fingerprints must equal them: a difference, a tensor missing
there or one it serves that was not pushed is a `WeightMismatch` naming the generator and the
tensors.

Two states, kept apart because only one of them is alike on every rank: `mode` (the config)
says whether transports read the weights for fingerprints at all, which every rank must agree
on (a ZeRO-3 gather); `active` says whether rank 0 verifies, and goes off under `auto` when a
generator cannot report fingerprints the learner can reproduce.
"""

from __future__ import annotations

import logging
import time
from typing import Dict, Optional, Set

import torch

from areal_mem.config.learner import VerifyMode
from areal_mem.generation import GeneratorError
from areal_mem.weight_fingerprint import fingerprint_items, served_dtype

from .link import GeneratorLink, rank0
from .transport import Named, Record, Transport

log = logging.getLogger(__name__)


class WeightMismatch(RuntimeError):
    """After a push a generator serves other weights than the learner pushed (names the tensors)."""


# name -> {dtype the generators serve it in: fingerprint of the pushed tensor cast to it}
Expected = Dict[str, Dict[str, str]]


def _read(named: Named) -> None:
    """Read the tensors without fingerprinting them (this rank's part of the ZeRO-3 gathers)."""
    for _ in named:
        pass


class Verifier:
    def __init__(self, link: Optional[GeneratorLink], mode: VerifyMode):
        self.link, self.mode = link, mode
        self.active = link is not None and mode != VerifyMode.off
        self.served: Optional[Dict[str, Set[torch.dtype]]] = None  # name -> dtypes (None: not asked yet)
        self.expected: Optional[Expected] = None  # the fingerprints of the last push
        self.fingerprint_s = self.check_s = 0.0  # this push's seconds on them and on the checks
        self.verified = 0  # deliveries whose fingerprints every generator matched (pushes and re-deliveries)

    @property
    def needs_served(self) -> bool:
        return self.active and self.served is None

    @property
    def seconds(self) -> Optional[float]:
        """This push's `verify_s`: the learner's fingerprints and the generators' checks (None: not verified)."""
        return self.fingerprint_s + self.check_s if self.active else None

    def start_push(self) -> Optional[Record]:
        """Forget the last push's fingerprints and times; what this push's transport feeds the
        tensors it sends: None on every rank when the config turns verification off, else a reader
        that fingerprints them on rank 0 while it verifies and knows the served dtypes, and only
        reads them otherwise."""
        self.expected, self.fingerprint_s, self.check_s = None, 0.0, 0.0
        if self.mode == VerifyMode.off:
            return None
        if self.served is None or not self.active:
            return _read
        expected: Expected = {}
        self.expected = expected
        return lambda named: expected.update(self._fingerprint(named))

    async def learn_served(self) -> None:
        """Learn the dtype each generator serves each tensor in, from one `/weights_checker` call.
        A generator that cannot report fingerprints (SGLang's checksums, which no learner can
        reproduce, or a 4xx: a server without the route) turns verify off under `auto` and is an
        error under `on`. Raises GeneratorError when a generator does not answer (5xx, down)."""
        try:
            answers = await rank0(self.link, "Verifier").client.weight_checksums()
        except GeneratorError as e:
            if not 400 <= e.status < 500:
                raise
            return self._not_comparable(f"{e}")
        served: Dict[str, Set[torch.dtype]] = {}
        for url, sums in answers.items():
            for name, fp in sums.items():
                try:
                    served.setdefault(name, set()).add(served_dtype(fp))
                except ValueError as e:
                    return self._not_comparable(
                        f"{url}/weights_checker does not report weight fingerprints the learner can reproduce "
                        f"({e}); SGLang hashes its own fused tensors (qkv_proj, gate_up_proj)"
                    )
        self.served = served

    def _not_comparable(self, why: str) -> None:
        if self.mode == VerifyMode.on:
            raise RuntimeError(f"learner.publish.verify=on: {why}; set it to auto or off")
        log.warning("weight publisher: pushes are not verified (learner.publish.verify=auto): %s", why)
        self.active = False

    def _fingerprint(self, named: Named) -> Expected:
        """The fingerprints of `named` in every dtype the generators serve each tensor in (its own
        dtype for a tensor they do not serve: the check then names it), one tensor at a time."""
        t0 = time.monotonic()
        out: Expected = {}
        served = self.served or {}
        items = ((n, t, d) for n, t in named for d in (served.get(n) or {t.dtype}))
        for name, fp in fingerprint_items(items):
            out.setdefault(name, {})[fp.partition(":")[0]] = fp
        self.fingerprint_s += time.monotonic() - t0
        return out

    def check(self, version: int, transport: Transport) -> None:
        """Every generator's fingerprints against the pushed ones (generation paused); the seconds
        the generators take to answer and the comparison count in `check_s`. When the served dtypes
        were learnt only after the push, the transport's copy of it is fingerprinted now.
        Raises WeightMismatch naming the generator and the first differing, missing and extra tensors."""
        if self.expected is None and (pushed := transport.pushed()) is not None:
            self.expected = self._fingerprint(pushed)  # its time counts in fingerprint_s
        t0 = time.monotonic()
        expected = self.expected
        if expected is None:
            raise WeightMismatch(f"weight push {version}: no fingerprints of the pushed weights to verify against")
        link = rank0(self.link, "Verifier")
        for url, sums in link.run(link.client.weight_checksums()).items():
            differ = [n for n, fp in sums.items() if n in expected and expected[n].get(fp.partition(":")[0]) != fp]
            missing = [n for n in expected if n not in sums]
            extra = [n for n in sums if n not in expected]
            if differ or missing or extra:
                raise WeightMismatch(
                    f"generator {url} does not serve the weights of push {version}: "
                    + "; ".join(
                        f"{what} {len(names)} tensor(s): {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}"
                        for what, names in (("differ in", differ), ("missing there", missing), ("not pushed", extra))
                        if names
                    )
                )
        self.verified += 1
        self.check_s += time.monotonic() - t0
