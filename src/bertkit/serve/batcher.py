"""The one queue and the model threads: requests → rows → length-grouped passes → forwards → each its rows.

A dispatcher thread takes queued rows first come first served (up to `max_batch_tokens` real tokens per worker) and
the encoder's runner plans them into passes (encoder/runner.py). With several workers (`concurrent_batches`) each
pass runs on a worker with its share of the torch threads; a lone pass with every worker idle runs on the dispatcher
with all of them. Layers and pooling run per request (`VectorHead`): a request's vectors do not depend on its batch.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..encoder.encode import Encoder
from ..encoder.runner import Row
from ..encoder.threads import set_threads, total_threads
from ..encoder.vectors import VectorHead
from .errors import ServeError
from .metrics import Metrics

log = logging.getLogger("bertkit.serve")


class Overloaded(ServeError):
    """The queue holds `max_queue_tokens` already: answer 429 and ask the client to retry after `retry_after` s."""

    def __init__(self, queued_tokens: int, retry_after: int) -> None:
        message = f"the server is busy ({queued_tokens} tokens are waiting); retry after {retry_after} s"
        super().__init__(429, "overloaded", message, {"Retry-After": str(retry_after)})
        self.retry_after = retry_after


class ShuttingDown(ServeError):
    """The server is stopping and takes no new work: 503, retry after 5 s."""

    def __init__(self) -> None:
        message = "the server is shutting down and takes no new requests"
        super().__init__(503, "shutting_down", message, {"Retry-After": "5"})


@dataclass(eq=False)
class EmbedJob:
    """One request's texts as token ids, with the vector head of its options; rows may span several batches."""

    ids: list[list[int]]
    type_ids: list[list[int]]
    head: VectorHead
    future: asyncio.Future  # of the event loop the request waits on
    cancelled: bool = False  # the client went away: rows not yet taken are dropped
    failed: bool = False
    next_row: int = 0
    done_rows: int = 0
    results: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.ids)

    @property
    def tokens(self) -> int:
        """The tokens of the rows not yet taken (every row, when queued)."""
        return sum(len(row) for row in self.ids[self.next_row :])


@dataclass(eq=False)
class CallJob:
    """Other work that must run on the model thread (a served run's own predict), with its estimated token count.

    It is taken whole: its `tokens` are all left until then.
    """

    call: Callable[[], Any]
    tokens: int
    future: asyncio.Future
    cancelled: bool = False
    failed: bool = False


