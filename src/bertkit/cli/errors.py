"""Turn the exceptions a user can cause into one line: which path, what is wrong, what to do."""

from __future__ import annotations

import errno
import os
import sys

from ..errors import BertkitError, brief

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
    errno.EEXIST: ("already exists", "choose another name or remove it"),
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
