"""The one queue in front of the model: requests wait here, and each turn is one library call off the event loop.

A turn runs the first waiting job, and with it every waiting job of the same key up to `max_batch_tokens`: embedding
requests of equal options become one `Encoder.embed_with_report` call, whose runner plans their texts into
length-sorted, token-budget passes (padding is masked: a request's vectors do not depend on what shared its passes).
Other work (a run's predict, reranking, question answering, the explainer) takes a turn of its own. The queue holds at
most `max_queue_tokens`; past that a request is refused (429) at once. The event loop only queues and answers.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from ..encoder.devices import release_free_heap
from ..encoder.threads import MODEL_CALLS
from ..errors import BertkitError
from .errors import ServeError
from .metrics import Metrics

log = logging.getLogger("bertkit.serve")
IDLE_TRIM_S = 1.0  # seconds of an empty queue before the heap is trimmed (encoder/devices.py: release_free_heap)


class Overloaded(ServeError):
    """The queue holds `max_queue_tokens` already: answer 429 and ask the client to retry after `retry_after` s."""

    def __init__(self, queued_tokens: int, retry_after: int) -> None:
        message = f"the server is busy ({queued_tokens} tokens are waiting); retry after {retry_after} s"
        super().__init__(429, "overloaded", message, {"Retry-After": str(retry_after)})


class ShuttingDown(ServeError):
    """The server is stopping and takes no new work: 503, retry after 5 s."""

    def __init__(self) -> None:
        message = "the server is shutting down and takes no new requests"
        super().__init__(503, "shutting_down", message, {"Retry-After": "5"})


@dataclass(eq=False)
class Job:
    """One request's model work: `run` takes the payloads of the jobs taken together and gives one result each.

    A result that is an exception fails that job alone. Jobs of one `key` (None: none) that wait together share a turn.
    """

    run: Callable[[list[Any]], list[Any]]
    payload: Any
    tokens: int  # its estimated cost, counted against `max_queue_tokens`
    key: Hashable | None = None
    rows: int = 1  # inputs, for the batch-size metric
    cancelled: bool = False  # the client went away: dropped if not yet taken
    future: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Batcher:
    """The queue and its one consumer, a task on the event loop that hands each turn to a worker thread."""

    def __init__(self, metrics: Metrics, max_batch_tokens: int, max_queue_tokens: int) -> None:
        self.metrics = metrics
        self.max_batch_tokens = max_batch_tokens
        self.max_queue_tokens = max_queue_tokens
        self._queue: deque[Job] = deque()
        self._queued_tokens = 0
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task | None = None
        self._tokens_per_second = 0.0
        self._turns_since_trim = 0

    def start(self) -> None:
        """Start the consumer on the running event loop (a fresh wake-up event: one per loop)."""
        self._wake = asyncio.Event()
        self._wake.set()
        self._task = asyncio.get_running_loop().create_task(self._serve(), name="bertkit-queue")

    async def stop(self) -> None:
        """Take no new work, finish everything queued, then end (the graceful-shutdown drain)."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            await self._task

    @property
    def running(self) -> bool:
        """Whether the consumer is alive."""
        return self._task is not None and not self._task.done()

    def submit(self, job: Job) -> None:
        """Queue a job or raise `Overloaded` at once; a job alone in an empty queue is always taken."""
        if self._stopping:
            raise ShuttingDown()
        if self._queue and self._queued_tokens + job.tokens > self.max_queue_tokens:
            self.metrics.rejected.inc()
            rate = self._tokens_per_second or 1000.0
            raise Overloaded(self._queued_tokens, max(1, math.ceil(self._queued_tokens / rate)))
        self._queue.append(job)
        self._queued_tokens += job.tokens
        self._gauges()
        self._wake.set()

    def _gauges(self) -> None:
        self.metrics.queue_requests.set(len(self._queue))
        self.metrics.queue_tokens.set(self._queued_tokens)

    def _take(self) -> list[Job]:
        """Take the first waiting job and the waiting jobs of its key, up to `max_batch_tokens`; drop gone ones."""
        taken: list[Job] = []
        used = 0
        for job in list(self._queue):
            if taken and used >= self.max_batch_tokens:
                break
            if job.cancelled:
                self.metrics.dropped.inc()
            elif not taken or (job.key == taken[0].key is not None and used + job.tokens <= self.max_batch_tokens):
                taken.append(job)
                used += job.tokens
            else:
                continue
            self._queue.remove(job)
            self._queued_tokens -= job.tokens
        self._gauges()
        return taken

    async def _serve(self) -> None:
        while True:
            if not self._queue:
                if self._stopping:
                    return
                self._wake.clear()
                try:  # idle for IDLE_TRIM_S after some turns: the freed heap goes back to the system
                    await asyncio.wait_for(self._wake.wait(), IDLE_TRIM_S if self._turns_since_trim else None)
                except TimeoutError:
                    self._turns_since_trim = 0
                    await asyncio.get_running_loop().run_in_executor(MODEL_CALLS, release_free_heap)
                continue
            jobs = self._take()
            if jobs:
                await self._turn(jobs)

    async def _turn(self, jobs: list[Job]) -> None:
        """Run one turn on a worker thread; its results (or its error) go to its jobs' requests."""
        started = time.perf_counter()
        self._turns_since_trim += 1
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                MODEL_CALLS, jobs[0].run, [job.payload for job in jobs]
            )
        except (ServeError, BertkitError) as exc:  # the request's own fault, said by the library or the service
            results = [exc] * len(jobs)
        except Exception as exc:  # a crashed turn fails only its own requests
            log.exception("a model call for %d request(s) failed", len(jobs))
            self.metrics.failed_batches.inc()
            results = [exc] * len(jobs)
        seconds = time.perf_counter() - started
        tokens = sum(job.tokens for job in jobs)
        self._tokens_per_second = tokens / max(seconds, 1e-6)
        self.metrics.observe_batch(sum(job.rows for job in jobs), tokens, seconds, self._tokens_per_second)
        for job, result in zip(jobs, results):
            if job.future.done():
                continue
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                job.future.set_result(result)
