"""The console entry point: every command registered, and the one boundary where errors become a single line."""

from __future__ import annotations

import sys
import warnings

from ..errors import BertkitError

# Each module registers its commands on `app`; this order is the order of `bertkit --help`.
from . import embed  # noqa: F401  (isort: skip)
from . import classify  # noqa: F401  (isort: skip)
from . import finetune  # noqa: F401  (isort: skip)
from . import tools  # noqa: F401  (isort: skip)
from .common import app, say


def main() -> None:
    """Console entry point: user mistakes become one 'error:' line and exit status 2."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            app()
        except BertkitError as exc:
            say(f"error: {exc}")
            sys.exit(2)
        except KeyboardInterrupt:
            say("interrupted.")
            sys.exit(130)
        finally:
            for warning in caught:
                if issubclass(warning.category, UserWarning):
                    say(f"warning: {warning.message}")


if __name__ == "__main__":
    main()
