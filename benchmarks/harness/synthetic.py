"""Groups of random tokens in the context-row shape, to measure the buffer without a model."""

from __future__ import annotations

import numpy as np

from areal_mem.trajectory import Context, Group, Trajectory


def random_group(
    gid: str, rng: np.random.Generator, trajs: int = 5, contexts: int = 4, tokens: int = 2000, resp: int = 1000
) -> Group:
    """`trajs` trajectories of `contexts` contexts, each `tokens` long with the last `resp` generated."""
    return Group(
        gid,
        [
            Trajectory(
                f"{gid}/{t}",
                [
                    Context(
                        input_ids=rng.integers(0, 150_000, tokens).tolist(),
                        prompt_len=tokens - resp,
                        loss_mask=[1] * resp,
                        behav_logp=(-rng.random(resp, dtype=np.float32)).tolist(),
                        versions=[0] * resp,
                    )
                    for _ in range(contexts)
                ],
                reward=0.5,
            )
            for t in range(trajs)
        ],
    )
