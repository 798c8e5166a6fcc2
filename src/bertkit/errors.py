"""Exceptions bertkit raises for user mistakes: the CLI prints their message, never a traceback."""

from __future__ import annotations


class BertkitError(Exception):
    """Base class: a problem the user can fix, with a message that says how."""


class ModelLoadError(BertkitError):
    """The model spec cannot be resolved or the model/tokenizer pair is unusable."""


class InputError(BertkitError, ValueError):
    """Bad input data or a bad option value (file, line, column, spec)."""


def add_note(exc: BaseException, note: str) -> None:
    """Attach a note (PEP 678) that the CLI appends to the error's one line; also on Python 3.10."""
    notes = getattr(exc, "__notes__", None)
    if notes is None:
        exc.__notes__ = notes = []
    notes.append(note)
