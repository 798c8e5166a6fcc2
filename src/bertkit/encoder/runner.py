"""The one runner: tokenized rows → a token-budget plan → forward passes → out-of-memory split → input order.

`Encoder.embed`, every fine-tuned run and the service's batcher run their model through a `Runner`; each pass, and
every other model call (int8 calibration, the explainer's attention), is `call_model`.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import InputError
from .devices import OutOfDeviceMemory
from .precision import arithmetic
from .threads import forward_in_parallel, total_threads
from .tokenize import pad_ids

logger = logging.getLogger(__name__)

PASS_OVERHEAD_TOKENS = 32  # a forward pass's fixed cost on a CPU, in tokens' worth of compute (README, serving)
GPU_PASS_OVERHEAD_TOKENS = 4096  # on a GPU a pass's launches cost far more than its padding: fewer, fuller passes


def takes_type_ids(model: torch.nn.Module) -> bool:
    """Tell whether `model`'s forward takes token type ids (BERT does; DistilBERT and RoBERTa-style models do not)."""
    return "token_type_ids" in inspect.signature(model.forward).parameters


def call_model(
    model: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    device: torch.device,
    precision: str = "fp32",
    gradients: bool = False,
    **options: Any,
) -> Any:
    """Run one forward pass: the inputs moved to `device`, `precision`'s autocast on that device.

    Parameters
    ----------
    model : torch.nn.Module
        A transformers model (or its int8 copy).
    inputs : dict of str to torch.Tensor
        Its padded inputs.
    device : torch.device
        Where the model's weights are.
    precision : str
        A checked precision ('fp32', 'bf16', 'fp16', 'int8').
    gradients : bool
        Keep the graph for gradients with respect to the inputs (attributions); otherwise inference mode.
    **options
        The model's own keywords (`output_hidden_states`, `output_attentions`, ...).

    Returns
    -------
    Any
        The model's output.
    """
    inputs = {name: tensor.to(device, non_blocking=True) for name, tensor in inputs.items()}
    with torch.enable_grad() if gradients else torch.inference_mode(), arithmetic(precision, device):
        return model(**inputs, **options)


@dataclass(frozen=True)
class Row:
    """One model input: token ids and type ids (a whole text, or one window of a long one)."""

    ids: Sequence[int]
    type_ids: Sequence[int]