def _settle(future: asyncio.Future, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _deliver(job: EmbedJob | CallJob, result: Any = None, error: BaseException | None = None) -> None:
    try:
        job.future.get_loop().call_soon_threadsafe(_settle, job.future, result, error)
    except RuntimeError:  # the event loop is closed: nobody is waiting any more
        pass


class Batcher:
    """Token-budget micro-batcher around one `Encoder`: `submit` from the event loop, forwards on its own threads."""

    def __init__(
        self,
        encoder: Encoder,
        metrics: Metrics,
        max_batch_tokens: int,
        max_queue_tokens: int,
        concurrent_batches: int = 1,
    ) -> None:
        self.metrics = metrics
        self.max_batch_tokens = max_batch_tokens
        self.max_queue_tokens = max_queue_tokens
        self.workers = concurrent_batches
        # the one runner: the service's token budget, widths in multiples of 8 (fewer shapes: a smaller heap)
        self.runner = encoder.runner(batch_size=None, pad_multiple=8)
        self.runner.max_batch_tokens, self.runner.batch_size = max_batch_tokens, None
        self._cond = threading.Condition()
        self._queue: deque = deque()
        self._queued_tokens = 0
        self._stopping = False
        self._closed = False  # the dispatcher has taken its last work: idle workers may end
        self._pending: deque[list[tuple[EmbedJob, int]]] = deque()  # planned passes waiting for a worker
        self._busy = 0  # workers inside a forward pass
        self._thread: threading.Thread | None = None
        self._worker_threads: list[threading.Thread] = []
        self._job_lock = threading.Lock()
        self._tokens_per_second = 0.0

    # ---- the event loop's side --------------------------------------------------------------------------------
    def start(self) -> None:
        """Start the dispatcher thread, and the forward threads when there are several."""
        total = total_threads()
        if self.workers > 1:
            share = max(1, total // self.workers)
            ready = [threading.Event() for _ in range(self.workers)]
            self._worker_threads = [
                threading.Thread(target=self._work, args=(share, event), daemon=True, name=f"bertkit-forward-{k}")
                for k, event in enumerate(ready)
            ]
            for thread in self._worker_threads:
                thread.start()
            for event in ready:
                event.wait()
        self._thread = threading.Thread(target=self._run, args=(total,), name="bertkit-batcher", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Finish everything queued, then end the threads (the graceful-shutdown drain)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in [self._thread, *self._worker_threads]:
            if thread is not None:
                thread.join(timeout)

    @property
    def running(self) -> bool:
        """Whether the dispatcher thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def submit(self, job: EmbedJob | CallJob) -> None:
        """Queue a job or raise `Overloaded` at once; a job alone in an empty queue is always taken."""
        tokens = job.tokens
        with self._cond:
            if self._stopping:
                raise ShuttingDown()
            if self._queue and self._queued_tokens + tokens > self.max_queue_tokens:
                self.metrics.rejected.inc()
                rate = self._tokens_per_second or 1000.0
                raise Overloaded(self._queued_tokens, max(1, math.ceil(self._queued_tokens / rate)))
            self._queue.append(job)
            self._queued_tokens += tokens
            self._gauges()
            self._cond.notify_all()

    def queue_depth(self) -> tuple[int, int]:
        """Count the (requests, tokens) waiting."""
        with self._cond:
            return len(self._queue), self._queued_tokens

    # ---- the model threads ------------------------------------------------------------------------------------
    def _gauges(self) -> None:
        self.metrics.queue_requests.set(len(self._queue))
        self.metrics.queue_tokens.set(self._queued_tokens)

    def _drop_gone(self) -> None:
        """Pop jobs at the head whose client left (or that failed). Caller holds the lock."""
        while self._queue and (self._queue[0].cancelled or self._queue[0].failed):
            job = self._queue.popleft()
            self._queued_tokens -= job.tokens
            if job.cancelled:
                self.metrics.dropped.inc()

    def _take(self) -> list[tuple[EmbedJob, int]]:
        """Rows first come first served up to `max_batch_tokens` real tokens per worker. Caller holds the lock."""
        taken: list[tuple[EmbedJob, int]] = []
        budget, used = self.max_batch_tokens * self.workers, 0
        while self._queue:
            self._drop_gone()
            if not self._queue or isinstance(self._queue[0], CallJob):
                break
            job = self._queue[0]
            while job.next_row < len(job.ids):
                length = len(job.ids[job.next_row])
                if taken and used + length > budget:
                    return taken
                taken.append((job, job.next_row))
                used += length
                job.next_row += 1
                self._queued_tokens -= length
            self._queue.popleft()
        return taken

    def _ready(self) -> bool:
        """Tell whether the dispatcher has something to do. Caller holds the lock."""
        if not self._queue:
            return False
        if isinstance(self._queue[0], CallJob):  # a run's own predict needs every thread: wait for an idle model
            return self._busy == 0 and not self._pending
        return not self._pending and self._busy < self.workers

    def _run(self, threads: int) -> None:
        set_threads(threads)  # this thread runs lone passes and served runs' predicts on every thread
        while True:
            work = self._next_work()
            if work is None:
                break
            if isinstance(work, CallJob):
                self._run_call(work)
                continue
            # planning is pure work on the taken rows (tens of ms for a thousand rows): outside the lock `submit` needs
            groups = self.runner.plan([Row(job.ids[row], ()) for job, row in work])
            for taken in self._dispatch([[work[k] for k in group] for group in groups]):
                self._run_batch(taken)
        with self._cond:  # workers finish the passes still pending, then end
            self._closed = True
            self._cond.notify_all()

    def _next_work(self) -> CallJob | list[tuple[EmbedJob, int]] | None:
        """Wait for work: a call, or taken rows to plan; None once stopping with nothing queued."""
        with self._cond:
            while True:
                self._cond.wait_for(lambda: self._ready() or (self._stopping and not self._queue))
                self._drop_gone()
                if self._queue:
                    break
                if self._stopping:
                    return None  # everything queued has been taken
            if isinstance(self._queue[0], CallJob):
                work = self._queue.popleft()
                self._queued_tokens -= work.tokens
            else:
                work = self._take()
            self._gauges()
            return work

    def _dispatch(self, passes: list[list[tuple[EmbedJob, int]]]) -> list[list[tuple[EmbedJob, int]]]:
        """Hand planned passes to the workers, or return them for this thread (one pass, every worker idle)."""
        if self.workers == 1:
            return passes
        with self._cond:
            if len(passes) == 1 and self._busy == 0 and not self._pending:
                return passes
            self._pending.extend(passes)
            self._cond.notify_all()
        return []

    def _work(self, share: int, ready: threading.Event) -> None:
        set_threads(share)
        ready.set()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                if not self._pending:
                    return
                taken = self._pending.popleft()
                self._busy += 1
            try:
                self._run_batch(taken)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _run_call(self, job: CallJob) -> None:
        try:
            _deliver(job, job.call())
        except Exception as exc:  # the error goes to that request only
            log.exception("work on the model thread failed (a served run's predict or the explainer)")
            _deliver(job, error=exc)

    def _run_batch(self, taken: list[tuple[EmbedJob, int]]) -> None:
        try:
            self._forward_and_pool(taken)
        except Exception as exc:  # a crashed batch fails only its own requests
            log.exception("a batch of %d inputs failed", len(taken))
            self.metrics.failed_batches.inc()
            for job in {job for job, _ in taken}:
                with self._job_lock:
                    first = not job.failed
                    job.failed = True
                if first:
                    _deliver(job, error=exc)

    def _forward_and_pool(self, taken: list[tuple[EmbedJob, int]]) -> None:
        taken = [t for t in taken if not t[0].cancelled]
        if not taken:
            return
        rows = [Row(job.ids[row], job.type_ids[row]) for job, row in taken]
        started = time.perf_counter()
        for group, inputs, out in self.runner.fitting(rows, list(range(len(rows)))):
            self._pool([taken[k] for k in group], inputs["attention_mask"], out, started)
            started = time.perf_counter()

    def _pool(self, taken: list[tuple[EmbedJob, int]], mask: torch.Tensor, out: Any, started: float) -> None:
        """Each request's rows of one pass: its own layers and pooling, then its answer once all rows are in."""
        positions: dict[EmbedJob, list[int]] = {}
        for position, (job, _) in enumerate(taken):
            positions.setdefault(job, []).append(position)
        selected: dict[Any, torch.Tensor] = {}
        for job, where in positions.items():
            if job.head.selection not in selected:
                selected[job.head.selection] = job.head.tokens(out.hidden_states)
            index = torch.tensor(where, device=out.last_hidden_state.device)
            vectors, masks = selected[job.head.selection][index], mask.to(index.device)[index]
            if job.head.methods == ("none",):
                rows: list[np.ndarray] = [
                    vectors[k, : int(masks[k].sum())].float().cpu().numpy() for k in range(len(where))
                ]
            else:
                pooler = out.pooler_output[index] if out.pooler_output is not None else None
                rows = list(job.head.sentences(vectors, masks, pooler).cpu().numpy())
            for position, row_vectors in zip(where, rows):
                job.results[taken[position][1]] = row_vectors
            with self._job_lock:
                job.done_rows += len(where)
                complete = job.done_rows == len(job.ids) and not job.failed
            if complete:
                _deliver(job, job.results)
        real_tokens = int(mask.sum())
        seconds = time.perf_counter() - started
        self._tokens_per_second = real_tokens / seconds if seconds > 0 else 0.0
        self.metrics.observe_batch(len(taken), int(mask.numel()), real_tokens, seconds, self._tokens_per_second)
