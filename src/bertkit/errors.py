"""What bertkit says about user mistakes: the exceptions it raises (the CLI prints their message)."""

from __future__ import annotations

import os


class BertkitError(Exception):
    """Base class: a problem the user can fix, with a message that says how."""


class ModelLoadError(BertkitError):
    """The model spec cannot be resolved or the model/tokenizer pair is unusable."""


class InputError(BertkitError, ValueError):
    """Bad input data or a bad option value (file, line, column, spec)."""


class DamagedFileError(InputError):
    """A file bertkit wrote whose contents no longer match the digest it was written with."""


def add_note(exc: BaseException, note: str) -> None:
    """Attach a note (PEP 678) that the CLI appends to the error's one line; also on Python 3.10."""
    notes = getattr(exc, "__notes__", None)
    if notes is None:
        exc.__notes__ = notes = []
    notes.append(note)


def no_such_path(path: object) -> InputError:
    """Return the one message for a path that is not there, whoever notices (a reader, a run loader, the CLI)."""
    return InputError(f"{path}: no such file or directory; check the path (relative paths start at {os.getcwd()}).")


def is_a_folder(path: object) -> InputError:
    """Return the one message for a folder given where a file is wanted."""
    return InputError(f"{path}: is a directory; give a file path, not a directory.")


def check_whole(name: str, value: object, least: int, allow_none: bool = False, most: int | None = None) -> None:
    """Refuse, in one line, a value that is not a whole number from `least` (to `most`) (True is not one)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least or (most is not None and value > most):
        bounds = f"of at least {least}" if most is None else f"from {least} to {most}"
        raise InputError(f"{name}={value!r}: give a whole number {bounds}{', or None' if allow_none else ''}.")


def check_flag(name: str, value: object, allow_none: bool = False) -> None:
    """Refuse, in one line, a switch that is not True or False (a string such as "no" would count as True)."""
    if not isinstance(value, bool) and not (value is None and allow_none):
        raise InputError(f"{name}={value!r}: give True{', False or None' if allow_none else ' or False'}.")


def brief(value: object, limit: int = 200) -> str:
    """Cut a user's value or another library's message for bertkit's message: one line, at most `limit` characters."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quoted(value: object, limit: int = 80) -> str:
    """`repr(value)`, cut like `brief`: how a message shows a user's text, label or field."""
    return brief(repr(value), limit)
