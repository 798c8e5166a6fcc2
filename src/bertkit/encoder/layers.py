"""Layer selection: one plain-string spec (API, CLI, saved configs) that picks and combines hidden states."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

from ..errors import InputError, quoted

COMBINES = ("sum", "mean", "concat")
VALID_FORMS = (
    "an index ('0' = embedding output, '-1' = last layer, '3'), 'last', 'second_to_last', 'embeddings', "
    "a list ('-1,-2,-3,-4', concatenated; add ':sum' or ':mean' to combine otherwise), "
    "'lastN:sum|mean|concat' (e.g. 'last4:sum', 'last4:concat'), 'all:sum|mean|concat' (embeddings + every layer)"
)
_NAMED = {"last": (-1,), "second_to_last": (-2,), "embeddings": (0,)}
MAX_LAYERS = 1000  # far above any encoder; a larger lastN is a typo, not a request
_INDICES = "-?[0-9]+(?: *, *-?[0-9]+)*"  # spaces only: int() refuses some other whitespace
_INT_LIST = re.compile(_INDICES)


def _any_case(*words: str) -> str:
    """Return a regular expression of `words` in any case (their letters are ASCII, which str.lower folds alone)."""
    return "(?:" + "|".join("".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in word) for word in words) + ")"


# white space as str.strip() sees it, spelled out: JSON Schema's (ECMAScript's), Python's and Rust's `\s` disagree
WHITE_SPACE = "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
NOT_BLANK = WHITE_SPACE.replace("[", "[^", 1)  # a character that is not white space as str.strip() sees it
_SPACE = f"{WHITE_SPACE}*"
_COMBINE = f"{_SPACE}:{_SPACE}{_any_case(*COMBINES)}"
# Exactly the specs `parse_layers` takes, as one regular expression that ECMAScript (JSON Schema), Python and Rust
# (pydantic) read alike: the service's request schemas publish it as the `pattern` of `layers` (lastN: N from 1 to
# MAX_LAYERS). It is the syntax only: an index the model lacks (e.g. '9' or 'last12:sum' for a 6-layer model)
# matches, and is refused when the options are resolved against the model, with the valid range (the service: a 422
# that says it).
LAYERS_PATTERN = (
    f"^{_SPACE}(?:{_any_case(*_NAMED)}(?:{_SPACE}:)?"  # 'last', 'second_to_last', 'embeddings' ('last:' too)
    f"|{_INDICES}(?:{_SPACE}:(?:{_SPACE}{_any_case(*COMBINES)})?)?"  # '3', '-1,-2', '0,3,5:mean'
    f"|(?:{_any_case('all')}|{_any_case('last')}0*(?:[1-9][0-9]{{0,2}}|1000)){_COMBINE}"  # 'all:sum', 'last4:sum'
    f"){_SPACE}$"
)


@dataclass(frozen=True)
class LayerSelection:
    """Which hidden states to use (`indices`, negative counts from the last) and how to combine them."""

    spec: str
    indices: tuple[int, ...] | None  # None means every hidden state
    combine: str  # "sum" | "mean" | "concat"

    def resolve(self, num_states: int) -> tuple[int, ...]:
        """Absolute indices into `hidden_states` (length `num_states` = layers + 1)."""
        if self.indices is None:
            return tuple(range(num_states))
        for index in self.indices:
            if not -num_states <= index < num_states:
                raise InputError(
                    f"layers={self.spec!r}: layer {index} does not exist; this model has {num_states} hidden states "
                    f"(0 = embedding output … {num_states - 1} = last layer), so indices run from "
                    f"{-num_states} to {num_states - 1}."
                )
        return tuple(index % num_states for index in self.indices)

    def output_dim(self, hidden_size: int, num_states: int) -> int:
        """Width of the combined state: `hidden_size`, times the layers chosen when they are concatenated."""
        return hidden_size * len(self.resolve(num_states)) if self.combine == "concat" else hidden_size

    def is_last_only(self, num_states: int) -> bool:
        """Whether only the last hidden state is chosen (the model's plain `last_hidden_state`)."""
        return self.resolve(num_states) == (num_states - 1,)

    def apply(self, hidden_states: Sequence[torch.Tensor]) -> torch.Tensor:
        """Combine the selected states: each (batch, seq, hidden) → (batch, seq, hidden or hidden × k)."""
        import torch  # here: parsing a spec (EmbedOptions) loads no torch

        chosen = [hidden_states[i] for i in self.resolve(len(hidden_states))]
        if len(chosen) == 1:
            return chosen[0]
        if self.combine == "concat":
            return torch.cat(chosen, dim=-1)
        stacked = torch.stack(chosen, dim=0)
        return stacked.sum(dim=0) if self.combine == "sum" else stacked.mean(dim=0)


def parse_layers(spec: str | int | Sequence[int] | LayerSelection) -> LayerSelection:
    """Parse a layers spec (`LAYERS_PATTERN` is its grammar); the error lists every valid form."""
    if isinstance(spec, LayerSelection):
        return spec
    if isinstance(spec, int):
        return LayerSelection(str(spec), (spec,), "concat")
    if isinstance(spec, (list, tuple)):
        return parse_layers(",".join(str(int(i)) for i in spec))
    return _parse_text(spec) if isinstance(spec, str) else _parse_text.__wrapped__(spec)


@functools.lru_cache(maxsize=256)
def _parse_text(spec: str) -> LayerSelection:
    """Parse a layers spec's text: once per spec in a process (a selection is frozen; every call shares it)."""
    text = str(spec).strip().lower()
    head, _, combine = text.partition(":")
    head, combine = head.strip(), combine.strip()
    if combine and combine not in COMBINES:
        raise InputError(f"layers={quoted(spec)}: unknown combination {combine!r}. Valid forms: {VALID_FORMS}.")
    if head in _NAMED and not combine:
        return LayerSelection(text, _NAMED[head], "concat")
    if head == "all":
        if not combine:
            raise InputError(f"layers={quoted(spec)}: say how to combine all layers. Valid forms: {VALID_FORMS}.")
        return LayerSelection(text, None, combine)
    match = re.fullmatch(r"last([0-9]+)", head)
    if match:
        count = int(match.group(1))
        if count < 1 or not combine:
            raise InputError(f"layers={quoted(spec)}: use e.g. 'last4:sum'. Valid forms: {VALID_FORMS}.")
        if count > MAX_LAYERS:
            raise InputError(f"layers={quoted(spec)}: {count} layers is more than any model has; use 'all:{combine}'.")
        return LayerSelection(text, tuple(range(-1, -count - 1, -1)), combine)
    if _INT_LIST.fullmatch(head):
        indices = tuple(int(part) for part in head.split(","))
        return LayerSelection(text, indices, combine or "concat")
    raise InputError(f"layers={quoted(spec)} is not a valid layer spec. Valid forms: {VALID_FORMS}.")
