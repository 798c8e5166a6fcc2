"""Load any saved run: its `bertkit.json` says whether it is a feature classifier or a fine-tuned model."""

from __future__ import annotations

from pathlib import Path

from ..errors import ModelLoadError
from .classify import TextClassifier
from .finetuned import FineTunedClassifier, FineTunedTagger
from .runs import KIND_FEATURES, KIND_TEXT, KIND_TOKEN, read_run_config

LOADERS = {KIND_FEATURES: TextClassifier, KIND_TEXT: FineTunedClassifier, KIND_TOKEN: FineTunedTagger}


def load_run(directory: str | Path, **options):
    """A `TextClassifier`, `FineTunedClassifier` or `FineTunedTagger`, as the run directory says.

    `options` go to the loader (`threads`, `precision`, `device`; `cache` only to feature classifiers).
    """
    kind = read_run_config(directory).get("kind")
    if kind not in LOADERS:
        raise ModelLoadError(
            f"{directory}: unknown run kind {kind!r} (known: {', '.join(LOADERS)}); was it written by a newer bertkit?"
        )
    if kind != KIND_FEATURES:
        options.pop("cache", None)
    return LOADERS[kind].load(directory, **options)
