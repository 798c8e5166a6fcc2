"""The layer choices a probe scores: each hidden state, the usual combinations, and a learned mix."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError


@dataclass(frozen=True)
class LayerChoice:
    """A way to turn the stack of hidden states into one vector: which layers, and how to combine them."""

    name: str
    combine: str  # "single" (one layer), "sum", "concat", "mean" (as LayerSelection.combine), or "mix" (learned)
    layers: tuple[int, ...]


def layer_choices(num_layers: int) -> list[LayerChoice]:
    """h0 … hL one by one, then the BERT paper's combinations and a learned weighted sum of all layers."""
    last = num_layers
    names = {0: "h0 (embeddings)", last - 1: f"h{last - 1} (second-to-last)", last: f"h{last} (last)"}
    choices = [LayerChoice(names.get(i, f"h{i}"), "single", (i,)) for i in range(last + 1)]
    last4 = tuple(range(max(0, last - 3), last + 1))
    every = tuple(range(last + 1))
    return choices + [
        LayerChoice(f"sum of last {len(last4)}", "sum", last4),
        LayerChoice(f"concat of last {len(last4)}", "concat", last4),
        LayerChoice(f"mean of all {last + 1}", "mean", every),
        LayerChoice(f"learned mix of all {last + 1}", "mix", every),
    ]


def select(blocks: np.ndarray, choice: LayerChoice) -> np.ndarray:
    """blocks: (n, layers, dim) → (n, dim) or (n, 4·dim) for the concat; the mix is fitted, not selected."""
    chosen = blocks[:, list(choice.layers)]
    if choice.combine == "single":
        return chosen[:, 0]
    if choice.combine in ("sum", "mean"):
        return getattr(chosen, choice.combine)(axis=1)
    if choice.combine == "concat":
        return chosen.reshape(len(blocks), -1)
    raise InputError(f"layer choice {choice.name!r} is fitted, not selected")
