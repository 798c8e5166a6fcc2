"""From hidden states to vectors.

The passes of a call (`token_states`: the runner's passes, a long text's windows stitched back into one), layer
selection, pooling (prompt tokens left out where asked), the model's Dense modules, and last the Matryoshka cut, unit
length and compact type.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .devices import OutOfDeviceMemory
from .layers import LayerSelection, parse_layers
from .options import EmbedOptions
from .pooling import parse_pooling, pool_sentences
from .progress import Progress
from .runner import Row, Runner
from .st_config import DenseLayer
from .tokenize import content_bounds, prompt_length

if TYPE_CHECKING:
    from .encode import Encoder
    from .results import EmbedReport
    from .tokenize import Encoded

PROGRESS_MIN_ROWS = 256


@dataclass(frozen=True)
class VectorHead:
    """What turns one pass's hidden states into vectors, for resolved options (`EmbedOptions.resolve`)."""

    selection: LayerSelection
    methods: tuple[str, ...]
    prompt_tokens: int  # leading tokens kept out of mean and max pooling (a prompt, with include_prompt off)
    dense: tuple[DenseLayer, ...]
    truncate_dim: int | None = None  # the Matryoshka cut, before unit length
    normalize: bool = False  # unit length

    @classmethod
    def of(cls, options: EmbedOptions, prompt_tokens: int, dense: Sequence[DenseLayer]) -> VectorHead:
        """Build the head for resolved `options` (`dense`: the model's Dense modules, used when options say so)."""
        selection, methods = parse_layers(options.layers), parse_pooling(options.pooling or "mean")
        kept, modules = (0 if options.include_prompt else prompt_tokens), (tuple(dense) if options.dense else ())
        return cls(selection, methods, kept, modules, options.truncate_dim, bool(options.normalize_embeddings))

    def tokens(self, hidden_states: Sequence[torch.Tensor]) -> torch.Tensor:
        """(batch, seq, dim) token vectors of the chosen layers, combined."""
        return self.selection.apply(hidden_states)

    def sentences(self, vectors: torch.Tensor, mask: torch.Tensor, pooler: torch.Tensor | None) -> torch.Tensor:
        """(batch, dim) sentence vectors of token vectors and their mask (float32 on the vectors' device).

        Half-precision states are pooled in float32: a mean over hundreds of tokens keeps its digits.
        """
        if self.prompt_tokens:
            mask = mask.clone()
            mask[:, : self.prompt_tokens] = 0
        pooler = None if pooler is None else pooler.float()
        pooled = pool_sentences(vectors.float(), mask, self.methods, pooler)
        for layer in self.dense:
            pooled = layer(pooled)
        return self.unit(pooled if self.truncate_dim is None else pooled[:, : self.truncate_dim])

    def unit(self, vectors: torch.Tensor) -> torch.Tensor:
        """Return `vectors` at unit length along their last axis where the options ask for it (else as they are)."""
        return vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12) if self.normalize else vectors


