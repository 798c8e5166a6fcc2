"""Defaults shared by the API and the CLI, in a module light enough for the CLI to import at start-up."""

DEFAULT_BATCH_SIZE = 32  # best measured on a 2-core CPU with length-sorted batches (README, performance)
