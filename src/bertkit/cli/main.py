"""The console entry point: every command registered, and the one boundary where errors become a single line."""

from __future__ import annotations

import errno
import os
import re
import shlex
import sys
import warnings
from importlib import import_module
from typing import Annotated

import typer

from ..errors import BertkitError, brief
from .common import app, say, show_logs, stop_showing_logs, verbosity
from .options import Quiet


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"bertkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version, exit.")
    ] = False,
    quiet: Quiet = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Debug messages, other libraries' too (Ray, transformers).")
    ] = False,
) -> None:
    """Set the root options (the app's `help` is what `bertkit --help` shows)."""
    show_logs("verbose" if verbose else "quiet" if quiet else "normal")


# Each module registers its commands on `app`; this order is the order of `bertkit --help`.
for _module in ("embed", "search", "classify", "runs", "finetune", "qa", "tools", "quantize", "serve", "explain"):
    import_module(f".{_module}", __package__)


# errno → (what is wrong, what to do)
_OS_ADVICE = {
    errno.ENOENT: ("no such file or directory", "check the path (relative paths start at {cwd})"),
    errno.EACCES: ("permission denied", "choose a location you may use, or change its permissions"),
    errno.EPERM: ("operation not permitted", "choose a location you may use, or change its permissions"),
    errno.EISDIR: ("is a directory", "give a file path, not a directory"),
    errno.ENOTDIR: ("a part of this path is a file, not a directory", "check the path"),
    errno.ENOSPC: ("no space left on the device", "free some space or write somewhere else"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or write somewhere else"),
    errno.EROFS: ("read-only file system", "write somewhere else"),
    errno.ENAMETOOLONG: ("file name too long", "use a shorter name"),
    errno.EEXIST: ("already exists", "choose another name (bertkit leaves what is there as it is)"),
}


def describe_os_error(exc: OSError) -> str:
    """'PATH: what is wrong; what to do.' for any OSError (file missing, no permission, disk full, ...)."""
    path = exc.filename if exc.filename is not None else "a file"
    if exc.filename2 is not None:
        path = f"{exc.filename} → {exc.filename2}"
    problem, advice = _OS_ADVICE.get(exc.errno, (exc.strerror or str(exc), "check the path and try again"))
    notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
    return f"{path}: {problem}; {advice.format(cwd=os.getcwd())}{notes}."


def user_message(exc: BaseException) -> str | None:
    """Return the one-line message for an error the user can fix, or None for a bug (which keeps its traceback)."""
    if isinstance(exc, BertkitError):
        return str(exc)
    if isinstance(exc, OSError):
        return describe_os_error(exc)
    safetensors = sys.modules.get("safetensors")  # not imported here: `bertkit --help` must stay light
    if safetensors is not None and isinstance(exc, safetensors.SafetensorError):
        return (
            f"a .safetensors file is damaged or is not safetensors ({brief(exc)}); copy or save the model directory "
            "again (transformers: save_pretrained(DIR, safe_serialization=True))."
        )
    return None


# `name=value` as the library words an option, as a word of its own (not inside a path or URL): a value quoted, or
# running (without a slash) to a space, comma, colon or sentence end
_ASSIGNMENT = re.compile(
    r"(?:^|(?<=[\s(]))([a-z][a-z0-9_]*)=('[^']*'|\"[^\"]*\"|[^\s,;:)'\"/]*?)(?=[\s,;:)]|\.?$|\.\s)"
)


def in_flags(message: str, argv: list[str]) -> str:
    """Word the library's `name=value` as the command line says it: `--long-text window`, `--truncate-dim 9999`.

    Only names that are options of the command in `argv` change.
    """
    import typer.main

    name = next((argument for argument in argv if not argument.startswith("-")), "")
    command = getattr(typer.main.get_command(app), "commands", {}).get(name)
    options = {param.name: param for param in getattr(command, "params", ()) if param.param_type_name == "option"}

    def as_flag(match: re.Match) -> str:
        option, quoted = options.get(match[1]), match[2][:1] in ("'", '"')
        value = match[2][1:-1] if quoted else match[2]
        if option is None:
            return match[0]
        if option.is_bool_flag:  # True: the flag; False: its --no- form, where it has one
            switch = option.opts if value == "True" else option.secondary_opts if value == "False" else []
            return switch[0] if switch else match[0]
        flag = next((flag for flag in option.opts if flag.startswith("--")), option.opts[0])
        return f"{flag} {shlex.quote(value)}" if value or quoted else flag

    return _ASSIGNMENT.sub(as_flag, message)


def _exit_now_if_passes_run(code: int) -> None:
    """End the process at once when forward passes still run in native code (Ctrl-C must not wait for them).

    Python's exit would join their threads, and a pass stuck in a native library would hold the exit forever.
    """
    threads = sys.modules.get("bertkit.encoder.threads")
    if threads is not None and threads.passes_in_flight():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    """Run the console entry point: a user's mistake becomes one 'error:' line and exit status 2."""
    with warnings.catch_warnings():
        warnings.simplefilter("default" if verbosity() == "verbose" else "ignore")  # other libraries' warnings
        try:
            app()
        except KeyboardInterrupt:
            say("interrupted.", warning=True)
            _exit_now_if_passes_run(130)
            sys.exit(130)
        except SystemExit as exc:  # Typer ends a Ctrl-C with status 130 and no word; commands with more to say exit
            if exc.code == 130 and isinstance(getattr(exc.__context__, "__cause__", None), KeyboardInterrupt):
                say("interrupted.", warning=True)
            if exc.code == 130:
                _exit_now_if_passes_run(130)
            raise
        except Exception as exc:  # the one CLI boundary: user-fixable errors become one line, bugs keep their traceback
            message = user_message(exc)
            if message is None:
                raise
            say(f"error: {in_flags(message, sys.argv[1:])}", warning=True)
            sys.exit(2)
        finally:
            stop_showing_logs()


if __name__ == "__main__":
    main()
