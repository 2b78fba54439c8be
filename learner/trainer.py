"""The RL training loop: batches from the buffer, one decoupled-PPO step, push, checkpoint.

Rank 0 pulls a batch of whole groups from the replay buffer and hands the rows
to every rank; all ranks train; then the weights go to the generators (pause ->
push -> continue) and the buffer learns the new version, which lets rollouts
that the staleness bound held back start again. `resume: auto` restarts from
the newest checkpoint and pushes its weights before any rollout resumes.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING, Dict, Optional

from areal_mem import policy_snapshots
from areal_mem.config import RunConfig
from areal_mem.config.eval import EvalPlacement
from areal_mem.config.learner import ResumeMode

from . import distributed as D
from .batch import broadcast_rows, quarantine, rows_from_groups
from .checkpoint import CheckpointManager, TrainState
from .metrics import MetricsLogger, batch_stats, staleness

if TYPE_CHECKING:  # annotations only: the engine and the clients load torch, DeepSpeed, pyarrow
    from areal_mem.buffer.client import BufferClient

    from .engine import LearnerEngine
    from .publishers import WeightPublisher


class Trainer:
    def __init__(
        self,
        cfg: RunConfig,
        engine: LearnerEngine,
        publisher: Optional[WeightPublisher] = None,
        buffer: Optional[BufferClient] = None,
        batch_groups: int = 8,
    ):
        """`buffer`: the replay buffer's client, on rank 0 only."""
        self.cfg, self.lcfg = cfg, cfg.learner
        self.engine, self.publisher, self.buffer = engine, publisher, buffer
        self.batch_groups = batch_groups
        self.leader = engine.rank == 0
        self.ckpt = CheckpointManager(cfg.run_dir, self.lcfg.keep_checkpoints)
        self.log = MetricsLogger(cfg.run_dir, enabled=self.leader)
        self.state = TrainState()
        self.stop_requested = False
        self.handed: set = set()  # versions handed to the evaluator by this process

    def hand_to_evaluator(self, final: bool = False) -> float:
        """Every `eval.interval` versions, and the first and the last, publish the current version
        for the evaluator that runs beside training (`areal_mem.policy_snapshots`): its weights
        (placement `own`) or only its number (`shared`). All ranks call (ZeRO-3 gathers are
        collective); returns the seconds it took, the learner's cost of the evaluation."""
        ev, version = self.cfg.eval, self.state.version
        due = final or not self.handed or version % max(1, ev.interval) == 0
        if ev.interval <= 0 or not due or version in self.handed:
            return 0.0
        t0 = time.monotonic()
        self.handed.add(version)
        own = ev.placement == EvalPlacement.own
        if self.leader:
            policy_snapshots.publish(self.cfg.run_dir, version, self.state.step, self.engine.export_hf if own else None)
        elif own:
            self.engine.export_hf("")  # take part in the gathers; rank 0 alone writes
        return time.monotonic() - t0

    def request_stop(self, *_) -> None:
        """SIGTERM: finish the current step, checkpoint, exit."""
        self.stop_requested = True

    def start(self) -> TrainState:
        """Resume if asked and possible; put the weights the loop starts from into the generators.

        Versions never go back: when the buffer has seen a newer version than the
        checkpoint's (the learner died after pushing more), the restored weights are
        pushed under a fresh number, so a version always names one set of weights and
        the staleness bound keeps admitting rollouts.
        """
        resumed = None
        if self.lcfg.resume == ResumeMode.auto:
            resumed = self.ckpt.load(self.engine)
        if resumed is not None:
            self.state = resumed
        seen = 0
        if self.leader and self.buffer is not None:
            # Batches a previous learner took but never acked would otherwise be lost.
            requeued = self.buffer.requeue()
            if requeued:
                print(f"[learner] requeued {requeued} group(s) of unfinished batches", flush=True)
            seen = self.buffer.stats().version
        seen = int(D.broadcast_floats([seen])[0])
        push = resumed is not None
        if seen > self.state.version:
            self.state.version, push = seen + 1, True
        if resumed is not None and self.leader:
            print(f"[learner] resumed from step {resumed.step}, version {self.state.version}", flush=True)
        if self.publisher is not None:
            self.publisher.setup()
            if push:  # the generators hold other weights than the ones this loop starts from
                self.publisher.publish(self.state.version)
        if self.leader and self.buffer is not None:
            self.buffer.set_version(self.state.version)
        self.hand_to_evaluator()  # the curve starts at the weights RL starts from
        return self.state

    def _next_batch(self):
        """Rank 0: (groups, batch_id, dropped_stale, wait seconds, quarantined); other ranks: Nones.

        A group the learner cannot train (`batch.check_group`) is quarantined: left out, logged by
        name and counted, and acked with its batch so that it is never served again; a batch with
        no trainable group is acked at once and the next one taken."""
        if not self.leader:
            return None, None, 0, 0.0, 0
        t0 = time.monotonic()
        dropped = quarantined = 0
        while True:
            batch = self._buffer().get_batch(self.batch_groups, timeout_s=self.lcfg.batch_timeout_s)
            dropped += batch.dropped_stale
            groups, bad = quarantine(batch.groups, _vocab_size(self.engine))
            for gid, reason in bad:
                print(f"[learner] quarantined group {gid!r}: {reason}", flush=True)
            quarantined += len(bad)
            if groups:
                break
            self._buffer().ack(batch.batch_id)
        # By group id, not by arrival: which episode finished first must not change the step
        # (packing order decides the float sums), so equal batches train to equal weights.
        groups = sorted(groups, key=lambda g: g.group_id)
        return groups, batch.batch_id, dropped, time.monotonic() - t0, quarantined

    def step(self) -> Dict[str, float]:
        t0 = time.monotonic()
        groups, batch_id, dropped, wait_s, quarantined = self._next_batch()
        rows = broadcast_rows(
            rows_from_groups(groups, self.lcfg.adv_norm_std, self.lcfg.skip_zero_adv_groups, self.lcfg.loss_agg)
            if self.leader
            else None
        )
        hist = {"token_staleness": staleness(groups, self.state.version)} if self.leader else {}
        m = self.engine.train_step(rows, self.state.version)
        if self.leader:
            m.update(batch_stats(groups, self.state.version, self.lcfg.adv_norm_std))
            m["dropped_stale"], m["wait_s"], m["quarantined"] = float(dropped), wait_s, float(quarantined)
            self._buffer().ack(batch_id)
            self.state.groups_consumed += len(groups)
        self.state.step += 1
        if self.publisher is not None and self.state.step % self.lcfg.publish.interval == 0:
            push = self.publisher.publish(self.state.version + 1)
            self.state.version += 1
            m["push_s"], m["push_pause_s"], m["push_bytes"] = push.seconds, push.pause_s, float(push.bytes)
            if push.probe_max_diff is not None:
                m["probe_max_diff"] = push.probe_max_diff
            if push.verify_s is not None:
                m["push_verify_s"] = push.verify_s
            # the new version makes groups waiting in the buffer stale: they count too
            m["dropped_stale"] += self._tell_buffer()
            handoff_s = self.hand_to_evaluator()
            if handoff_s:
                m["eval_handoff_s"] = handoff_s
        m["version"], m["step_s"] = float(self.state.version), time.monotonic() - t0
        if self.leader and self.state.step % self.lcfg.log_interval == 0:
            self.log.log(self.state.step, m, hist)
        if self.state.step % self.lcfg.checkpoint_interval == 0:
            self.ckpt.save(self.engine, self.state)
        return m

    def _buffer(self) -> BufferClient:
        """The leader's buffer client: only rank 0 takes batches, the others get them by broadcast."""
        if self.buffer is None:
            raise RuntimeError("the learner's leader rank has no buffer client")
        return self.buffer

    def _tell_buffer(self) -> int:
        """Give the buffer the pushed version; the groups it dropped as stale (rank 0).

        Any holder of the buffer's token may move its version; one that moved it ahead of the
        learner gets the learner's next `set_version` refused. The learner says so and does what a
        restart does (`start`): pushes its weights again under the buffer's version + 1, so the
        versions agree again and training goes on (every rank takes part in the push)."""
        dropped = ahead = 0
        if self.leader and self.buffer is not None:
            from areal_mem.buffer.client import BufferRefusedError

            try:
                dropped = self.buffer.set_version(self.state.version)["dropped_stale"]
            except BufferRefusedError as e:
                ahead = self.buffer.stats().version
                if ahead <= self.state.version:
                    raise
                print(
                    f"[learner] the buffer refused version {self.state.version} ({e}): another caller moved it to "
                    f"{ahead}; pushing these weights again as version {ahead + 1}",
                    flush=True,
                )
        ahead = int(D.broadcast_floats([ahead])[0])
        if ahead > self.state.version and self.publisher is not None:
            self.state.version = ahead + 1
            self.publisher.publish(self.state.version)
            if self.leader and self.buffer is not None:
                dropped += self.buffer.set_version(self.state.version)["dropped_stale"]
        return dropped

    def _stop_agreed(self) -> bool:
        """Stop when any rank was asked to (all ranks must leave the loop together)."""
        return D.all_reduce_max(int(self.stop_requested)) > 0

    def run(self, steps: Optional[int] = None) -> TrainState:
        self.start()
        end = steps if steps is not None else self.lcfg.steps
        previous = signal.signal(signal.SIGTERM, self.request_stop)
        try:
            while self.state.step < end:
                if self._stop_agreed():
                    self.stop_requested = True
                    break
                self.step()
            if self.state.step % self.lcfg.checkpoint_interval:
                self.ckpt.save(self.engine, self.state)  # at shutdown too
            if not self.stop_requested and self.cfg.eval.interval > 0:
                self.hand_to_evaluator(final=True)
                if self.leader:
                    policy_snapshots.mark_done(self.cfg.run_dir)
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.log.close()
        if self.lcfg.export_hf and not self.stop_requested:
            self.engine.export_hf(os.path.join(self.cfg.run_dir, "final"))
        return self.state


def _vocab_size(engine) -> int:
    """The policy's embedding rows (every token id indexes one); 0 when the engine does not say."""
    try:
        return int(engine.engine.module.config.vocab_size)
    except (AttributeError, TypeError, ValueError):
        return 0
