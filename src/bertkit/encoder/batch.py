"""`Batch`: padded model inputs with the human view of them (the tutorial's token table)."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..display import MAX_ROWS, html_table

if TYPE_CHECKING:
    import torch


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
        return [
            {
                "position": position,
                "token": token,
                "id": int(self.input_ids[row, position]),
                "mask": int(self.attention_mask[row, position]),
                "type_id": int(self.token_type_ids[row, position]),
                "word": word,
            }
            for position, (token, word) in enumerate(zip(self.tokens[row], self.word_ids[row]))
        ]

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
        columns = ["position", "token", "id", "mask", "type_id", "word"]
        tables = [html_table(self.table(row), columns, f"row {row}") for row in range(min(len(self), 8))]
        more = f"<p>… {len(self) - 8} more rows</p>" if len(self) > 8 else ""
        return f"<div><strong>{html.escape(self._summary())}</strong>{''.join(tables)}{more}</div>"
