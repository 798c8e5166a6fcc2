"""Every option two commands share, declared once; and the options generated from an option table's fields.

`from_fields` gives a command the fields of `EmbedOptions`, `AnswerOptions`, `FinetuneSettings` or `ServeSettings`
as options (help, choices and spelling from each field's metadata) and hands it the built value. The tables import
nothing heavy, so the command line is built whole at import and `bertkit --help` stays light.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from .common import apply_threads, existing_run, existing_runs, existing_text_file, utf8_texts

Model = Annotated[
    str | None, typer.Option("--model", "-m", help="Model: a local directory, a hub name, or omit for the default.")
]
Output = Annotated[Path | None, typer.Option("--output", "-o", help="Where to write (the command says what).")]
Overwrite = Annotated[bool, typer.Option("--overwrite", help="Replace what bertkit finds at -o (else refused).")]
Precision = Annotated[
    str | None,
    typer.Option(
        "--precision",
        help="fp32 | bf16 (GPUs; CPUs with native bf16) | fp16 (GPUs) | int8 (CPUs; bertkit quantize) | auto (the "
        "fastest that keeps a cosine of 0.99 to fp32 here: bertkit env says which).",
    ),
]
Device = Annotated[str, typer.Option("--device", help="auto (a GPU when there is one) | cpu | cuda | cuda:N | mps.")]
Threads = Annotated[int | None, typer.Option("--threads", callback=apply_threads, help="Torch threads.")]
BatchSize = Annotated[
    int | None, typer.Option("--batch-size", "-b", help="Texts per forward pass (default: 32 on a CPU; a GPU's fill).")
]
MaxLength = Annotated[int | None, typer.Option("--max-length", help="Tokens per text (default: the model's).")]
Header = Annotated[
    bool | None, typer.Option("--header/--no-header", help="Line 1 is a header (default: when the columns are names).")
]
TextColumn = Annotated[
    str | None, typer.Option("--text-column", "-c", help="Text column: index or name (JSONL: field).")
]
PairColumn = Annotated[str | None, typer.Option("--pair-column", help="Pair models: the second text's column.")]
LabelColumn = Annotated[str | None, typer.Option("--label-column", help="Label column: index or name.")]
Limit = Annotated[int | None, typer.Option("--limit", help="Use only the first N rows (0 = all).")]
Seed = Annotated[int, typer.Option("--seed", help="Random seed.")]
Dev = Annotated[
    Path | None, typer.Option("--dev", callback=existing_text_file, help="Dev file (default: a held-out share).")
]
CacheDir = Annotated[Path | None, typer.Option("--cache-dir", help="Embedding cache (default ~/.cache/bertkit).")]
NoCache = Annotated[bool, typer.Option("--no-cache", help="Do not read or write the embedding cache.")]
AsText = Annotated[bool, typer.Option("--text", help="Take the inputs as texts, even one that names a file.")]
Pair = Annotated[str | None, typer.Option("--pair", callback=utf8_texts, help="A second text read with the first.")]
Attributions = Annotated[
    bool,
    typer.Option(
        "--attributions", help="Say which words made each score (Integrated Gradients; about a second a text on a CPU)."
    ),
]
Json = Annotated[bool, typer.Option("--json", help="With --attributions: one JSON object per line, not a table.")]
TopK = Annotated[int | None, typer.Option("--top-k", "-k", help="Results per query, best first.")]
Calibration = Annotated[
    Path | None,
    typer.Option("--calibration", callback=existing_text_file, help="int8 calibration texts (default: bertkit's)."),
]
MapTexts = Annotated[bool, typer.Option("--map-texts/--no-map-texts", help="The map shows training sentences.")]
Runs = Annotated[
    list[str] | None,
    typer.Option(
        "--run",
        metavar="[NAME=]DIR",
        callback=existing_runs,
        help="A run or probe directory (NAME: the folder's "
        "name by default); repeatable. serve: answers /predict/NAME; a probe shows on the page.",
    ),
]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Show warnings and errors only (no progress bar).")]
Metric = Annotated[
    str | None,
    typer.Option(
        "--metric",
        help="cosine | dot | euclidean (| manhattan: exact search only); default: the model's similarity, else cosine.",
    ),
]
C = Annotated[float | None, typer.Option("--C", help="Regularisation C (default: chosen by cross-validation).")]
Run = Annotated[
    Path, typer.Argument(callback=existing_run, help="A run directory of `bertkit train` or `bertkit finetune`.")
]
Generated = Annotated[Any, typer.Option(hidden=True, parser=str)]  # the value `from_fields` builds

ALIASES = {"layers": ("-l",), "pooling": ("-p",), "batch_size": ("-b",), "top_k": ("-k",)}


def flag_of(field: dataclasses.Field) -> str:
    """Return an option table field's command-line flag ('--normalize/--no-normalize' for a switch)."""
    return field.metadata.get("flag") or f"--{field.name.replace('_', '-')}"


