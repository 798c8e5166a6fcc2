"""Commands that look at the model and make vectors: info, tokenize, embed, similarity."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..display import text_table as format_table
from ..encoder.coverage import text_coverage
from ..encoder.options import EmbedOptions
from ..errors import InputError
from ..io.readers import column_spec
from .common import (
    EMBEDDING,
    app,
    check_attribution_flags,
    echo_attribution,
    echo_facts,
    existing_inputs,
    existing_text_file,
    make_encoder,
    options_for,
    running_on,
    say,
    utf8_texts,
    verbosity,
)
from .options import (
    Attributions,
    BatchSize,
    Calibration,
    Device,
    Generated,
    Header,
    Json,
    MaxLength,
    Model,
    Output,
    Overwrite,
    Pair,
    Precision,
    Quiet,
    TextColumn,
    Threads,
    from_fields,
)

if TYPE_CHECKING:
    import numpy as np

    from ..encoder.encode import Encoder


@app.command()
def info(model: Model = None) -> None:
    """Describe the model: architecture, layers, hidden size, max length, vocabulary, casing."""
    echo_facts(make_encoder(model).info())


@app.command()
def tokenize(
    text: Annotated[str, typer.Argument(callback=utf8_texts, help="The text to tokenize.")],
    pair: Pair = None,
    max_length: MaxLength = None,
    model: Model = None,
) -> None:
    """Show the tutorial's table: each token with its id, attention mask and token type id (--pair: type id 1)."""
    from ..encoder.tokenizer_only import TokenizerOnly

    light = TokenizerOnly.from_model(model)  # tokenizer.json alone: no torch, no transformers
    if light is not None:
        rows, truncated, coverage = light.table(text, pair, max_length)
    else:
        encoder = make_encoder(model)
        padding = "max_length" if max_length else "longest"
        batch = encoder.tokenize([text], [pair] if pair is not None else None, max_length=max_length, padding=padding)
        rows, truncated = batch.table(0), batch.truncated[0]
        coverage = text_coverage(encoder.tokenizer, [text] + ([pair] if pair else [])).message()
    typer.echo(format_table(rows, ["position", "token", "id", "mask", "type_id", "word"]))
    if truncated:
        say(f"note: the input was truncated to {len(rows)} tokens.", warning=True)
    say(f"vocabulary coverage: {coverage}")


