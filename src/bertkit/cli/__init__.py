"""The cli wing: the `bertkit` command line, one module per command group, thin over the library.

May import every other wing; nothing imports it. Library imports sit inside the commands: `bertkit --help` and each
command load only what they use (start-up speed).
"""

from typing import Any

from .common import app
from .main import main

__all__ = ["app", "click_command", "main"]


def __getattr__(name: str) -> Any:
    """Build `click_command`, the click command behind `app`, on first use (the docs' CLI reference reads it)."""
    if name == "click_command":
        import typer.main

        return typer.main.get_command(app)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
