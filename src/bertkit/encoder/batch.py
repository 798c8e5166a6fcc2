"""`Batch`: padded model inputs with the human view of them (the tutorial's token table)."""

from __future__ import annotations

import html
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..display import MAX_ROWS, html_table

if TYPE_CHECKING:
    import torch

COLUMNS = ("position", "token", "id", "mask", "type_id", "word")  # the tutorial's token table, plus word ids


@dataclass(repr=False)
class Batch:
    """Padded model inputs with the human view of them: tokens, word ids, which rows were truncated.

    Printed, it shows its shape and each row's tokens; in Jupyter, the tutorial's token / id / mask table per row.
    """

    input_ids: torch.Tensor  # (batch, seq) int64
    attention_mask: torch.Tensor  # (batch, seq) int64, 1 = real token
    token_type_ids: torch.Tensor  # (batch, seq) int64, 0 = first sentence, 1 = second
    tokens: list[list[str]]
    word_ids: list[list[int | None]]
    truncated: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def table(self, row: int = 0) -> list[dict]:
        """One dict per position of `row`: the tutorial's token / id / mask / type id table, plus word id."""
        ids, mask, types = (t[row].tolist() for t in (self.input_ids, self.attention_mask, self.token_type_ids))
        values = zip(itertools.count(), self.tokens[row], ids, mask, types, self.word_ids[row])
        return [dict(zip(COLUMNS, row_values)) for row_values in values]

    def _summary(self) -> str:
        rows, length = self.input_ids.shape
        cut = [row for row, flag in enumerate(self.truncated) if flag]
        return f"Batch({rows} row{'s' if rows != 1 else ''} × {length} tokens" + (
            f"; truncated: rows {', '.join(map(str, cut))})" if cut else ")"
        )

    def __repr__(self) -> str:
        shown = [f"  {row}: {' '.join(tokens)}" for row, tokens in enumerate(self.tokens[:MAX_ROWS])]
        more = [f"  … {len(self) - MAX_ROWS} more rows"] if len(self) > MAX_ROWS else []
        return "\n".join([self._summary(), *shown, *more])

    def _repr_html_(self) -> str:
        tables = [html_table(self.table(row), COLUMNS, f"row {row}") for row in range(min(len(self), 8))]
        more = f"<p>… {len(self) - 8} more rows</p>" if len(self) > 8 else ""
        return f"<div><strong>{html.escape(self._summary())}</strong>{''.join(tables)}{more}</div>"