@app.command()
@from_fields(EmbedOptions, "options", group=EMBEDDING, lead=("layers", "pooling"))
def embed(
    ctx: typer.Context,
    input: Annotated[Path, typer.Argument(callback=existing_inputs, help="TSV/CSV/JSONL or text (one per line).")],
    output: Output,
    column: TextColumn = None,
    header: Header = None,
    id_column: Annotated[str | None, typer.Option(help="Column stored as row ids (.npz/.parquet).")] = None,
    batch_size: BatchSize = None,
    fmt: Annotated[str | None, typer.Option("--format", help="Input format: tsv, csv, jsonl, text.")] = None,
    model: Model = None,
    threads: Threads = None,
    quiet: Quiet = False,
    chunk_rows: Annotated[
        int | None, typer.Option(help="Rows per chunk (memory, resume; default 4096); Ray: per actor call (1024).")
    ] = None,
    precision: Precision = "fp32",
    engine: Annotated[str, typer.Option(help="local | ray (Ray Data; INPUT may be a glob, -o a folder).")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster to join (default: RAY_ADDRESS or local).")] = None,
    actors: Annotated[int | None, typer.Option(help="Ray: model replicas (default: one per CPU but one).")] = None,
    overwrite: Overwrite = False,
    gpus_per_actor: Annotated[float | None, typer.Option(help="Ray: GPUs each actor holds (e.g. 1, 0.5).")] = None,
    calibration: Calibration = None,
    device: Device = "auto",
    options: Generated = None,
) -> None:
    """Embed every text of a file and write the vectors (streamed in chunks; an interrupted run resumes).

    -o: .npy, .npz (vectors + ids) or .parquet, which keep the row ids and every option, so that `bertkit search`
    embeds a query the same way. --overwrite replaces an existing output (Ray: starts -o over).
    """
    from ..io.columns import choose_text_column
    from ..io.text_files import detect_format
    from ..io.writers import check_output, check_output_path, check_writable_location

    if engine not in ("local", "ray"):
        raise InputError(f"--engine {engine!r}: choose local or ray.")
    quiet = quiet or verbosity() == "quiet"  # `bertkit -q embed` as `bertkit embed -q`
    if engine == "ray":
        if options.output_type != "float32" or calibration is not None:
            raise InputError(
                "--output-type and --calibration apply to --engine local; the Ray engine writes float32 vectors."
            )
        if device != "auto":
            raise InputError(
                "--device applies to --engine local; Ray actors run on the CPU, or on GPUs with --gpus-per-actor."
            )
        reading = dict(column=column_spec(column), id_column=column_spec(id_column))
        rows = {} if chunk_rows is None else {"rows_per_call": chunk_rows}  # else embed_files' rows per actor call
        _embed_on_ray(ctx, str(input), output, options, quiet, **reading, **rows)
        return
    if gpus_per_actor is not None:
        raise InputError("--gpus-per-actor applies to --engine ray; with --engine local give --device cuda.")
    existing_text_file(input)  # a missing, unreadable or binary input is refused before the model loads
    column = column_spec(column)
    if column is None and header is None and detect_format(input, fmt) in ("tsv", "csv"):  # detected, and said
        choice = choose_text_column(input, fmt)
        column, header = choice.column, choice.header
        if not quiet:
            say(f"reading {choice.reason} of {input}; --text-column chooses another")
    inputs = [input, calibration, model]
    if options.token_vectors:
        check_output(check_writable_location(output), overwrite, inputs)
    else:
        check_output_path(output, overwrite, inputs)
    encoder = make_encoder(model, precision, device)
    settings = dict(column=column, id_column=column_spec(id_column), header=header, fmt=fmt, batch_size=batch_size)
    started = time.perf_counter()
    if options.token_vectors:
        summary = _embed_token_vectors(encoder, input, output, options, quiet, overwrite, **settings)
    else:
        ranges = None if calibration is None else _calibration_ranges(encoder, calibration, options, batch_size)
        chunks = dict(chunk_rows=4096 if chunk_rows is None else chunk_rows, ranges=ranges, overwrite=overwrite)
        summary = _embed_streamed(encoder, input, output, options, quiet, **settings, **chunks)
    if not quiet:
        _say_summary(summary, output, time.perf_counter() - started, options.max_length or encoder.max_length, encoder)


def _calibration_ranges(encoder: Encoder, path: Path, options: EmbedOptions, batch_size: int | None) -> np.ndarray:
    """Compute int8/uint8 ranges from the vectors of a file of texts, embedded with this command's options."""
    from ..encoder.compact import int8_ranges
    from ..io.readers import read_texts

    texts = read_texts(path)[0]
    floats = options.replace(output_type="float32")
    return int8_ranges(encoder.embed(texts, floats, batch_size=batch_size, progress=False, warn=False))


@dataclass
class _Summary:
    rows: int
    shape: str
    truncated: int
    windowed: int
    coverage: str
    truncated_lines: list[int] = field(default_factory=list)
    poor_lines: list[int] = field(default_factory=list)
    poor_message: str = ""
    embedded: int | None = None  # rows this command embedded (after a resume: fewer than `rows`)
    part: str = ""  # after a resume: the rows this command embedded, which its counts describe


def _embed_token_vectors(
    encoder: Encoder, input: Path, output: Path, options: EmbedOptions, quiet: bool, overwrite: bool, **settings: Any
) -> _Summary:
    """pooling='none': every token's vector, read whole and written as one .npz; `settings`: reading, batch size."""
    from ..encoder.encode import vectors_record
    from ..encoder.tokenize import TextTooLong
    from ..io.readers import read_texts
    from ..io.vectors import write_token_vectors

    batch_size = settings.pop("batch_size")
    texts, ids, lines = read_texts(input, **settings)
    try:
        result, report = encoder.embed_with_report(
            texts, options, batch_size=batch_size, progress=None if not quiet else False, warn=False
        )
    except TextTooLong as exc:
        raise InputError(
            f"{input}, line {lines[exc.row]}: {exc.tokens} tokens, more than the limit of "
            f"{exc.max_length}; pass --long-text truncate or --long-text window."
        ) from None
    meta = {"model": encoder.source.spec, **vectors_record(encoder, options.resolve(encoder))}
    write_token_vectors(output, [r.tokens for r in result], [r.vectors for r in result], ids, meta, overwrite)
    poor = report.coverage.poor_rows
    return _Summary(
        len(texts),
        f"{sum(len(r.tokens) for r in result)} token vectors",
        report.n_truncated,
        len(report.windowed_rows),
        report.coverage.message(),
        [lines[row] for row in report.truncated_rows],
        [lines[row] for row in poor],
        text_coverage(encoder.tokenizer, [texts[row] for row in poor]).message() if poor else "",
    )


def _embed_streamed(
    encoder: Encoder, input: Path, output: Path, options: EmbedOptions, quiet: bool, **settings: Any
) -> _Summary:
    """Sentence vectors, streamed chunk by chunk into the output (resumable); `settings` go to `embed_file`."""
    from ..encoder.progress import Progress
    from ..io.stream import embed_file

    bar = Progress("embed", unit="texts", show=not quiet)
    try:
        result = embed_file(encoder, input, output, options, **settings, on_rows=bar.to)
    except KeyboardInterrupt:
        say("interrupted: finished chunks are kept; run the same command again to continue.", warning=True)
        sys.exit(130)
    finally:
        bar.close()
    if result.blank_lines and not quiet:
        say(
            f"{len(result.blank_lines)} blank texts were embedded as empty texts ({_lines(result.blank_lines)}); "
            "remove them from the file if they are not rows."
        )
    part = ""
    if result.resumed_from:
        part = f"rows {result.resumed_from + 1}-{result.rows}"
        if not quiet:
            say(f"resumed after row {result.resumed_from} of {result.rows}")
    share = result.unknown_tokens / result.tokens if result.tokens else 0.0
    return _Summary(
        result.rows,
        f"{result.rows} × {result.dim}",
        result.truncated,
        result.windowed,
        f"[UNK] {result.unknown_tokens} of {result.tokens} tokens ({share:.1%})",
        result.truncated_lines,
        result.poor_coverage_lines,
        result.coverage_message,
        result.rows - result.resumed_from,
        part,
    )


def _say_summary(summary: _Summary, output: Path, seconds: float, limit: int, encoder: Encoder) -> None:
    embedded = summary.rows if summary.embedded is None else summary.embedded
    say(f"wrote {output}: {summary.shape} ({embedded / max(seconds, 1e-9):.0f} texts/s on {running_on(encoder)})")
    if summary.part:
        say(f"resumed: the counts below are of {summary.part}, the part this command embedded")
    if summary.truncated:
        say(
            f"{summary.truncated} texts were truncated to {limit} tokens ({_lines(summary.truncated_lines)}); "
            "--long-text window keeps all tokens.",
            warning=True,
        )
    if summary.windowed:
        say(f"{summary.windowed} long texts were embedded in overlapping windows.")
    say(f"vocabulary coverage: {summary.coverage}" + (f" ({summary.part})" if summary.part else ""))
    if summary.poor_lines:
        say(
            f"{len(summary.poor_lines)} rows are poorly covered by this model's vocabulary "
            f"({_lines(summary.poor_lines)}): {summary.poor_message}",
            warning=True,
        )


def _lines(numbers: list[int], shown: int = 5) -> str:
    """'lines 3, 9, 12' or 'lines 3, 9, 12, 15, 20 and 7 more' (file lines, 1-based)."""
    more = f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    return f"line{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers[:shown]))}{more}"


def _embed_on_ray(
    ctx: typer.Context, pattern: str, output: Path, options: EmbedOptions, quiet: bool, **reading: Any
) -> None:
    """`--engine ray`: Ray Data over every file the pattern names, one Parquet folder per file in `output`."""
    from ..ray import embed_files

    logs, progress = verbosity() == "verbose", None if not quiet else False
    settings = options_for(ctx, embed_files, **reading, ray_logs=logs, progress=progress)
    summary = embed_files(pattern, output, options, **settings)
    if quiet:
        return
    plan = summary.resources
    skipped = f" ({', '.join(summary.skipped)})" if summary.skipped else ""
    layout = ""
    if plan:
        per_actor = f"{plan.gpus_per_actor:g} GPU" if plan.gpus_per_actor else f"{plan.threads} thread(s)"
        layout = f" on {plan.actors} actor(s) × {per_actor}"
    say(
        f"wrote {output}: {summary.rows} rows from {len(summary.files)} files in {summary.seconds:.1f} s "
        f"({summary.rows_per_second:.0f} rows/s{layout}); skipped {len(summary.skipped)} complete files{skipped}."
    )
    if summary.empty:
        say(f"{len(summary.empty)} input files had no rows: {', '.join(summary.empty)}.", warning=True)


@app.command()
@from_fields(EmbedOptions, "options", group=EMBEDDING, lead=("layers", "pooling"))
def similarity(
    text: Annotated[str, typer.Argument(callback=utf8_texts, help="The first text.")],
    other: Annotated[str, typer.Argument(callback=utf8_texts, help="The second text.")],
    metric: Annotated[
        str, typer.Option(help="cosine | dot | euclidean | manhattan (attributions: cosine or dot).")
    ] = "cosine",
    attributions: Attributions = False,
    as_json: Json = False,
    model: Model = None,
    precision: Precision = "fp32",
    device: Device = "auto",
    options: Generated = None,
) -> None:
    """Score how similar two texts' vectors are; --attributions: which words make them so.

    Prints the score (sentence-transformers' `similarity` of the two vectors the options make); with --attributions,
    each text's words and their shares of it (--json: as one JSON line).
    """
    from ..tasks.search import similarity as pairwise

    check_attribution_flags(attributions, as_json)
    if options.output_type != "float32":
        raise InputError(f"--output-type {options.output_type}: a similarity is of float vectors; leave it out.")
    encoder = make_encoder(model, precision, device)
    if attributions:
        echo_attribution(encoder.explain(text, other, options, metric=metric), as_json, metric=metric)
        return
    vectors = encoder.embed([text, other], options)
    typer.echo(f"{float(pairwise(vectors[:1], vectors[1:], metric)[0, 0]):.4f}")