def stitch(full_mask: Sequence[int], windows: Sequence, stride: int, vectors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stitch the token vectors of a long text from its windows (the tokenizer's overflow windows).

    Every token of the whole text gets exactly one vector, from the window where it has the most context on both
    sides.

    Parameters
    ----------
    full_mask : sequence of int
        The whole text's special-tokens mask.
    windows : sequence of tokenizers.Encoding
        Its windows, in order; each shares `stride` content tokens with the one before.
    stride : int
        Tokens two neighbouring windows share.
    vectors : sequence of torch.Tensor
        Each window's (window tokens, dim) vectors.

    Returns
    -------
    torch.Tensor
        (tokens of the whole text, dim).
    """
    start, end = content_bounds(full_mask)
    full = len(full_mask)
    out = vectors[0].new_zeros((full, vectors[0].shape[-1]))
    best = torch.full((full,), -1, dtype=torch.long)
    position = start
    for window, window_vectors in zip(windows, vectors):
        a, b = content_bounds(window.special_tokens_mask)
        span = torch.arange(position, position + b - a)
        context = torch.minimum(span - position, position + b - a - 1 - span)
        better = context > best[span]
        out[span[better]] = window_vectors[a:b][better]
        best[span] = torch.where(better, context, best[span])
        position += b - a - stride
    first, last = vectors[0], vectors[-1]
    out[:start] = first[:start]
    last_end = content_bounds(windows[-1].special_tokens_mask)[1]
    out[end:] = last[last_end : last_end + full - end]
    return out


def token_states(
    runner: Runner,
    encoded: Sequence[Encoded],
    head: VectorHead,
    report: EmbedReport,
    progress: bool | None | Progress = None,
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """Yield (texts, token vectors (b, seq, dim), mask (b, seq), pooler (b, hidden) or None), pass by pass.

    A long text read in windows comes back stitched, once its last window has run: one vector per token. `progress`
    may be the caller's own bar (a call tokenized in chunks has one bar over all of them): then it is left open.
    """
    rows = [Row(part.ids, part.type_ids) for item in encoded for part in item.parts]
    owners = [text for text, item in enumerate(encoded) for _ in item.parts]
    windows_left = {text: len(encoded[text].windows or ()) for text in report.windowed_rows}
    pending: dict[int, list] = {}
    own_bar = not isinstance(progress, Progress)
    bar = Progress("embed", len(encoded), "texts", show=progress, min_total=PROGRESS_MIN_ROWS) if own_bar else progress
    try:
        for group, inputs, out in runner.passes(rows):
            report.forward_seconds = runner.forward_seconds
            states, poolers = head.tokens(out.hidden_states), getattr(out, "pooler_output", None)
            mask = inputs["attention_mask"]
            whole = [k for k, row in enumerate(group) if owners[row] not in windows_left]
            if len(whole) == len(group):  # no window in this pass: its tensors as they are, no gather on the device
                yield [owners[row] for row in group], states, mask, poolers
                bar.update(len(group))
            elif whole:
                index = torch.tensor(whole, device=states.device)
                pooler = poolers[index] if poolers is not None else None
                yield [owners[group[k]] for k in whole], states[index], mask[whole], pooler
                bar.update(len(whole))
            for k, row in enumerate(group):
                text = owners[row]
                if text not in windows_left:
                    continue
                length = len(rows[row].ids)
                pooler = poolers[k].float().cpu() if poolers is not None else None
                pending.setdefault(text, []).append((row, states[k, :length].float().cpu().clone(), pooler))
                windows_left[text] -= 1
                if windows_left[text] == 0:
                    parts = sorted(pending.pop(text), key=lambda part: part[0])
                    item = encoded[text]
                    stitched = stitch(
                        item.encoding.special_tokens_mask, item.windows or [], item.stride, [p[1] for p in parts]
                    )
                    ones, first = torch.ones((1, stitched.shape[0]), dtype=torch.long), parts[0][2]
                    yield [text], stitched.unsqueeze(0), ones, None if first is None else first.unsqueeze(0)
                    bar.update(1)
    except OutOfDeviceMemory as exc:
        raise OutOfDeviceMemory(owners[exc.row], exc.tokens, exc.device) from None
    finally:
        report.forward_seconds = runner.forward_seconds
        if own_bar:
            bar.close()


def vector_head(encoder: Encoder, resolved: EmbedOptions) -> VectorHead:
    """Return what turns the encoder's hidden states into vectors for resolved options.

    Layers, pooling, prompt tokens left out of the pooling, the model's Dense modules.
    """
    prompt_tokens = 0
    if resolved.prompt and not resolved.include_prompt:
        prompt_tokens = prompt_length(encoder.tokenizer, resolved.prompt)
    return VectorHead.of(resolved, prompt_tokens, encoder.sentence_config.dense)
