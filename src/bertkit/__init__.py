"""bertkit: pre-trained BERT-family encoders for tokenization, embeddings, classification and fine-tuning.

The public names are imported on first use (PEP 562), so `import bertkit` and the command line start without
loading torch, transformers or scikit-learn until a command needs them.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from .errors import BertkitError, InputError, ModelLoadError

try:
    __version__ = version("bertkit")
except PackageNotFoundError:  # pragma: no cover - running from a source tree that was never installed
    __version__ = "0+unknown"

_LAZY = {
    "Batch": "encoder.tokenize",
    "BertVectorizer": "tasks.vectorizer",
    "EmbedOptions": "encoder.options",
    "EmbedReport": "encoder.results",
    "EmbedResult": "encoder.results",
    "Encoder": "encoder.encode",
    "Entity": "tasks.tagging",
    "FineTunedClassifier": "tasks.finetuned",
    "FineTunedQA": "tasks.qa",
    "FineTunedTagger": "tasks.tagger",
    "FinetuneArguments": "tasks.finetune",
    "ForwardOutput": "encoder.encode",
    "LayerSelection": "encoder.layers",
    "TextClassifier": "tasks.classify",
    "TokenEmbedding": "encoder.results",
    "VectorIndex": "tasks.index",
    "attribute_prediction": "tasks.attributions",
    "attribute_similarity": "encoder.attribution",
    "build_index": "tasks.index_build",
    "distill": "tasks.distill",
    "entity_scores": "tasks.tagging",
    "finetune": "tasks.finetune",
    "load_index": "tasks.index",
    "load_run": "tasks.load",
    "parse_layers": "encoder.layers",
    "probe_text": "tasks.probe",
    "probe_token": "tasks.probe",
    "read_squad": "io.squad",
    "read_tagged": "io.conll",
    "semantic_search": "tasks.search",
    "set_threads": "encoder.threads",
    "similarity": "tasks.search",
    "text_coverage": "encoder.coverage",
}

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these come from __getattr__
    from .encoder.attribution import attribute_similarity
    from .encoder.coverage import text_coverage
    from .encoder.encode import Encoder, ForwardOutput
    from .encoder.layers import LayerSelection, parse_layers
    from .encoder.options import EmbedOptions
    from .encoder.results import EmbedReport, EmbedResult, TokenEmbedding
    from .encoder.threads import set_threads
    from .encoder.tokenize import Batch
    from .io.conll import read_tagged
    from .io.squad import read_squad
    from .tasks.attributions import attribute_prediction
    from .tasks.classify import TextClassifier
    from .tasks.distill import distill
    from .tasks.finetune import FinetuneArguments, finetune
    from .tasks.finetuned import FineTunedClassifier
    from .tasks.index import VectorIndex, load_index
    from .tasks.index_build import build_index
    from .tasks.load import load_run
    from .tasks.probe import probe_text, probe_token
    from .tasks.qa import FineTunedQA
    from .tasks.search import semantic_search, similarity
    from .tasks.tagger import FineTunedTagger
    from .tasks.tagging import Entity, entity_scores
    from .tasks.vectorizer import BertVectorizer


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'bertkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted([*_LAZY, "BertkitError", "InputError", "ModelLoadError"])
