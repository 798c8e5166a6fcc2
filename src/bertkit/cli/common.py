"""What every command shares: the Typer app, common options, and small helpers (encoder, messages, column specs)."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import InputError, brief, is_a_folder, no_such_path

if TYPE_CHECKING:
    from ..encoder.attribution import Attribution
    from ..encoder.encode import Encoder


# --help groups, in the order they are shown, with the flags they hold in every command; a flag in none is among
# those a new user needs first. A generated option table's fields name their group (`options.from_fields`).
EMBEDDING, TRAINING = "Embedding options", "Training"
GROUPS = {
    "Options": "",
    EMBEDDING: "",
    TRAINING: "",
    "Reading the input": "--header --id-column --format --chunk-rows --pair-column --label-column --limit "
    "--label-separator",
    "Speed, device and precision": "--batch-size --threads --precision --device --calibration --cache-dir --no-cache",
    "Ray": "--engine --address --actors --gpus-per-actor",
}
GROUP_OF = {flag: group for group, flags in GROUPS.items() for flag in flags.split()}


class GroupedHelp(typer.core.TyperCommand):
    """A command whose --help lists first the options a new user needs, then each group of the others.

    An option's group is its flag's in `GROUPS`, or the one its option table gives it (typer's `rich_help_panel`,
    which typer shows only with Rich, off here).
    """

    def format_options(self, ctx: typer.Context, formatter: Any) -> None:
        """Write the arguments, the options a new user needs, then each group of the others (`GROUPS` order)."""
        arguments, groups = [], {"Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.param_type_name == "argument":
                arguments.append(record)
            elif record is not None:
                group = getattr(param, "rich_help_panel", None) or GROUP_OF.get(param.opts[0], "Options")
                groups.setdefault(group, []).append(record)
        ordered = sorted(groups.items(), key=lambda group: list(GROUPS).index(group[0]))
        for title, rows in [("Arguments", arguments), *ordered]:
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class App(typer.Typer):
    """bertkit's Typer app: every command's help grouped (`GroupedHelp`)."""

    def command(self, *args: Any, **kwargs: Any) -> Callable:
        """Register a command, as `typer.Typer.command` does, with grouped help."""
        return super().command(*args, cls=GroupedHelp, **kwargs)


app = App(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: Rich's panels showed a `<bool>` type beside every flag
    help="Use pre-trained BERT-family encoders: inspect tokenization, extract embeddings, train classifiers, probe "
    "layers, fine-tune, serve.",
)


_VERBOSITY: dict = {"level": "normal", "chosen": False}  # chosen: the root options were parsed
_LEVELS = {"quiet": logging.WARNING, "normal": logging.INFO, "verbose": logging.DEBUG}


def show_logs(level: str) -> None:
    """Print the library's log records (logger `bertkit`) on stderr at `level`: quiet, normal or verbose."""
    _VERBOSITY.update(level=level, chosen=True)
    logger = logging.getLogger("bertkit")
    logger.setLevel(_LEVELS[level])
    if not any(isinstance(handler, _StderrHandler) for handler in logger.handlers):
        logger.addHandler(_StderrHandler())
        logger.propagate = False


