"""A trivially learnable task for the learning test: reward 1 when the first generated token is
one of the "given" tokens (ids divisible by `mod`, about 1/mod of the vocabulary by chance).

`Producer` plays the rollout worker against the real services: it asks the buffer for a
slot (the staleness bound), samples a group from the generator and puts the whole group.
"""

import asyncio
import threading
import uuid

from areal_mem.buffer.client import BufferClient
from areal_mem.generation import SamplingParams
from areal_mem.rollout.generator.client import GeneratorClient
from areal_mem.trajectory import Context, Group, Trajectory

PROMPT = [5, 17, 42, 7]


class Producer(threading.Thread):
    def __init__(self, generator_url: str, buffer_url: str, group_size: int = 8, mod: int = 8):
        super().__init__(daemon=True)
        self.generator_url, self.buffer_url = generator_url, buffer_url
        self.group_size, self.mod = group_size, mod
        self.stopping = threading.Event()
        self.groups_put = 0
        self.errors = []  # failed groups (a learner killed mid-push may fail a request)

    def run(self) -> None:
        asyncio.run(self._main())

    async def _group(self, client: GeneratorClient) -> Group:
        params = SamplingParams(max_new_tokens=1, temperature=1.0, top_p=1.0)
        results = await asyncio.gather(*(client.generate(PROMPT, params) for _ in range(self.group_size)))
        gid = uuid.uuid4().hex[:8]
        trajs = []
        for i, r in enumerate(results):
            ctx = Context(PROMPT + r.output_ids, len(PROMPT), [1] * len(r.output_ids), r.logprobs, r.versions)
            reward = float(bool(r.output_ids) and r.output_ids[0] % self.mod == 0)
            trajs.append(Trajectory(f"{gid}/{i}", [ctx], reward=reward, start_version=min(r.versions, default=0)))
        return Group(gid, trajs)

    async def _main(self) -> None:
        buffer = BufferClient(self.buffer_url)
        async with GeneratorClient([self.generator_url], timeout_s=120) as client:
            while not self.stopping.is_set():
                slot = await asyncio.to_thread(buffer.acquire, 0.5)
                if not slot:
                    continue
                try:
                    group = await self._group(client)
                except Exception as e:
                    self.errors.append(repr(e))
                    await asyncio.to_thread(buffer.release, slot)
                    continue
                await asyncio.to_thread(buffer.put_group, group, slot)
                self.groups_put += 1
        buffer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
