"""What every command shares: the Typer app, common options, and small helpers (encoder, messages, column specs)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Use pre-trained BERT-family encoders: inspect tokenization, extract embeddings, train classifiers, probe layers, fine-tune, serve.",
)



def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"bertkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print bertkit's version and exit."),
) -> None:
    """Use pre-trained BERT-family encoders: inspect tokenization, extract embeddings, train classifiers, probe
    layers, fine-tune, serve."""


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


_PATH_LIKE = re.compile(r"\S*(/|\\)\S*|\S+\.(tsv|csv|jsonl|json|txt|text|parquet|conll|iob|gz)", re.IGNORECASE)


def texts_or_file(inputs: list[str], as_text: bool) -> Path | None:
    """The file to read when `inputs` is one existing file; None when they are texts. A missing file is refused.

    A lone input that looks like a file name (an extension such as .tsv, or a path separator, and no spaces) but is
    not there is a mistyped path far more often than a text: it is refused unless `--text` marks it as one.
    """
    if as_text:
        return None
    if len(inputs) == 1 and Path(inputs[0]).is_file():
        return Path(inputs[0])
    for given in inputs:
        if Path(given).is_dir():
            raise InputError(f"{given} is a folder; give one file, or pass --text to take it as a text.")
        if _PATH_LIKE.fullmatch(given.strip()):
            raise InputError(f"{given}: no such file. Check the path; to take it as a text, pass --text.")
    return None


def column_spec(value: Optional[str]):
    if value is None:
        return None
    return int(value) if value.lstrip("-").isdigit() else value


