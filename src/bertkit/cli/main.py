"""The console entry point: every command registered, and the one boundary where errors become a single line."""

from __future__ import annotations

import sys
import warnings
from importlib import import_module

from .common import app, say, stop_showing_logs, verbosity
from .errors import user_message

# Each module registers its commands on `app`; this order is the order of `bertkit --help`.
for _module in ("embed", "search", "classify", "runs", "finetune", "qa", "tools", "quantize", "serve", "explain"):
    import_module(f".{_module}", __package__)


def main() -> None:
    """Run the console entry point: a user's mistake becomes one 'error:' line and exit status 2."""
    with warnings.catch_warnings():
        warnings.simplefilter("default" if verbosity() == "verbose" else "ignore")  # other libraries' warnings
        try:
            app()
        except KeyboardInterrupt:
            say("interrupted.")
            sys.exit(130)
        except Exception as exc:  # the one CLI boundary: user-fixable errors become one line, bugs keep their traceback
            message = user_message(exc)
            if message is None:
                raise
            say(f"error: {message}")
            sys.exit(2)
        finally:
            stop_showing_logs()


if __name__ == "__main__":
    main()
