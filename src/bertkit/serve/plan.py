"""Cut the rows a batcher has taken into forward passes: sorted by length, grouped to waste little padding.

A forward pass costs about a fixed overhead plus its padded tokens (rows × longest row); the overhead is worth a few
dozen tokens (the README's serving section has the measurement). One long row padded into a batch of short ones
costs more than a second pass, so `plan_batches` picks the grouping of the sorted rows that minimises overhead +
padded tokens, each pass within the token budget.

Widths are rounded up to a multiple of `PAD_MULTIPLE`: a server sees every (rows, width) shape sooner or later,
and with free widths the allocator's heap keeps growing under load (benchmarks/serve.py --soak measures it).
"""

from __future__ import annotations

from collections.abc import Sequence

PASS_OVERHEAD_TOKENS = 32  # a forward pass's fixed cost, in tokens' worth of compute (see above)
PAD_MULTIPLE = 8  # padded widths are multiples of this


def padded_width(longest: int, limit: int | None = None, multiple: int = PAD_MULTIPLE) -> int:
    """The width a pass whose longest row has `longest` tokens is padded to, never past the model's `limit`."""
    width = -(-longest // multiple) * multiple
    return max(longest, min(width, limit)) if limit else width


def plan_batches(
    lengths: Sequence[int], max_batch_tokens: int, overhead_tokens: int = PASS_OVERHEAD_TOKENS
) -> list[list[int]]:
    """Indices into `lengths`, grouped into passes: each group is contiguous in length order and has at most
    `max_batch_tokens` padded tokens (a single row longer than that is a pass of its own); longest groups first."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    width = [lengths[i] for i in order]
    n = len(order)
    best = [0] * (n + 1)  # best[j]: least cost of the first j sorted rows
    cut = [0] * (n + 1)  # cut[j]: where the last group of that best plan starts
    for j in range(1, n + 1):
        longest = padded_width(width[j - 1])
        best_cost, best_start = None, j - 1
        for start in range(j - 1, -1, -1):
            rows = j - start
            if rows > 1 and rows * longest > max_batch_tokens:
                break
            cost = best[start] + overhead_tokens + rows * longest
            if best_cost is None or cost < best_cost:
                best_cost, best_start = cost, start
        best[j], cut[j] = best_cost, best_start
    groups: list[list[int]] = []
    end = n
    while end > 0:
        groups.append([order[k] for k in range(cut[end], end)])
        end = cut[end]
    return groups  # built from the longest rows down: the costliest pass first
