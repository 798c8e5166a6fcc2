"""Plain-text tables, the one formatter that every command and the demo print with."""

from __future__ import annotations


def format_table(rows: list[dict], columns: list[str]) -> str:
    """Left-aligned plain-text table (copy-pasteable, no box drawing)."""
    cells = [[str("" if row[c] is None else row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)