def padded_width(longest: int, limit: int | None = None, multiple: int = 1) -> int:
    """Return the width a pass whose longest row has `longest` tokens is padded to.

    A multiple of `multiple`, never past `limit`; one at least (a static model's text of no known token has none).
    """
    longest = max(longest, 1)
    width = -(-longest // multiple) * multiple
    return max(longest, min(width, limit)) if limit else width


def plan_batches(
    lengths: Sequence[int],
    max_batch_tokens: int,
    max_rows: int | None = None,
    overhead_tokens: int = PASS_OVERHEAD_TOKENS,
    multiple: int = 1,
    one_width: bool = False,
) -> list[list[int]]:
    """Group indices into `lengths` into the passes that cost least: overhead + padded tokens, summed.

    Each group is contiguous in length order, has at most `max_rows` rows and `max_batch_tokens` padded tokens (a
    row longer than that is a pass of its own); the longest group comes first. With `one_width`, a group holds rows
    of one padded width only, so that a row is padded alike whatever shares its pass.
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    n = len(order)
    best = [0] * (n + 1)  # best[j]: least cost of the first j sorted rows
    cut = [0] * (n + 1)  # cut[j]: where the last group of that plan starts
    # A group [start, j) of width w costs overhead + (j - start) * w, so the best start minimises best[start] -
    # start * w over the starts a pass of that width can reach. Within a run of equal widths that is a sliding-window
    # minimum: a deque of starts with increasing keys (on a tie the later start, the smaller group, wins). A GPU
    # plans hundreds of rows a pass: this keeps the plan's cost per row constant instead of growing with them.
    window: deque[int] = deque()
    key = lambda start: best[start] - start * width  # noqa: E731
    width, width_start = -1, 0
    for j in range(1, n + 1):
        longest = padded_width(lengths[order[j - 1]], multiple=multiple)
        most = max(1, max_batch_tokens // longest if max_rows is None else min(max_batch_tokens // longest, max_rows))
        new_width = longest != width
        if new_width:
            width, width_start = longest, j - 1
        first = max(width_start if one_width else 0, j - most)
        if new_width:  # every reachable start's key changes
            window = _increasing_minima(best, first, j - 1, width)
        candidate = key(j - 1)
        while window and key(window[-1]) >= candidate:
            window.pop()
        window.append(j - 1)
        while window[0] < first:
            window.popleft()
        start = window[0]
        best[j] = best[start] + overhead_tokens + (j - start) * width
        cut[j] = start
    groups: list[list[int]] = []
    end = n
    while end > 0:
        groups.append([order[k] for k in range(cut[end], end)])
        end = cut[end]
    return groups


def _increasing_minima(best: list[int], first: int, end: int, width: int) -> deque[int]:
    """Return the starts in [first, end) whose key best[s] - s * width is below every later one (the deque)."""
    if end <= first:
        return deque()
    keys = np.asarray(best[first:end], dtype=np.int64) - np.arange(first, end, dtype=np.int64) * width
    later = np.minimum.accumulate(keys[::-1])[::-1]  # later[k]: the least key from k on
    kept = np.ones(len(keys), dtype=bool)
    kept[:-1] = keys[:-1] < later[1:]
    return deque((np.flatnonzero(kept) + first).tolist())


@dataclass
class Runner:
    """A model call over rows of token ids: planned, padded, run, split on out-of-memory, in order.

    Parameters
    ----------
    forward : callable
        Takes the padded inputs (`input_ids`, `attention_mask`, and `token_type_ids` with `with_type_ids`) as CPU
        tensors and returns the pass's output (moving it to the device is its job).
    pad_token_id : int
        The id padding is made of.
    device : torch.device
        Where `forward` runs: concurrent passes on a CPU, out-of-memory splits on a GPU.
    max_batch_tokens : int
        Padded tokens one pass may hold.
    batch_size : int, optional
        Rows one pass may hold (None: as many as the token budget allows).
    concurrent : int
        Passes in flight at once on a CPU, each on its share of the threads.
    with_type_ids : bool
        Whether the model takes token type ids.
    pad_multiple : int
        Padded widths are multiples of this (a server sees fewer shapes: its allocator stays small).
    one_width : bool
        Each pass holds rows of one padded width: a row's result does not depend on what shares its pass (int8,
        whose rounding turns the last bits that padding changes into visible differences).
    max_width : int, optional
        The widest pass the model takes (its position table): rounding never pads past it.
    """

    forward: Callable[[dict[str, torch.Tensor]], Any]
    pad_token_id: int
    device: torch.device
    max_batch_tokens: int
    batch_size: int | None = None
    concurrent: int = 1
    with_type_ids: bool = True
    pad_multiple: int = 1
    max_width: int | None = None
    one_width: bool = False
    forward_seconds: float = 0.0  # inside forward passes, every thread's
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        size = self.batch_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise InputError(f"batch_size={size!r}: give a positive batch size.")

    def plan(self, rows: Sequence[Row]) -> list[list[int]]:
        """Plan the passes for `rows`: indices grouped by `plan_batches`."""
        lengths = [len(row.ids) for row in rows]
        overhead = PASS_OVERHEAD_TOKENS if self.device.type == "cpu" else GPU_PASS_OVERHEAD_TOKENS
        return plan_batches(
            lengths, self.max_batch_tokens, self.batch_size, overhead, self.pad_multiple, self.one_width
        )

    def inputs(self, rows: Sequence[Row]) -> dict[str, torch.Tensor]:
        """Right-padded inputs of `rows` (the one padding routine): input_ids, attention_mask, token_type_ids."""
        width = padded_width(max(len(row.ids) for row in rows), self.max_width, self.pad_multiple)
        ids, mask, types = pad_ids([row.ids for row in rows], [row.type_ids for row in rows], self.pad_token_id, width)
        inputs = {"input_ids": ids, "attention_mask": mask}
        if self.with_type_ids:
            inputs["token_type_ids"] = types
        if self.device.type == "cuda" and torch.cuda.is_available():  # page-locked: copied beside the passes before it
            inputs = {name: tensor.pin_memory() for name, tensor in inputs.items()}
        return inputs

    def passes(self, rows: Sequence[Row]) -> Iterator[tuple[list[int], dict[str, torch.Tensor], Any]]:
        """Yield (indices of `rows`, padded inputs, output) for every planned pass; on a CPU `concurrent` at a time."""
        groups = self.plan(rows)
        workers = min(self.concurrent, total_threads())
        if workers > 1 and len(groups) > 1 and self.device.type == "cpu":
            pad = lambda group: self.inputs([rows[i] for i in group])  # noqa: E731
            yield from forward_in_parallel(self._timed, groups, pad, workers)
            return
        pending = groups[::-1]  # a stack: a pass out of GPU memory comes back as its two halves, the first on top
        while pending:
            group = pending.pop()
            inputs = self.inputs([rows[i] for i in group])
            started = time.perf_counter()
            try:
                out = self.forward(inputs)
            except torch.cuda.OutOfMemoryError:
                out = None
            if out is None:  # split only here, once the error's traceback (and the tensors it holds) is gone
                del inputs
                torch.cuda.empty_cache()
                if len(group) == 1:
                    raise OutOfDeviceMemory(group[0], len(rows[group[0]].ids), self.device)
                logger.info("%s ran out of memory on %d rows: trying halves", self.device, len(group))
                pending += [group[len(group) // 2 :], group[: len(group) // 2]]
                continue
            with self._lock:
                self.forward_seconds += time.perf_counter() - started
            yield group, inputs, out

    def run(self, rows: Sequence[Row], take: Callable[[list[int], dict, Any], Sequence[Any]]) -> list[Any]:
        """`take(indices, inputs, output)` gives one result per row of a pass; the results come back in input order."""
        results: list[Any] = [None] * len(rows)
        for group, inputs, out in self.passes(rows):
            for index, result in zip(group, take(group, inputs, out)):
                results[index] = result
        return results

    def _timed(self, inputs: dict[str, torch.Tensor]) -> Any:
        started = time.perf_counter()
        out = self.forward(inputs)
        with self._lock:
            self.forward_seconds += time.perf_counter() - started
        return out
