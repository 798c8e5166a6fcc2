"""Exceptions bertkit raises for user mistakes: the CLI prints their message, never a traceback."""

from __future__ import annotations


class BertkitError(Exception):
    """Base class: a problem the user can fix, with a message that says how."""


class ModelLoadError(BertkitError):
    """The model spec cannot be resolved or the model/tokenizer pair is unusable."""


class InputError(BertkitError, ValueError):
    """Bad input data or a bad option value (file, line, column, spec)."""
