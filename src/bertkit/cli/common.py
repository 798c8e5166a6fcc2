"""What every command shares: the Typer app, common options, and small helpers (encoder, messages, column specs)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Use pre-trained BERT-family encoders: inspect tokenization, extract embeddings, train classifiers, probe layers, fine-tune, serve.",
)

ModelOption = typer.Option(None, "--model", "-m", help="Model: a local directory, a hub name, or omit for the packaged default.")
ThreadsOption = typer.Option(None, "--threads", help="Torch threads (default: torch's choice).")
HeaderOption = typer.Option(None, "--header/--no-header", help="First line is a header (default: when columns are names).")
CacheDirOption = typer.Option(None, "--cache-dir", help="Embedding cache directory (default ~/.cache/bertkit/embeddings).")
NoCacheOption = typer.Option(False, "--no-cache", help="Do not read or write the embedding cache.")
OverwriteOption = typer.Option(False, "--overwrite", help="Replace an existing output directory.")
PrecisionOption = typer.Option(
    "fp32", "--precision",
    help="fp32 (default) | bf16 (only on CPUs with native bf16: AMX / AVX512-BF16) | int8 (int8 linear layers, smoothed; see bertkit quantize).")
RunArgument = typer.Argument(..., help="A run directory written by `bertkit train` or `bertkit finetune`.")


def make_encoder(model: Optional[str], threads: Optional[int] = None, precision: str = "fp32"):
    from ..encoder.encode import Encoder

    return Encoder.from_pretrained(model, threads=threads, precision=precision)


def say(message: str) -> None:
    typer.echo(message, err=True)


def cache_option(no_cache: bool, cache_dir: Optional[Path]):
    from ..io.cache import default_cache_dir

    if no_cache:
        return None
    return cache_dir or default_cache_dir()


def column_spec(value: Optional[str]):
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


