"""Helper commands: bench (throughput against peers) and demo (the guided tour)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from ..io.readers import column_spec
from .common import (
    BatchSizeOption,
    DeviceOption,
    HeaderOption,
    ModelOption,
    ThreadsOption,
    app,
    echo_facts,
    existing_text_file,
    make_encoder,
)


@app.command()
def bench(
    input: Path | None = typer.Argument(
        None, callback=existing_text_file, help="Texts to time (TSV/CSV/JSONL/text); default: bertkit's sample."
    ),
    column: str | None = typer.Option(None, "--column", "-c"),
    header: bool | None = HeaderOption,
    limit: int | None = typer.Option(2000, "--limit", help="Use the first N texts (0 = all)."),
    repeats: int = typer.Option(3, "--repeats"),
    batch_size: int | None = BatchSizeOption,
    peers: bool = typer.Option(
        True, "--peers/--no-peers", help="Also time the tutorial loop and sentence-transformers."
    ),
    model: str | None = ModelOption,
    threads: int | None = ThreadsOption,
    device: str = DeviceOption,
    precision: str = typer.Option(
        "fp32,bf16",
        "--precision",
        help="Precisions to time side by side, comma-separated: "
        "fp32,bf16,int8 (fp32 is always timed: the others' cosine is measured against it).",
    ),
) -> None:
    """Measure embedding throughput on your data against the naive loop and sentence-transformers."""
    from ..io.readers import read_texts, sample_path
    from ..tasks.bench import parse_precisions, run_benchmark

    precisions = parse_precisions(precision)

    if input is None:
        texts = read_texts(sample_path("reviews.tsv"), "text")[0]
    else:
        texts = read_texts(input, column_spec(column), header=header)[0]
    texts = texts[:limit] if limit else texts
    if repeats < 1:
        raise InputError("--repeats must be at least 1 (3 or more for a median worth reporting).")
    run_benchmark(
        make_encoder(model, device=device),
        texts,
        repeats=repeats,
        batch_size=batch_size,
        include_peers=peers,
        echo=typer.echo,
        precisions=precisions,
    )


@app.command()
def demo(model: str | None = ModelOption) -> None:
    """Run a short tour on the packaged default model: tokenization table, embeddings and their shapes."""
    from .demo import run_demo

    run_demo(model)


@app.command()
def env() -> None:
    """Show the machine as bertkit sees it: CPU features (bf16, int8), threads, GPUs, versions (for bug reports)."""
    from ..encoder.devices import machine_facts

    echo_facts(machine_facts())
