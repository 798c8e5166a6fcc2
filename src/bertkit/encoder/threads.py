"""Torch's process-wide thread count: one place that sets it, and a shared layout for concurrent batches."""

from __future__ import annotations

import asyncio
import ctypes
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import torch

from ..errors import InputError

_layout_lock = threading.Lock()
_layout_users = 0
_layout_saved: int | None = None


def set_threads(threads: int | None) -> None:
    """Set torch's CPU threads for the whole process: the one place bertkit changes them.

    No constructor changes them; the command line's `--threads` calls this. Concurrent batches then share what
    is set here (`threads_per_batch`).

    Parameters
    ----------
    threads : int or None
        Threads for torch's intra-op parallelism; None leaves torch's choice.

    Examples
    --------
    >>> import bertkit
    >>> bertkit.set_threads(None)  # leaves torch's choice as it is
    """
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads={threads!r}: give a positive number of threads.")
    # Torch sets each thread's count lazily from the process-wide value at that thread's first parallel op; do
    # that first, or a thread that sets its own count before any op would later be reset to the process-wide one.
    torch.get_num_threads()
    torch.set_num_threads(threads)


@contextmanager
def threads_per_batch(workers: int) -> Iterator[int]:
    """Give each of `workers` concurrent forward passes its share of torch's threads.

    The share holds for as long as any caller needs it. The thread count is process-wide, so concurrent callers
    share one layout: the first sets it, the last restores what it found. Without the count, parallel embed calls
    from several threads would race on it.
    """
    global _layout_users, _layout_saved
    with _layout_lock:
        if _layout_users == 0:
            _layout_saved = torch.get_num_threads()
            torch.set_num_threads(max(1, _layout_saved // workers))
        _layout_users += 1
        share = torch.get_num_threads()
    try:
        yield share
    finally:
        with _layout_lock:
            _layout_users -= 1
            if _layout_users == 0 and _layout_saved is not None:
                torch.set_num_threads(_layout_saved)
                _layout_saved = None


def release_openmp_threads() -> bool:
    """Free the calling thread's OpenMP worker threads (until its next parallel op); False where that is not possible.

    Each thread that runs parallel torch ops owns a team of OpenMP threads. Once libgomp manages more threads than
    there are cores it stops spin-waiting, and every parallel region pays a futex wake-up: on 2 cores, with the
    main thread's team left over from loading, a model running on a second thread runs its small ops several times
    slower. A server calls this on its main thread once loading is done.
    """
    from threadpoolctl import ThreadpoolController

    released = False
    for library in ThreadpoolController().select(user_api="openmp").lib_controllers:  # torch's, scikit-learn's...
        pause = getattr(library.dynlib, "omp_pause_resource_all", None)
        if pause is not None:
            pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
            released = pause(1) == 0 or released  # omp_pause_soft: the threads go, the settings stay
    return released


def total_threads() -> int:
    """Torch's thread count as the user set it, even while concurrent batches have split it into shares."""
    with _layout_lock:
        return int(_layout_saved) if _layout_users and _layout_saved is not None else torch.get_num_threads()


# one pool per width, kept: a pool per call started threads (and malloc arenas) per call, and a server's RSS grew
_POOLS: dict[int, ThreadPoolExecutor] = {}
_in_flight = 0  # forward passes running on the pools' threads now (`passes_in_flight`)
_in_flight_lock = threading.Lock()


def passes_in_flight() -> int:
    """Count the forward passes running on bertkit's threads now: the command line's Ctrl-C does not wait for them."""
    return _in_flight


def _counted(forward: Callable, batch: Any) -> Any:
    """Run `forward(batch)`, counted in `passes_in_flight` while it runs."""
    global _in_flight
    with _in_flight_lock:
        _in_flight += 1
    try:
        return forward(batch)
    finally:
        with _in_flight_lock:
            _in_flight -= 1


def forward_in_parallel(forward: Callable, chunks: Sequence, pad: Callable, workers: int) -> Iterator[tuple]:
    """(chunk, batch, forward(batch)) for each chunk in order, `workers` forwards at once on shares of the threads.

    On small CPUs one batch per core beats one batch split across cores (benchmarks/throughput.py), since the
    per-batch matrices are too small to keep two threads busy. At most `workers` + 1 outputs are held.
    """
    pool = _POOLS.get(workers) or _POOLS.setdefault(workers, ThreadPoolExecutor(workers, "bertkit-forward"))
    with threads_per_batch(workers):
        pending: deque = deque()
        for chunk in chunks:
            batch = pad(chunk)
            pending.append((chunk, batch, pool.submit(_counted, forward, batch)))
            if len(pending) > workers:
                chunk0, batch0, future = pending.popleft()
                yield chunk0, batch0, future.result()
        while pending:
            chunk0, batch0, future = pending.popleft()
            yield chunk0, batch0, future.result()


_AHEAD = ThreadPoolExecutor(1, "bertkit-ahead")  # one: what it computes (tokenization) keeps its own order
# The service's model calls, one at a time on one thread: each thread running torch keeps a team of OpenMP threads,
# and past one team per core libgomp stops spin-waiting (see `release_openmp_threads`): asyncio's default pool hands
# turns to whichever of its threads is free, and one request at a time then ran 1.5x slower than on one thread.
MODEL_CALLS = ThreadPoolExecutor(1, "bertkit-model")


async def off_the_loop(function: Callable[..., Any], *args: Any) -> Any:
    """Run `function(*args)` on asyncio's default pool and await it: CPU work the service keeps off its event loop."""
    return await asyncio.to_thread(function, *args)


def computed_ahead(function: Callable[[Any], Any], items: Sequence) -> Iterator:
    """`function(item)` for each item in order, the next one computed on a background thread while this one is used.

    The tokenizer releases the GIL: on a GPU the next texts are tokenized while the passes of these run.
    """
    items = list(items)
    ahead = _AHEAD.submit(function, items[0]) if items else None
    for k in range(len(items)):
        result = ahead.result()  # type: ignore[union-attr]
        if k + 1 < len(items):
            ahead = _AHEAD.submit(function, items[k + 1])
        yield result
