"""How bertkit's objects show themselves: a plain-text table for `repr` and the terminal, an HTML table for Jupyter.

A leaf module (it imports nothing from bertkit), so every wing can give its objects a readable face.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MAX_ROWS = 40  # rows a table shows before it says how many more there are


def text_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Format `rows` as a left-aligned plain-text table (copy-pasteable, no box drawing)."""
    cells = [[str("" if row.get(c) is None else row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def html_table(rows: Sequence[dict], columns: Sequence[str], caption: str = "", limit: int = MAX_ROWS) -> str:
    """Format `rows` as an HTML table (every value escaped), at most `limit` of them, with a caption above."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(row.get(c)))}</td>" for c in columns) + "</tr>"
        for row in rows[:limit]
    )
    more = f"<tr><td colspan='{len(columns)}'>… {len(rows) - limit} more</td></tr>" if len(rows) > limit else ""
    title = f"<caption style='text-align:left'>{html.escape(caption)}</caption>" if caption else ""
    return f"<table class='bertkit'>{title}<thead><tr>{head}</tr></thead><tbody>{body}{more}</tbody></table>"


def facts_table(facts: dict, caption: str = "") -> str:
    """Format `facts` as a two-column HTML table of name → value."""
    return html_table([{"": name, " ": value} for name, value in facts.items()], ["", " "], caption, len(facts))


def _cell(value: object) -> str:
    return "" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)


def token_vectors_html(tokens: Sequence[str], word_ids: Sequence, vectors: np.ndarray) -> str:
    """Format one text's token vectors as a table: position, token, word, norm and the first values of each vector."""
    import numpy as np

    norms = np.linalg.norm(vectors, axis=1) if len(vectors) else []
    rows = [
        {"position": i, "token": t, "word": w, "norm": float(n), "first values": first_values(v)}
        for i, (t, w, n, v) in enumerate(zip(tokens, word_ids, norms, vectors))
    ]
    width = vectors.shape[1] if getattr(vectors, "ndim", 0) == 2 else 0
    caption = f"{len(tokens)} token vectors of {width} numbers"
    return html_table(rows, ["position", "token", "word", "norm", "first values"], caption)


def first_values(vector: np.ndarray, count: int = 4) -> str:
    """Show the first numbers of a vector: '[0.123, -0.456, …]'."""
    return "[" + ", ".join(f"{x:.3f}" for x in vector[:count]) + (", …]" if len(vector) > count else "]")
