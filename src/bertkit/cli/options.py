"""Every option two commands share, declared once; and the options generated from a settings class's fields.

`from_fields` gives a command the fields of `EmbedOptions` or `FinetuneSettings` as options (help, choices and
spelling from each field's metadata) and hands it the built value. The fields are read only when the command runs or
shows its help (their modules load torch or transformers): `bertkit --help` stays light.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import sys
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
        "--precision", help="fp32 | bf16 (GPUs; CPUs with native bf16) | fp16 (GPUs) | int8 (CPUs; bertkit quantize)."
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
Column = Annotated[str | None, typer.Option("--column", "-c", help="Text column: index or name (JSONL: field).")]
TextColumn = Annotated[str | None, typer.Option("--text-column", help="Text column: index or name (default 0).")]
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
TopK = Annotated[int | None, typer.Option("--top-k", "-k", help="Results per query, best first.")]
Calibration = Annotated[
    Path | None,
    typer.Option("--calibration", callback=existing_text_file, help="int8 calibration texts (default: bertkit's)."),
]
Task = Annotated[str, typer.Option("--task", help="text | token (pair and qa: finetune).")]
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
_CHOSEN: set[str] = set()  # commands whose options are generated besides the one in sys.argv ("*": every one)


def generate_for(name: str = "*") -> None:
    """Generate the options of command `name` (default: of every one, for the docs' CLI reference) from now on."""
    _CHOSEN.add(name)


def _load(path: str) -> Any:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _parameter(field: dataclasses.Field, hint: Any, defaults: dict[str, Any]) -> inspect.Parameter:
    """Make the option of one field: its flag (or `--field-name`), aliases, help, choices and the command's default."""
    meta, listed, repeated = field.metadata, typing.get_origin(hint) is list, typing.get_origin(hint) is tuple
    default = None if listed or repeated or field.default is dataclasses.MISSING else field.default
    help = meta["help"]
    if field.name in defaults:  # the command's default is shown by typer; the field's own is not this command's
        default, help = defaults[field.name], help.split("; default:")[0].rstrip(".") + "."
    decls = [meta.get("flag") or f"--{field.name.replace('_', '-')}", *ALIASES.get(field.name, ())]
    extra = {"metavar": "|".join(meta["choices"])} if meta.get("choices") else {}
    if meta.get("metavar"):
        extra["metavar"] = meta["metavar"]
    if hint in (str, str | None):
        extra["callback"] = utf8_texts
    option = typer.Option(*decls, help=help, **extra)
    kind = str | None if listed else list[str] | None if repeated else hint  # a list comma-separated, a tuple repeated
    keyword = inspect.Parameter.KEYWORD_ONLY
    return inspect.Parameter(field.name, keyword, default=default, annotation=Annotated[kind, option])


def from_fields(
    source: str, into: str, only: tuple[str, ...] = (), build: str | None = None, defaults: dict | None = None
) -> Callable[[Callable], Any]:
    """Give a command one option per field of the class at `source` ('module:Class'; `only` these), as `into`.

    The command declares `into: Generated`; it receives the source class made of the given values, or with `build`
    (a heavy class) a function that makes `build` of them, for the command to call after its cheap checks.
    `defaults` are the command's own defaults of some fields (`train`'s layers and pooling are the features').
    """

    def decorate(command: Callable) -> Any:
        return _FieldsCommand(command, source, into, only, build or source, defaults or {})

    return decorate


class _FieldsCommand:
    """A command whose signature gains the generated options when it is the one invoked (or the docs ask)."""

    def __init__(
        self, command: Callable, source: str, into: str, only: tuple[str, ...], build: str, defaults: dict
    ) -> None:
        functools.update_wrapper(self, command, assigned=("__module__", "__name__", "__qualname__", "__doc__"))
        self.command, self.source, self.into, self.only, self.build = command, source, into, only, build
        self.defaults = defaults

    def _fields(self) -> list[inspect.Parameter]:
        cls = _load(self.source)
        hints = typing.get_type_hints(cls)
        chosen = [f for f in dataclasses.fields(cls) if "help" in f.metadata and f.name in (self.only or [f.name])]
        return [_parameter(f, hints[f.name], self.defaults) for f in chosen]

    @functools.cached_property
    def _light(self) -> inspect.Signature:
        return inspect.signature(self.command, eval_str=True)

    @property
    def __annotations__(self) -> dict[str, Any]:  # type: ignore[override]
        return {name: p.annotation for name, p in self.__signature__.parameters.items()}

    @property
    def __signature__(self) -> inspect.Signature:  # noqa: D105
        light = [p for p in self._light.parameters.values() if p.name != self.into]
        if not ({"*", self.__name__} & (_CHOSEN | set(sys.argv[1:]))):
            return self._light.replace(parameters=light)
        return self._light.replace(parameters=light + self._fields())

    def __call__(self, **values: Any) -> Any:
        names = {p.name for p in self._fields()}
        given = {k: v for k, v in values.items() if k in names and v is not None}
        hints = typing.get_type_hints(_load(self.source))
        for name in [n for n in given if typing.get_origin(hints[n]) is list]:
            given[name] = [part.strip() for part in given[name].split(",") if part.strip()]
        for name in [n for n in given if typing.get_origin(hints[n]) is tuple]:
            given[name] = tuple(given[name])
        rest = {k: v for k, v in values.items() if k not in names}
        if self.build != self.source:  # a heavy class (transformers'): made when the command has done its cheap checks
            return self.command(**rest, **{self.into: lambda: _load(self.build)(**given)})
        return self.command(**rest, **{self.into: _load(self.source)(**given)})
