"""The cli wing: the `bertkit` command line, one module per command group, thin over the library.

May import every other wing; nothing imports it.
"""

from .common import app
from .main import main

__all__ = ["app", "main"]
