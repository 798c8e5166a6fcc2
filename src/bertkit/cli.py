"""The `bertkit` command line: parses options, calls the library, prints. Errors are one line, never a traceback."""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Optional

import typer

from .errors import BertkitError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Use pre-trained BERT-family encoders: inspect tokenization, extract embeddings, train classifiers.",
)

ModelOption = typer.Option(None, "--model", "-m", help="Model: a local directory, a hub name, or omit for the packaged default.")
ThreadsOption = typer.Option(None, "--threads", help="Torch threads (default: torch's choice).")


def _encoder(model: Optional[str], threads: Optional[int] = None):
    from .encode import Encoder

    return Encoder.from_pretrained(model, threads=threads)


def _say(message: str) -> None:
    typer.echo(message, err=True)


def format_table(rows: list[dict], columns: list[str]) -> str:
    """Left-aligned plain-text table (copy-pasteable, no box drawing)."""
    cells = [[str("" if row[c] is None else row[c]) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


@app.command()
def info(model: Optional[str] = ModelOption) -> None:
    """Describe the model: architecture, layers, hidden size, max length, vocabulary, casing."""
    facts = _encoder(model).info()
    width = max(len(k) for k in facts)
    for key, value in facts.items():
        typer.echo(f"{key.ljust(width)}  {value}")


@app.command()
def tokenize(
    text: str = typer.Argument(..., help="The text to tokenize."),
    pair: Optional[str] = typer.Option(None, "--pair", help="A second sentence (token type id 1)."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Pad to this many tokens (and truncate)."),
    model: Optional[str] = ModelOption,
) -> None:
    """Show the tutorial's table: each token with its id, attention mask and token type id."""
    encoder = _encoder(model)
    padding = "max_length" if max_length else "longest"
    batch = encoder.tokenize([text], [pair] if pair is not None else None, max_length=max_length, padding=padding)
    typer.echo(format_table(batch.table(0), ["position", "token", "id", "mask", "type_id", "word"]))
    if batch.truncated[0]:
        _say(f"note: the input was truncated to {batch.input_ids.shape[1]} tokens.")
    _say(f"vocabulary coverage: {encoder.coverage([text] + ([pair] if pair else [])).message()}")


@app.command()
def embed(
    input: Path = typer.Argument(..., help="TSV/CSV/JSONL or plain-text file (one text per line)."),
    output: Path = typer.Option(..., "--output", "-o", help="Output .npy, .npz (vectors + ids) or .parquet."),
    column: Optional[str] = typer.Option(None, "--column", "-c", help="Text column: index or name (JSONL: field; default 0 / 'text')."),
    header: Optional[bool] = typer.Option(None, "--header/--no-header", help="First line is a header (default: only when --column is a name)."),
    id_column: Optional[str] = typer.Option(None, "--id-column", help="Column whose values are stored as row ids (.npz/.parquet)."),
    layers: str = typer.Option("last", "--layers", "-l", help="e.g. last, -2, 0, last4:sum, last4:concat, all:mean, '-1,-2'."),
    pooling: str = typer.Option("mean", "--pooling", "-p", help="cls, pooler, mean, max, 'cls+mean', or none (token vectors, .npz)."),
    batch_size: int = typer.Option(64, "--batch-size", "-b"),
    max_length: Optional[int] = typer.Option(None, "--max-length"),
    long_text: str = typer.Option("truncate", "--long-text", help="truncate | error | window"),
    stride: Optional[int] = typer.Option(None, "--stride", help="Overlap of windows in tokens (long-text window)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Input format if the extension does not say: tsv, csv, jsonl, text."),
    model: Optional[str] = ModelOption,
    threads: Optional[int] = ThreadsOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or summary."),
) -> None:
    """Embed every text of a file and write the vectors."""
    from .data import read_texts
    from .outputs import check_output_path, write_token_vectors, write_vectors
    from .pooling import parse_pooling

    if parse_pooling(pooling) != ("none",):
        check_output_path(output)
    texts, ids, _ = read_texts(input, _column(column), header=header, fmt=fmt, id_column=_column(id_column))
    encoder = _encoder(model, threads)
    started = time.perf_counter()
    result, report = encoder.embed(
        texts, layers=layers, pooling=pooling, batch_size=batch_size, max_length=max_length,
        long_text=long_text, stride=stride, progress=None if not quiet else False, return_report=True,
    )
    seconds = time.perf_counter() - started
    if parse_pooling(pooling) == ("none",):
        write_token_vectors(output, [r.tokens for r in result], [r.vectors for r in result], ids)
        shape = f"{sum(len(r.tokens) for r in result)} token vectors of dim {result[0].vectors.shape[1] if result else 0}"
    else:
        write_vectors(output, result, ids)
        shape = f"{result.shape[0]} × {result.shape[1]}"
    if not quiet:
        _say(f"wrote {output}: {shape} ({len(texts) / max(seconds, 1e-9):.0f} texts/s)")
        if report.n_truncated:
            _say(f"{report.n_truncated} texts were truncated to {encoder.max_length} tokens (first: row {report.truncated_rows[0]}); --long-text window keeps all tokens.")
        if report.windowed_rows:
            _say(f"{len(report.windowed_rows)} long texts were embedded in overlapping windows.")
        _say(f"vocabulary coverage: {report.coverage.message()}")


@app.command()
def demo(model: Optional[str] = ModelOption) -> None:
    """A short tour on the packaged default model: tokenization table, embeddings and their shapes."""
    from .demo import run_demo

    run_demo(model)


def _column(value: Optional[str]):
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


def main() -> None:
    """Console entry point: user mistakes become one 'error:' line and exit status 2."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            app()
        except BertkitError as exc:
            _say(f"error: {exc}")
            sys.exit(2)
        except KeyboardInterrupt:
            _say("interrupted.")
            sys.exit(130)
        finally:
            for warning in caught:
                if issubclass(warning.category, UserWarning):
                    _say(f"warning: {warning.message}")


if __name__ == "__main__":
    main()
