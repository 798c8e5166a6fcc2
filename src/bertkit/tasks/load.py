"""Load any saved run: its `bertkit.json` says whether it is a feature classifier or a fine-tuned model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..records import record_kind
from .classify import TextClassifier
from .finetuned import FineTunedClassifier
from .qa import FineTunedQA
from .runs import KIND_FEATURES, read_run_config
from .tagger import FineTunedTagger

FINETUNED: dict[str, Any] = {run.KIND: run for run in (FineTunedClassifier, FineTunedTagger, FineTunedQA)}  # by kind
LOADERS: dict[str, Any] = {KIND_FEATURES: TextClassifier, **FINETUNED}


def load_run(directory: str | Path, **options: Any) -> Any:
    """Load a `TextClassifier`, `FineTunedClassifier`, `FineTunedTagger` or `FineTunedQA`, as the run directory says.

    Parameters
    ----------
    directory : str or Path
        A run written by `bertkit train`, `bertkit finetune`, `save_pretrained` or `finetune`; its `bertkit.json`
        names the kind.
    **options
        Passed to the loader: `threads`, `precision`, `device`; `cache` only to feature classifiers, `engine` only to
        fine-tuned runs (a feature classifier's encoder reads $BERTKIT_ENGINE).

    Returns
    -------
    TextClassifier or FineTunedClassifier or FineTunedTagger or FineTunedQA
        Ready to `predict` (a question-answering run: to `answer`).
    """
    kind = record_kind(read_run_config(directory))  # one of LOADERS: read_run_config refuses any other
    if kind != KIND_FEATURES:
        options.pop("cache", None)
    return LOADERS[kind].from_pretrained(directory, **options)  # type: ignore[index]
