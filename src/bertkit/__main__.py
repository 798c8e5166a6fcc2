"""`python -m bertkit` runs the command line."""

from .cli.main import main

main()