def _parameter(
    field: dataclasses.Field, hint: Any, annotated: Any, defaults: dict[str, Any], group: str | None
) -> inspect.Parameter:
    """Make the option of one field: its flag (or `--field-name`), aliases, help, choices and the command's default.

    The help is the field's metadata's, or a request model's field description (in its `annotated` type hint).
    """
    meta, listed, repeated = field.metadata, typing.get_origin(hint) is list, typing.get_origin(hint) is tuple
    default = None if listed or repeated or field.default is dataclasses.MISSING else field.default
    described = [getattr(extra, "description", None) for extra in getattr(annotated, "__metadata__", ())]
    help = meta.get("help") or next(filter(None, described), "")
    if field.name in defaults:  # the command's default is shown by typer; the field's own is not this command's
        default, help = defaults[field.name], help.split("; default:")[0].rstrip(".") + "."
    decls = [flag_of(field), *ALIASES.get(field.name, ())]
    metavar = meta.get("metavar") or ("|".join(meta["choices"]) if meta.get("choices") else None)
    extra = {"metavar": metavar} if metavar else {}
    if hint in (str, str | None):
        extra["callback"] = utf8_texts
    option = typer.Option(*decls, help=help, rich_help_panel=group, **extra)
    kind = str | None if listed else list[str] | None if repeated else hint  # a list comma-separated, a tuple repeated
    keyword = inspect.Parameter.KEYWORD_ONLY
    return inspect.Parameter(field.name, keyword, default=default, annotation=Annotated[kind, option])


def from_fields(
    table: type,
    into: str,
    only: tuple[str, ...] = (),
    build: str | bool = False,
    defaults: dict | None = None,
    group: str | None = None,
    lead: tuple[str, ...] = (),
) -> Callable[[Callable], Callable]:
    """Give a command one option per field of the option table `table` (`only` these), as its parameter `into`.

    The command declares `into: Generated`; it receives the table made of the given values, or with `build` a
    function that makes of them, and of the keywords it is called with, the table (`build=True`: a table with fields
    the command fills) or a heavy class ('module:Class'), for the command to call after its cheap checks.
    `defaults` are the command's own defaults of some fields (`train`'s layers and pooling are the features').
    `group` is the --help group of the fields' options, but those in `lead`, listed first (`common.GroupedHelp`).
    """
    hints, annotated = typing.get_type_hints(table), typing.get_type_hints(table, include_extras=True)
    fields = [f for f in dataclasses.fields(table) if f.name in only or (not only and "help" in f.metadata)]
    grouped = {f.name: "Options" if f.name in lead else group for f in fields}
    generated = [_parameter(f, hints[f.name], annotated[f.name], defaults or {}, grouped[f.name]) for f in fields]

    def decorate(command: Callable) -> Callable:
        light = inspect.signature(command, eval_str=True)

        @functools.wraps(command, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
        def run(**values: Any) -> Any:
            given = {f.name: value for f in fields if (value := values.pop(f.name, None)) is not None}
            for name in given:
                if typing.get_origin(hints[name]) is list:
                    given[name] = [part.strip() for part in given[name].split(",") if part.strip()]
                elif typing.get_origin(hints[name]) is tuple:
                    given[name] = tuple(given[name])
            if not build:
                return command(**values, **{into: table(**given)})
            module, _, name = build.partition(":") if isinstance(build, str) else (None, "", None)
            made = getattr(importlib.import_module(module), name) if module else table
            return command(**values, **{into: functools.partial(made, **given)})

        parameters = [p for p in light.parameters.values() if p.name != into] + generated
        run.__signature__ = light.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate
