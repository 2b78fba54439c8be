"""Continuous batching over a Hugging Face causal LM with a KV cache, in one thread.

Every step the engine admits waiting requests (prefilled by length) into the running batch
and decodes one token for every running request. The batch's KV cache (`kv_cache.py`) is
left-padded, with a 2-D attention mask and explicit positions, so rows of different lengths
share one forward pass; rows join in the buffers' spare rows, leave as soon as they finish
(the last rows move into their slots), and the common left padding is trimmed once it is
worth a copy of the batch. Weights change only between steps, and every
token records the weight version that sampled it.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import logging
import threading
import time
from typing import Callable, Deque, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import torch

from . import kv_cache
from .lora import LoraAdapters
from .prefix_cache import PrefixCache
from .request import Request, Running, WeightLoadError, compaction, pad_left, top_entries
from .sampling import SamplingSpec, sample_from, scaled_logprobs

log = logging.getLogger(__name__)


ABORTED_MEMORY = 65536  # rids of requests a pause aborted, remembered to count their resends


class Engine:
    def __init__(
        self,
        model,
        eos_ids: Iterable[int],
        max_batch_size: int,
        max_context_len: int,
        decode: Optional[Callable[[List[int]], str]] = None,
        version: str = "0",
        prefix_cache_tokens: int = 0,
        lora: Optional[LoraAdapters] = None,
    ):
        """`prefix_cache_tokens`: KV of finished sequences kept for reuse as later prompts'
        prefixes (`prefix_cache.py`); 0: none. `lora`: the adapters served (`lora.py`); None:
        a server started without LoRA."""
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.eos_ids: Set[int] = set(eos_ids)
        self.max_batch_size, self.max_context_len = max_batch_size, max_context_len
        self.decode = decode  # token ids -> text, for stop strings
        self.version = version
        self.steps = 0
        # Busy seconds (inside a prefill/decode step) against wall time since start, and tokens
        # sampled: how much of its time the generator works (`stats()`, reported in /model_info).
        # Split by phase: tokens prefilled (a request resent after an abort is prefilled again)
        # and rows decoded, so a bench can tell extra work from slower work.
        self.busy_s, self.tokens_out, self.started_at = 0.0, 0, time.monotonic()
        self.prefill_s, self.prefill_tokens, self.decode_s, self.decode_rows = 0.0, 0, 0.0, 0
        self.score_tokens = 0  # prompt tokens scored for prompt log-probs (`prompt_logprobs`)
        # Of the prefilled tokens, those computed before and thrown away: a retracted row's, or
        # those of a request that a pause aborted and its client resent (same rid, its prompt
        # plus the partial output). The cost of a weight push beyond the push itself.
        self.reprefill_tokens = 0
        # Prefills that joined a running batch, and those of them that copied every running row
        # into new buffers (a joiner wider than the batch, or no spare rows left).
        self.joins, self.join_copies = 0, 0
        self._aborted: collections.OrderedDict = collections.OrderedDict()  # rid -> tokens computed
        self.prefix = PrefixCache(prefix_cache_tokens)
        self.lora = lora
        self._lora_unloaded = False  # an adapter went: requests naming it end before the next step
        self._weights = 0  # counts weight loads: KV begun under an earlier count is never stored
        self.prefix_hit_tokens = 0  # prompt tokens whose KV came from the prefix cache, not a prefill
        self._step_lock = threading.RLock()  # held for a step and for every change of state
        self._cv = threading.Condition()  # guards the waiting queue, paused, stopping, _control_waiting
        # Control calls waiting for the step lock; the loop starts no step while any waits, so a
        # pause or weight load gets in after at most one step (a plain lock is not fair: the loop
        # would take it back at once and a pause could wait for the whole batch to finish).
        self._control_waiting = 0
        # The waiting queue, in arrival order. An aborted request is left where it is (finished,
        # skipped at admission; the queue is compacted when those outnumber the live ones), so
        # an abort costs O(1) whatever the queue holds; `_n_waiting` counts the live ones.
        self._waiting: Deque[Request] = collections.deque()
        self._n_waiting = 0
        self._by_rid: Dict[str, List[Request]] = {}  # every request in flight (waiting or running)
        self._paused = False
        self._stopping = False
        self._rows: List[Request] = []
        self._num_layers = model.config.get_text_config().num_hidden_layers
        self._rng = torch.Generator(device=self.device)  # for requests without a sampling_seed
        self._rng.seed()
        self._state: Optional[Running] = None  # the rows' cache, mask, positions, last tokens
        # transformers renamed `past_key_values` to `cache` (5.x); take whichever forward has
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._thread = threading.Thread(target=self._loop, name="generator-engine", daemon=True)

    # ---- lifecycle and control (any thread) ----
    def start(self) -> Engine:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._thread.join(timeout=30)

    def submit(self, req: Request) -> None:
        if req.spec.max_new_tokens <= 0:
            req.complete({"type": "length", "length": 0})
            return
        with self._cv:
            self._waiting.append(req)
            self._n_waiting += 1
            self._by_rid.setdefault(req.rid, []).append(req)
            self._cv.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    def stats(self) -> dict:
        return {
            "busy_s": self.busy_s,
            "uptime_s": time.monotonic() - self.started_at,
            "steps": self.steps,
            "tokens": self.tokens_out,
            "prefill_s": self.prefill_s,
            "prefill_tokens": self.prefill_tokens,
            "reprefill_tokens": self.reprefill_tokens,
            "prefix_hit_tokens": self.prefix_hit_tokens,
            "prefix_cache_tokens": self.prefix.tokens,
            "decode_s": self.decode_s,
            "decode_rows": self.decode_rows,
            "score_tokens": self.score_tokens,
            "joins": self.joins,
            "join_copies": self.join_copies,
        }

    def in_flight(self) -> int:
        with self._cv:
            return len(self._rows) + self._n_waiting

    def waiting(self) -> int:
        """Requests queued for a place in the batch (admission control reads it)."""
        with self._cv:
            return self._n_waiting

    def has_rid(self, rid: str) -> bool:
        with self._cv:
            return rid in self._by_rid

    def pause(self, mode: str) -> int:
        """abort: end every request now with its partial output; retract: drop their KV and
        requeue them; in_place: keep them. New requests wait until `resume`. Returns how many
        requests were in flight."""
        with self._control():
            with self._cv:
                self._paused = True
                n = len(self._rows) + self._n_waiting
            if mode == "abort":
                for r in self._rows:  # a client resends these: their prefill is done again
                    self._aborted[r.rid] = r.kv_tokens
                    while len(self._aborted) > ABORTED_MEMORY:
                        self._aborted.popitem(last=False)
                self._abort_where(lambda r: True, "Abort by /pause_generation")
            elif mode == "retract":
                rows = self._rows
                for r in rows:
                    r.computed = r.kv_tokens
                self._set_rows([], None, None, None, None)
                with self._cv:
                    self._waiting.extendleft(reversed(rows))
                    self._n_waiting += len(rows)
            return n

    def resume(self) -> None:
        with self._cv:
            self._paused = False
            self._lora_unloaded = self.lora is not None  # requests let in while paused name adapters
            self._cv.notify_all()

    def abort(self, rid: Optional[str] = None, message: str = "Abort by /abort_request") -> int:
        """End one request (or all when rid is None) with finish_reason abort."""
        if rid is None:
            with self._control():
                return self._abort_where(lambda r: True, message)
        return self.abort_many([rid], message)

    def abort_many(self, rids: Sequence[str], message: str) -> int:
        """End the requests of these rids, in one pass between two steps: O(1) per request
        found, whatever the waiting queue holds (a client that leaves with a thousand
        sequences queued behind forty thousand others costs a thousand lookups)."""
        with self._control():
            with self._cv:
                reqs = [r for rid in rids for r in self._by_rid.get(rid, ())]
            if not reqs:
                return 0
            rows = {id(r): i for i, r in enumerate(self._rows)}
            waiting = [r for r in reqs if id(r) not in rows]
            hit = sorted(rows[id(r)] for r in reqs if id(r) in rows)
            with self._cv:
                self._n_waiting -= len(waiting)
            self._finish_aborted(waiting + self._end_rows(hit), message)
            self._compact_waiting()
            return len(reqs)

    def load_weights(self, named: Sequence[Tuple[str, torch.Tensor]], version: Optional[str], complete: bool) -> int:
        """Copy tensors into the model between steps; all are checked (names, shapes, finite
        values) before any is copied.

        complete: the tensors must cover every parameter (a full checkpoint).
        """
        state = self.model.state_dict(keep_vars=True)
        errors = []
        for name, t in named:
            p = state.get(name)
            if p is None:
                errors.append(f"unknown tensor {name!r}")
            elif tuple(p.shape) != tuple(t.shape):
                errors.append(f"{name}: shape {list(t.shape)}, model has {list(p.shape)}")
            elif (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all()):
                bad = int((~torch.isfinite(t)).sum())  # served, they would make every log-prob NaN
                errors.append(f"{name}: {bad} of {t.numel()} values are not finite (NaN or inf)")
        if complete:
            given = {n for n, _ in named}
            missing = [n for n, _ in self.model.named_parameters() if n not in given]
            if missing:
                errors.append(f"missing {len(missing)} parameters, e.g. {missing[:3]}")
        if errors:
            raise WeightLoadError("; ".join(errors[:5]) + (f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""))
        with self._control(), torch.no_grad():
            for name, t in named:
                state[name].data.copy_(t.to(device=self.device, dtype=state[name].dtype))
            if version is not None:
                self.version = version
            self.prefix.clear()  # KV of other weights
            self._weights += 1  # rows kept in place keep running, but their KV is not stored
        return len(named)

    def lora_call(self, fn: Callable, *args):
        """`fn(*args)` between two steps (`LoraAdapters.load` / `unload` of `self.lora`); after an
        unload, requests naming an adapter no longer loaded end (abort) before the next step
        unless it is loaded again first (a push replaces the learner's adapter while paused)."""
        with self._control():
            self._lora_unloaded = True
            return fn(*args)

    def flush_prefix_cache(self) -> int:
        """Drop every stored prefix (SGLang's /flush_cache); returns the tokens dropped."""
        with self._control():
            n = self.prefix.tokens
            self.prefix.clear()
            return n

    def set_version(self, version: str) -> None:
        with self._control():
            self.version = version

    @contextlib.contextmanager
    def _control(self):
        """The step lock for a control call, taken between two steps ahead of the loop."""
        with self._cv:
            self._control_waiting += 1
        try:
            with self._step_lock:
                yield
        finally:
            with self._cv:
                self._control_waiting -= 1
                self._cv.notify_all()

    # ---- the engine thread ----
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stopping and (
                    self._paused or self._control_waiting or not (self._waiting or self._rows)
                ):
                    self._cv.wait()
                if self._stopping:
                    return
            with self._step_lock:
                if self._lora_unloaded and not self._paused:
                    self._lora_unloaded = False
                    loaded = self.lora.loaded if self.lora is not None else set()
                    self._abort_where(lambda r: r.lora and r.lora not in loaded, "Abort: LoRA adapter unloaded")
                with self._cv:
                    if self._paused:
                        continue
                    joiners = self._admit(self.max_batch_size - len(self._rows))
                t0 = time.monotonic()
                t1 = t2 = t0
                try:
                    with torch.no_grad():
                        if joiners:
                            self._prefill(joiners)
                        t1 = t2 = time.monotonic()
                        if self._rows:
                            self.decode_rows += len(self._rows)
                            self._decode()
                            t2 = time.monotonic()
                    self.steps += 1
                except Exception as e:  # keep serving: fail this step's requests, not the server
                    log.exception("engine step failed")
                    error = f"engine error: {type(e).__name__}: {e}"
                    victims = self._rows + joiners  # joiners may be among the rows already
                    self._set_rows([], None, None, None, None)
                    for r in victims:
                        if r.finished_at == 0.0:
                            r.error = error
                            self._complete(r, {"type": "abort", "message": error})
                finally:
                    # busy first: stats() read from another thread never sees prefill + decode > busy
                    self.busy_s += time.monotonic() - t0
                    self.prefill_s += t1 - t0
                    self.decode_s += t2 - t1

    def _admit(self, room: int) -> List[Request]:
        """Take up to `room` waiting requests, highest priority first (a stable sort keeps the
        queue's order, retracted requests first, among equals). Called under `_cv`. A request of
        lower priority waits while the batch is full, as under SGLang's priority scheduling;
        running rows are never preempted for it."""
        while self._waiting and self._waiting[0].finished_at:  # aborted while waiting
            self._waiting.popleft()
        if room <= 0 or not self._n_waiting:
            return []
        first = self._waiting[0].priority
        if all(r.priority == first for r in self._waiting if not r.finished_at):
            joiners: List[Request] = []
            while self._waiting and len(joiners) < room:
                r = self._waiting.popleft()
                if not r.finished_at:
                    joiners.append(r)
        else:
            ranked = sorted((r for r in self._waiting if not r.finished_at), key=lambda r: -r.priority)
            joiners, taken = ranked[:room], {id(r) for r in ranked[:room]}
            self._waiting = collections.deque(r for r in self._waiting if id(r) not in taken and not r.finished_at)
        self._n_waiting -= len(joiners)
        return joiners

    def _compact_waiting(self) -> None:
        """Drop aborted requests from the waiting queue once they outnumber the live ones
        (amortised O(1) per abort)."""
        with self._cv:
            if len(self._waiting) > 2 * self._n_waiting + 64:
                self._waiting = collections.deque(r for r in self._waiting if not r.finished_at)

    def _unindex(self, reqs: Iterable[Request]) -> None:
        """Forget finished requests in the rid index (under `_cv`)."""
        for r in reqs:
            same = self._by_rid.get(r.rid)
            if same is None:
                continue
            same[:] = [x for x in same if x is not r]
            if not same:
                del self._by_rid[r.rid]

    def _complete(self, r: Request, finish: Optional[dict] = None) -> None:
        with self._cv:
            self._unindex([r])
        r.complete(finish)

    def _forward(self, ids, mask, pos, cache, rows: Sequence[Request]):
        if self.lora is not None:  # each row's adapter slot, for the LoRA hooks
            self.lora.rows = [self.lora.slot(r.lora) for r in rows]
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kw: cache},
        )
        return out.logits[:, -1]

    def _prefill(self, joiners: List[Request]) -> None:
        """Joiners of one length are prefilled together, each length in its own pass, then all
        join the running batch: into its buffers' spare rows when none is wider than the batch,
        else in one copy of every row into new buffers (a running batch of 30 rows and 1,500
        columns costs 10 ms to copy on a CPU core, more than the prefill of 150 tokens). Padding mixed lengths to the longest cost twice the
        tokens' own prefill here (attention is quadratic in the padded width); one more forward
        pass costs little. A group's first turn shares one prompt, so it stays one pass."""
        by_len: dict = {}  # the joiners prefilled from scratch, by length
        hits = []  # (request, tokens from the prefix cache, their KV): prefilled one by one
        for r in joiners:
            ids = r.prompt_ids + r.output_ids
            # KV computed under an adapter is never shared (the cache is keyed by tokens alone)
            hit, layers = self.prefix.lookup(ids) if r.lora is None else (0, [])
            done_before = r.computed or self._aborted.pop(r.rid, 0)
            self.reprefill_tokens += max(0, min(done_before, len(ids)) - hit)
            self.prefix_hit_tokens += hit
            r.computed, r.weights = 0, self._weights
            if hit:
                hits.append((r, hit, layers))
            else:
                by_len.setdefault(len(ids), []).append(r)
        parts = []  # (rows, cache, length, first tokens)
        for n, rows in by_len.items():
            self.prefill_tokens += n * len(rows)
            batch = torch.tensor([r.prompt_ids + r.output_ids for r in rows], device=self.device)
            pos = torch.arange(n, device=self.device).expand(len(rows), n)
            cache = kv_cache.empty_cache(self._num_layers)
            logits = self._forward(batch, None, pos, cache, rows)
            parts.append((rows, cache, n, self._sample_and_record(rows, logits)))
        for r, hit, layers in hits:
            ids = r.prompt_ids + r.output_ids
            n = len(ids)
            self.prefill_tokens += n - hit
            cache = kv_cache.from_prefix(layers)
            pos = torch.arange(hit, n, device=self.device).unsqueeze(0)
            logits = self._forward(torch.tensor([ids[hit:]], device=self.device), None, pos, cache, [r])
            parts.append(([r], cache, n, self._sample_and_record([r], logits)))
        rows = [r for part in parts for r in part[0]]
        lens = [torch.full((len(part[0]),), part[2], device=self.device) for part in parts]
        last = [part[3] for part in parts]
        caches = [(c, n) for _, c, n, _ in parts]
        st = self._state if self._rows else None
        self.joins += st is not None
        if st is not None and kv_cache.append(st.cache, caches):  # the running rows stay where they are
            cache, width = st.cache, st.mask.shape[1]
            masks = [st.mask] + [self._left_padded_mask(len(r), n, width) for r, _, n, _ in parts]
            rows, lens, last = self._rows + rows, [st.pos] + lens, [st.last] + last
        else:
            width = max([n for _, _, n, _ in parts] + ([st.mask.shape[1]] if st is not None else []))
            masks = [self._left_padded_mask(len(r), n, width) for r, _, n, _ in parts]
            padded = [(c, width - n) for c, n in caches]
            if st is not None:
                self.join_copies += 1
                pad = width - st.mask.shape[1]
                padded.insert(0, (st.cache, pad))
                masks.insert(0, pad_left(st.mask, pad))
                rows, lens, last = self._rows + rows, [st.pos] + lens, [st.last] + last
            cache = kv_cache.merge(padded)
        self._set_rows(rows, cache, torch.cat(masks), torch.cat(lens), torch.cat(last))
        self._drop_finished()

    def _left_padded_mask(self, rows: int, n: int, width: int) -> torch.Tensor:
        """The attention mask of `rows` rows of `n` tokens right-aligned in `width` columns."""
        mask = torch.zeros((rows, width), dtype=torch.long, device=self.device)
        mask[:, width - n :] = 1
        return mask

    def _decode(self) -> None:
        st = self._running()
        mask = torch.cat([st.mask, torch.ones_like(st.mask[:, :1])], dim=1)
        logits = self._forward(st.last.unsqueeze(1), mask, st.pos.unsqueeze(1), st.cache, self._rows)
        self._state = Running(st.cache, mask, st.pos + 1, self._sample_and_record(self._rows, logits))
        self._drop_finished()

    def _sample_and_record(self, rows: List[Request], logits: torch.Tensor) -> torch.Tensor:
        banned = [
            sorted((set() if r.spec.ignore_eos else self.eos_ids) | set(r.spec.stop_token_ids))
            if len(r.output_ids) < r.spec.min_new_tokens
            else ()
            for r in rows
        ]
        specs = [r.spec for r in rows]
        logp = scaled_logprobs(logits, specs, banned)
        tokens, logps = sample_from(logp, specs, [r.generator for r in rows], self._rng)
        tops = top_entries(logp, [r.top_logprobs_num for r in rows])
        self.tokens_out += len(rows)
        for r, t, lp, top in zip(rows, tokens.tolist(), logps.tolist(), tops):
            n = len(r.output_ids)
            r.output_ids.append(t)
            r.logprobs.append(lp)
            if r.top_logprobs_num:
                r.top_logprobs.append(top)
            if r.spans and r.spans[-1][0] == self.version:
                r.spans[-1][2] = n + 1
            else:
                r.spans.append([self.version, n, n + 1])
            r.finish = self._finish_of(r, t)
            if r.on_token is not None and r.finish is None:
                r.on_token(r)
        return tokens

    def prompt_logprobs(
        self, ids: List[int], temperature: float, top_k: int, lora: Optional[str] = None
    ) -> Tuple[list, list]:
        """Teacher-forced log-probs of every prompt token after the first (as sampled tokens'
        log-probs: temperature-scaled), and its `top_k` most likely tokens per position; one
        forward pass between two steps, under the weights the engine holds then."""
        with self._control(), torch.no_grad():
            if self.lora is not None:
                self.lora.rows = [self.lora.slot(lora)]
            logits = self.model(input_ids=torch.tensor([ids], device=self.device)).logits[0, :-1]
            logp = scaled_logprobs(logits, [SamplingSpec(temperature=temperature)] * len(logits), [()] * len(logits))
            self.score_tokens += len(ids)
        chosen = logp.gather(1, torch.tensor(ids[1:], device=self.device).unsqueeze(1))[:, 0].tolist()
        return chosen, top_entries(logp, [top_k] * len(logits))

    def _finish_of(self, r: Request, t: int) -> Optional[dict]:
        spec, n = r.spec, len(r.output_ids)
        if (t in self.eos_ids and not spec.ignore_eos) or t in spec.stop_token_ids:
            return {"type": "stop", "matched": t}
        if spec.stop and self.decode is not None:
            tail = self.decode(r.output_ids[-(max(len(s) for s in spec.stop) + 8) :])
            for s in spec.stop:
                if s in tail:
                    return {"type": "stop", "matched": s}
        if n >= spec.max_new_tokens or len(r.prompt_ids) + n >= self.max_context_len:
            return {"type": "length", "length": n}
        return None

    # ---- batch bookkeeping (under the step lock) ----
    def _set_rows(self, rows: List[Request], cache, mask, pos, last) -> None:
        self._rows, self._state = rows, Running(cache, mask, pos, last)

    def _running(self) -> Running:
        """The running rows' tensors (the step that calls this has rows)."""
        if self._state is None:
            raise RuntimeError("the engine has no running batch")
        return self._state

    def _keep_rows(self, keep: List[int]) -> None:
        if not keep:
            self._rows, self._state = [], None
            return
        st, order = self._running(), compaction(keep)
        idx = torch.tensor(order, device=self.device)
        mask = st.mask[idx]
        trim = int(mask.argmax(dim=1).min())  # left padding that every row has
        if trim >= kv_cache.HEADROOM:  # worth a copy of every row: attention no longer reads it
            cache, mask = kv_cache.select_rows(st.cache, idx, trim), mask[:, trim:]
        else:  # move only the rows that fill the slots of leavers; the padding stays
            cache = kv_cache.move_rows(
                st.cache, [(src, dst) for dst, src in enumerate(order) if src != dst], len(order)
            )
        self._set_rows([self._rows[i] for i in order], cache, mask, st.pos[idx], st.last[idx])

    def _remember(self, indices: Sequence[int]) -> None:
        """Store the KV of these running rows (finishing or aborted) in the prefix cache."""
        if self.prefix.max_tokens <= 0 or not indices:
            return
        cached = kv_cache.layers_of(self._running().cache)
        width = cached[0].length  # rows are right-aligned: padding on the left
        layers_kv = [layer.kv() for layer in cached]
        for i in indices:
            r = self._rows[i]
            if r.weights != self._weights or r.lora is not None:  # mixed KV (pause in_place), or an adapter's
                continue
            n = r.kv_tokens
            layers = [(k[i, :, width - n :].clone(), v[i, :, width - n :].clone()) for k, v in layers_kv]
            self.prefix.insert((r.prompt_ids + r.output_ids)[:n], layers)

    def _drop_finished(self) -> None:
        done = [r for r in self._rows if r.finish is not None]
        if done:
            self._remember([i for i, r in enumerate(self._rows) if r.finish is not None])
            self._keep_rows([i for i, r in enumerate(self._rows) if r.finish is None])
            for r in done:
                self._complete(r)

    def _abort_where(self, pred, message: str) -> int:
        with self._cv:
            gone = [r for r in self._waiting if not r.finished_at and pred(r)]
            self._waiting = collections.deque(r for r in self._waiting if not r.finished_at and not pred(r))
            self._n_waiting -= len(gone)
        gone += self._end_rows([i for i, r in enumerate(self._rows) if pred(r)])
        self._finish_aborted(gone, message)
        return len(gone)

    def _finish_aborted(self, reqs: List[Request], message: str) -> None:
        with self._cv:
            self._unindex(reqs)
        for r in reqs:
            r.complete({"type": "abort", "message": message})

    def _end_rows(self, hit: List[int]) -> List[Request]:
        """Take running rows `hit` (ascending indices) out of the batch, their KV kept as prefixes."""
        gone = [self._rows[i] for i in hit]
        self._remember(hit)  # valid prefixes until the weights change (then the cache is emptied)
        if hit:
            drop = set(hit)
            self._keep_rows([i for i in range(len(self._rows)) if i not in drop])
        return gone
