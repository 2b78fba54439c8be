"""The probe (`learner.publish.probe_check`): did the pushed weights land, judged by their output.

A generator samples a few tokens after a fixed prompt and the learner scores them; the largest
log-prob difference must stay within `probe_tolerance`. Unlike the fingerprints it checks one
generator only, but it also catches a generator that loads the right tensors and computes
something else with them.
"""

from __future__ import annotations

from typing import List, Optional

from areal_mem.generation import SamplingParams

from ..batch import TrainRow, broadcast_rows
from .link import GeneratorLink

PROMPT = list(range(3, 19))


class ProbeMismatch(RuntimeError):
    """After a push the generator's log-probs differ from the learner's: the weights did not land."""


def probe(engine, link: Optional[GeneratorLink], tolerance: float) -> float:
    """The largest log-prob difference (0.0 on ranks other than 0); ProbeMismatch above `tolerance`.
    Every rank scores (ZeRO-3 forwards are collective); rank 0 asks the generator."""
    rows = None
    gen_logps: List[float] = []
    if link is not None:
        res = link.run(
            link.client.generate(
                list(PROMPT), SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0, sampling_seed=1234)
            )
        )
        n = len(res.output_ids)
        rows = [TrainRow(PROMPT + res.output_ids, len(PROMPT), [1] * n, res.logprobs, res.versions, [0.0] * n)]
        gen_logps = res.logprobs
    mine = engine.logprobs(broadcast_rows(rows))[0]
    if engine.rank != 0:
        return 0.0
    diff = max((abs(a - b) for a, b in zip(mine, gen_logps)), default=0.0)
    if diff > tolerance:
        raise ProbeMismatch(
            f"generator log-probs differ from the learner's by {diff:.3g} (> {tolerance}) after the push"
        )
    return diff
