"""`python -m bertkit.cli` runs the command line."""

from .main import main

main()
