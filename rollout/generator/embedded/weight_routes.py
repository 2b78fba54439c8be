"""SGLang's routes that move weights into the engine or check them: `/update_weights_from_disk`,
`/init_weights_update_group`, `/update_weights_from_distributed`, `/weights_checker`.

Their failures are answered as SGLang answers them, `{"success": false, "message"}`, the
message headed by the failure's class name (a refused body, a forbidden path, an unreadable
checkpoint, a broken group), rather than in SGLang's error shape. Transfers and loads run
in worker threads, so the event loop goes on serving while a bucket arrives.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from contextlib import contextmanager
from datetime import timedelta
from typing import List

from aiohttp import web

from areal_mem.weight_fingerprint import fingerprints
from areal_mem.weight_transport import BucketMeta, WeightGroup

from .admin_requests import CheckWeights, InitWeightsUpdateGroup, UpdateWeightFromDisk, UpdateWeightsFromDistributed
from .disk_weights import allowed_path, load_safetensors_dir
from .errors import BadRequest, RequestError
from .service import EngineService, peer_call
from .validator import RequestValidator

log = logging.getLogger(__name__)

# SGLang's ParallelismInfo of the one rank an embedded server has
ONE_RANK = dict(role="target", tp_rank=0, tp_size=1, dp_rank=0, dp_size=1, pp_rank=0, pp_size=1, rank=0, size=1)
WEIGHT_BACKENDS = ("nccl", "gloo")
MAX_ABANDONED_JOINS = 4  # joins left waiting on silent peers (a thread and a socket each); more: 429
# what a weight transfer can fail with: a refused body or path, a bad checkpoint (WeightLoadError
# is a ValueError), torch.distributed and file errors, tensors of the wrong kind
TRANSFER_FAILURES = (BadRequest, ValueError, OSError, RuntimeError, TypeError)


@contextmanager
def failures_answered(*kinds: type[BaseException]):
    """An exception of `kinds` becomes the weight routes' failure answer (400, or the
    `BadRequest`'s status: 403 for a forbidden path, 413 for a body over the limit)."""
    try:
        yield
    except kinds as e:
        message = f"{type(e).__name__}: {e}"
        status = e.status if isinstance(e, RequestError) else 400
        raise RequestError(message, status, {"success": False, "message": message}) from e