def stop_showing_logs() -> None:
    """Undo `show_logs` (the command is over; in-process callers such as tests get the logger back as it was)."""
    logger = logging.getLogger("bertkit")
    for handler in [h for h in logger.handlers if isinstance(h, _StderrHandler)]:
        logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)
    logger.propagate = True
    _VERBOSITY.update(level="normal", chosen=False)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record comes (pytest's capsys and progress bars swap it).

    Records read as the command line says things: 'warning: ...' for warnings, the message otherwise.
    """

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno >= logging.WARNING:
            return f"{'error' if record.levelno >= logging.ERROR else 'warning'}: {record.getMessage()}"
        return record.getMessage()


def verbosity() -> str:
    """'quiet', 'normal' or 'verbose', as the root options chose (read from argv before Typer parses them).

    Once parsed, the choice is the root options' own: a command's `-q` (`rerank --query`) is not `bertkit -q`.
    """
    if _VERBOSITY["chosen"]:
        return _VERBOSITY["level"]
    arguments = sys.argv[1:]
    if "--verbose" in arguments or "-v" in arguments:
        return "verbose"
    return "quiet" if "--quiet" in arguments or "-q" in arguments else _VERBOSITY["level"]


def apply_threads(threads: int | None) -> int | None:
    """`--threads N`: torch's CPU threads for this process, set once, explicitly (`bertkit.set_threads`)."""
    if threads is not None:
        from ..encoder.threads import set_threads

        set_threads(threads)
    return threads


# Paths are checked as the command line is parsed, before torch or a model loads: a mistyped path costs no seconds.
def existing_text_file(value: Path | None) -> Path | None:
    """Typer callback: a file of texts must be there, be a file, and hold text (not a binary file)."""
    if value is not None:
        from ..io.text_files import check_text_file

        check_text_file(Path(value))
    return value


def existing_inputs(value: Path | None) -> Path | None:
    """Typer callback for embed's INPUT: a file as `existing_text_file`; a folder or glob (for Ray) is checked later."""
    import glob

    if value is not None and not glob.has_magic(str(value)) and not Path(value).is_dir():
        existing_text_file(value)
    return value


def existing_run(value: Path | None) -> Path | None:
    """Typer callback: a run directory must be there and hold its bertkit.json."""
    if value is not None:
        from ..tasks.runs import read_run_config

        read_run_config(value)
    return value


def existing_runs(values: list[str] | None) -> list[str] | None:
    """Typer callback for the repeatable `--run [NAME=]DIR`: well-formed, and every directory a run or a probe."""
    from ..tasks.runs import check_run_or_probe, parse_run_specs

    for directory in parse_run_specs(values or []).values():
        check_run_or_probe(directory)
    return values


def existing_indexes(values: list[str] | None) -> list[str] | None:
    """Typer callback for serve's repeatable `--index [NAME=]FILE`: well-formed, and every file there."""
    from ..tasks.runs import parse_run_specs

    for path in parse_run_specs(values or [], "--index").values():
        if not path.exists():
            raise no_such_path(path)
        if path.is_dir():
            raise is_a_folder(path)
    return values


def options_for(ctx: typer.Context, target: Callable, **values: Any) -> dict[str, Any]:
    """Return the command's parameters that `target` (a function or class) takes by name, then `values`.

    `--threads` is left out: its callback set it for the whole process (`apply_threads`).
    """
    import inspect

    names = inspect.signature(target).parameters.keys() - {"threads"}
    return {name: ctx.params[name] for name in names if name in ctx.params} | values


def echo_facts(facts: dict) -> None:
    """Print `facts` as aligned 'key  value' lines (info, env)."""
    width = max(len(key) for key in facts)
    for key, value in facts.items():
        typer.echo(f"{key.ljust(width)}  {value}")


def make_encoder(model: str | None, precision: str = "fp32", device: str = "auto") -> Encoder:
    """Load `model` (None: the packaged default) as an `Encoder` at `precision` on `device`."""
    from ..encoder.encode import Encoder

    return Encoder.from_pretrained(model, precision=precision, device=device)


def running_on(encoder: Encoder) -> str:
    """Say where a run ran, as its summary does: 'cpu, fp32' or 'cuda:0 (NVIDIA H100 80GB HBM3), fp16'."""
    from ..encoder.devices import describe

    return f"{describe(encoder.device)}, {encoder.precision}"


def say(message: str, warning: bool = False) -> None:
    """Print `message` on stderr; under `bertkit -q`, only a warning or an error."""
    if warning or verbosity() != "quiet":
        typer.echo(message, err=True)


def write_output(text: str, output: Path | None, done: str) -> None:
    """Print `text` on stdout, or write it atomically to `output` and say `done`."""
    from ..io.writers import atomic_path

    if output is None:
        typer.echo(text, nl=False)
        return
    with atomic_path(output) as temporary:
        temporary.write_text(text, encoding="utf-8")
    say(done)


def echo_attribution(attribution: Attribution, as_json: bool, **extra: Any) -> None:
    """Print an attribution: a table of each text's words and scores, or (`as_json`) one JSON line with `extra`."""
    if as_json:
        typer.echo(json.dumps({**extra, **attribution.to_dict()}, ensure_ascii=False))
    else:
        typer.echo(attribution.to_text() + "\n")


def check_attribution_flags(attributions: bool, as_json: bool, output: Path | None = None) -> None:
    """Refuse --json without --attributions, and --attributions with -o (attributions are printed)."""
    if as_json and not attributions:
        raise InputError("--json prints attributions as JSON: add --attributions.")
    if attributions and output is not None:
        raise InputError("--attributions prints its tables (or JSON with --json); leave out -o.")


def cache_option(no_cache: bool, cache_dir: Path | None) -> Path | None:
    """Return the embedding cache directory: None with `no_cache`, else `cache_dir` or the default one."""
    from ..io.cache import default_cache_dir

    return None if no_cache else cache_dir or default_cache_dir()


_PATH_LIKE = re.compile(r"\S*(/|\\)\S*|\S+\.(tsv|csv|jsonl|json|txt|text|parquet|conll|iob|gz)", re.IGNORECASE)


def path_kind(given: str) -> str | None:
    """'file' or 'folder' when a command-line argument names one, else None (a text too long for a path names none)."""
    if not given.strip():  # Path("") is ".", the current folder
        return None
    try:
        path = Path(given)
        return "file" if path.is_file() else "folder" if path.is_dir() else None
    except (OSError, ValueError):
        return None


def utf8_texts(value: str | list[str] | None) -> str | list[str] | None:
    """Typer callback for texts typed on the command line: bytes the locale could not decode are refused in one line.

    An argument that names an existing file is left to the command (a file name need not be UTF-8).
    """
    for text in [value] if isinstance(value, str) else value or []:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            if path_kind(text) == "file":
                continue
            shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise InputError(
                f"{brief(shown)}: character {exc.start + 1} is a byte that is not UTF-8 (this terminal's encoding "
                "is not UTF-8?); set a UTF-8 locale such as LANG=C.UTF-8, or put the text in a UTF-8 file."
            ) from None
    return value


def texts_or_file(inputs: list[str], as_text: bool) -> Path | None:
    """Return the file to read when `inputs` is one existing file; None when they are texts.

    An input that looks like a file name (an extension such as .tsv or a path separator, and no spaces) but is not
    there is refused unless `--text` marks it as a text: it is a mistyped path far more often.
    """
    if as_text:
        return None
    if len(inputs) == 1 and path_kind(inputs[0]) == "file":
        return Path(inputs[0])
    for given in inputs:
        if path_kind(given) == "folder":
            raise InputError(f"{brief(given)} is a folder; give one file, or pass --text to take it as a text.")
        if _PATH_LIKE.fullmatch(given.strip()):
            raise InputError(f"{brief(given)}: no such file. Check the path; to take it as a text, pass --text.")
    return None
