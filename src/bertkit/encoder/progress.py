"""The one progress reporter: a tqdm bar on a terminal, a plain log line every few seconds anywhere else.

Embedding, index building, probes and Ray jobs report through it; nothing else in bertkit draws a bar. A job that
embeds a chunk at a time (`embed_file`) hears of each chunk's passes through `counting`, so its lines come every few
seconds within a chunk too.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import Any

logger = logging.getLogger(__name__)

LOG_EVERY_S = 5.0  # seconds between two plain lines when stderr is not a terminal
_OUTER: ContextVar[Callable[[int], None] | None] = ContextVar("bertkit_outer_progress", default=None)


def terminal() -> bool:
    """Tell whether a person watches stderr: a terminal, or a notebook (tqdm.auto draws its widget there)."""
    return sys.stderr.isatty() or type(sys.stderr).__module__.startswith("ipykernel")


class Progress:
    """Report how far a job is: a tqdm bar on a terminal, else a line every `every` seconds.

    The line is logged (INFO) where logging is set up, and printed to stderr where nothing is (a script's output).

    Parameters
    ----------
    name : str
        What is done, as the bar and the lines name it ('embed', 'index').
    total : int, optional
        Units to do (None: unknown, or given later by `to`).
    unit : str
        What is counted ('rows', 'vectors').
    show : bool, optional
        True: report; False: stay silent; None: report when `total` reaches `min_total`.
    min_total : int
        With `show=None`, jobs smaller than this stay silent.
    every : float, optional
        Seconds between two log lines (default: `LOG_EVERY_S`).

    Examples
    --------
    >>> with Progress("embed", total=3, show=False) as progress:
    ...     progress.update(2, batch=32)
    ...     progress.done
    2
    """

    def __init__(
        self,
        name: str,
        total: int | None = None,
        unit: str = "rows",
        *,
        show: bool | None = None,
        min_total: int = 0,
        every: float | None = None,
    ) -> None:
        self.name, self.total, self.unit = name, total, unit
        self.every = LOG_EVERY_S if every is None else every
        self.done, self.postfix = 0, {}
        self.on = show if show is not None else (total or 0) >= min_total
        self.outer = _OUTER.get()  # a job's own count, told of this call's units as they are done (`counting`)
        self.started = self.last_line = time.monotonic()
        self.bar: Any = None
        if self.on and terminal():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, unit=unit.rstrip("s") or unit, desc=name, leave=False)

    def update(self, n: int = 1, **postfix: Any) -> None:
        """Count `n` more units done; `postfix` (e.g. loss=0.3) is shown beside the count."""
        self.to(self.done + n, **postfix)

    def to(self, done: int, total: int | None = None, **postfix: Any) -> None:
        """Say that `done` units are done (of `total`, when it is known only now)."""
        self.done, self.total = done, total if total is not None else self.total
        self.postfix.update(postfix)
        if self.outer is not None:
            self.outer(done)
        if not self.on:
            return
        if self.bar is not None:
            self.bar.total, self.bar.n = self.total, done
            if postfix:
                self.bar.set_postfix(self.postfix, refresh=False)
            self.bar.refresh()
            return
        now = time.monotonic()
        if now - self.last_line >= self.every:
            self.last_line = now
            if logger.hasHandlers():  # the command line's, or a program's own logging setup: its level decides
                logger.info("%s", self.line(now))
            else:  # no logging set up (a script's stderr in a file): Python would drop an INFO line, so print it
                print(self.line(now), file=sys.stderr, flush=True)

    def line(self, now: float | None = None) -> str:
        """Return the plain line: 'embed: 1,200/5,000 rows, 310 rows/s, 12 s left'."""
        seconds = max((time.monotonic() if now is None else now) - self.started, 1e-9)
        rate = self.done / seconds
        of = f"/{self.total:,}" if self.total is not None else ""
        speed = f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"  # 0.42 steps/s, not 0
        text = f"{self.name}: {self.done:,}{of} {self.unit}, {speed} {self.unit}/s"
        if self.total is not None and rate > 0:
            text += f", {max(self.total - self.done, 0) / rate:,.0f} s left"
        return text + "".join(f", {key} {value}" for key, value in self.postfix.items())

    def close(self) -> None:
        """Remove the bar (a closed reporter says nothing more)."""
        if self.bar is not None:
            self.bar.close()
        self.on = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


@contextmanager
def counting(count: Callable[[int], None]) -> Iterator[None]:
    """Tell `count` the units done of each reporter opened within, as they are done.

    A job that calls `embed` a chunk at a time reports within the chunk, pass by pass, not only after it.

    Parameters
    ----------
    count : callable
        Called with the units the inner reporter has done so far (e.g. the rows of this chunk).

    Examples
    --------
    >>> seen = []
    >>> with counting(seen.append), Progress("embed", 3, show=False) as inner:
    ...     inner.update(2)
    >>> seen
    [2]
    """
    token = _OUTER.set(count)
    try:
        yield
    finally:
        _OUTER.reset(token)