class WeightRoutes:
    def __init__(self, service: EngineService, validator: RequestValidator):
        self.service, self.validator = service, validator
        self.engine = service.engine

    def routes(self) -> List[web.RouteDef]:
        return [
            web.post("/update_weights_from_disk", self.update_weights_from_disk),
            web.post("/init_weights_update_group", self.init_weights_update_group),
            web.post("/update_weights_from_distributed", self.update_weights_from_distributed),
            web.get("/weights_checker", self.weights_checker),
            web.post("/weights_checker", self.weights_checker),
        ]

    async def _update(self, request: web.Request, model, load) -> web.Response:
        """Shared body of the weight-update routes: `load(body)` returns tensors (off the loop)."""
        with failures_answered(*TRANSFER_FAILURES):
            body = await self.validator.admin(request, model)
            named, complete = await load(body)
            if body.abort_all_requests:
                await asyncio.to_thread(self.engine.abort, None, "Abort by weight update")
            await asyncio.to_thread(self.engine.load_weights, named, body.weight_version, complete)
        log.info("%s: loaded %d tensors, weight_version %s", request.path, len(named), self.engine.version)
        held = self.engine.in_flight() if self.engine.paused else 0
        return web.json_response(
            {
                "success": True,
                "num_paused_requests": held,
                "message": f"loaded {len(named)} tensors, weight_version {self.engine.version}",
            }
        )

    async def update_weights_from_disk(self, request: web.Request) -> web.Response:
        async def load(body: UpdateWeightFromDisk):
            if not body.model_path or "\0" in body.model_path:
                raise BadRequest("model_path: expected a folder path")
            dirs = self.service.weights_dirs
            real = allowed_path(body.model_path, dirs)
            return await asyncio.to_thread(load_safetensors_dir, real, dirs), True

        return await self._update(request, UpdateWeightFromDisk, load)

    async def update_weights_from_distributed(self, request: web.Request) -> web.Response:
        async def load(body: UpdateWeightsFromDistributed):
            if not len(body.names) == len(body.dtypes) == len(body.shapes):
                raise BadRequest("names, dtypes and shapes must be lists of the same length")
            if not all(0 <= x < 2**40 for s in body.shapes for x in s):
                raise BadRequest("shapes: sizes must be in 0..2**40")
            groups = self.service.groups
            group = groups.get(body.group_name)
            if group is None:
                raise BadRequest(
                    f"group_name {body.group_name[:80]!r}: no such weight-update group; "
                    f"call /init_weights_update_group first (have {sorted(groups)})"
                )
            meta = BucketMeta(body.names, body.dtypes, body.shapes)
            fut = peer_call(group.receive_bucket, meta, self.engine.device, name="weight-transfer")
            return await asyncio.wrap_future(fut), False

        return await self._update(request, UpdateWeightsFromDistributed, load)

    async def init_weights_update_group(self, request: web.Request) -> web.Response:
        with failures_answered(*TRANSFER_FAILURES):
            b = await self.validator.admin(request, InitWeightsUpdateGroup)
            if not 1 <= b.master_port <= 65535:
                raise BadRequest(f"master_port: {b.master_port} is not a port (1..65535)")
            if not 2 <= b.world_size <= 1 << 16 or not 1 <= b.rank_offset < b.world_size:
                raise BadRequest(
                    f"world_size {b.world_size}, rank_offset {b.rank_offset}: need "
                    f"2 <= world_size and 1 <= rank_offset < world_size (the trainer is rank 0)"
                )
            if not b.master_address or not b.group_name:
                raise BadRequest("master_address and group_name must not be empty")
            if b.group_name in self.service.groups:
                raise BadRequest(f"group {b.group_name!r} already exists")
            backend = b.backend or ("nccl" if self.engine.device.type == "cuda" else "gloo")
            if backend not in WEIGHT_BACKENDS:
                raise BadRequest(f"backend: expected one of {WEIGHT_BACKENDS}, got {backend[:60]!r}")
            group = await self._join(b, backend)
        self.service.groups[b.group_name] = group
        return web.json_response({"success": True, "message": f"joined {b.group_name} as rank {group.rank}"})

    async def _join(self, b: InitWeightsUpdateGroup, backend: str) -> WeightGroup:
        """Join on a thread of its own, one join at a time (another while one waits: 409), within
        `weight_group_connect_timeout_s` (the rendezvous and the group's set-up); the joined
        group's broadcasts then wait up to `weight_group_timeout_s`. A join whose client left
        before it ended is left again when it ends."""
        service = self.service
        if service.joining is not None and not service.joining.done():
            raise BadRequest(
                "another /init_weights_update_group is waiting for its peer; one join at a time "
                f"(each is answered within generator.embedded.weight_group_connect_timeout_s = "
                f"{service.limits.weight_group_connect_timeout_s:g} s)",
                409,
            )
        if len(service.abandoned_joins) >= MAX_ABANDONED_JOINS:
            raise BadRequest(
                f"{len(service.abandoned_joins)} earlier joins still wait on peers that never answered; "
                "try again later",
                429,
            )
        connect_s = min(service.limits.weight_group_connect_timeout_s, service.group_timeout_s)
        args = (b.master_address, b.master_port, b.world_size, b.rank_offset, b.group_name, backend, connect_s)
        fut = service.joining = peer_call(WeightGroup.join, *args, name="weight-group-join")
        failed = f"no weight-update group with {b.master_address}:{b.master_port} within {connect_s:g} s"
        try:
            # torch's store client bounds its connect, not its first read: a peer that accepts and
            # never answers holds the join's thread; the answer does not wait for it
            group = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), connect_s + 1.0)
        except (asyncio.CancelledError, TimeoutError) as e:
            self._abandon(fut)
            if isinstance(e, asyncio.CancelledError):
                raise
            raise BadRequest(f"{failed} (generator.embedded.weight_group_connect_timeout_s): no answer") from None
        except RuntimeError as e:  # torch's DistNetworkError / DistStoreError (timeouts) are RuntimeErrors
            raise BadRequest(f"{failed} (generator.embedded.weight_group_connect_timeout_s): {e}") from None
        group.pg.set_timeout(timedelta(seconds=service.group_timeout_s))
        return group

    def _abandon(self, fut) -> None:
        """A join no client waits for any more: counted until its thread ends (the group it may
        still join is left at once), and no longer the join in progress."""
        service = self.service
        service.abandoned_joins.add(fut)
        if service.joining is fut:
            service.joining = None

        def ended(f) -> None:
            service.abandoned_joins.discard(f)
            if f.exception() is None:
                f.result().close()

        fut.add_done_callback(ended)

    async def weights_checker(self, request: web.Request) -> web.Response:
        """SGLang's `/weights_checker`, action `checksum`, in SGLang's answer shape, each checksum
        an `areal_mem.weight_fingerprint` of the tensor as served, keyed by its HF name (the names
        the learner pushes), so the learner can compare it with what it pushed. The weights are
        read as they are: the publisher asks after every push's answer, while generation is paused."""
        with failures_answered(BadRequest, ValueError):
            body = await self.validator.admin(request, CheckWeights)
            skip = body.skip_tensor_list or []
            named = [(n, p) for n, p in self.engine.model.named_parameters() if not any(s in n for s in skip)]
            t0 = time.monotonic()
            checksums = await asyncio.to_thread(fingerprints, named)
            if self.engine.lora is not None:  # each loaded adapter's tensors: lora/<name>/<tensor>
                checksums.update(await asyncio.to_thread(self.engine.lora.fingerprints))
        overall = hashlib.sha256()  # SGLang's per_gpu_checksum: over the sorted names and checksums
        for name in sorted(checksums):
            overall.update(name.encode())
            overall.update(checksums[name].encode())
        per_gpu = overall.hexdigest()
        rank = {
            "checksums": checksums,
            "per_gpu_checksum": per_gpu,
            "parallelism_info": [ONE_RANK],
        }
        return web.json_response(
            {
                "success": True,
                "message": f"checksum of {len(checksums)} tensors in {time.monotonic() - t0:.3f} s",
                "ranks": [rank],
                "per_engine_checksum": hashlib.sha256(per_gpu.encode()).hexdigest(),
            }
        )
