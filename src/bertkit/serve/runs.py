"""Served runs: trained run directories loaded with bertkit's safe loaders, each answering with its own predict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..records import record_kind
from ..tasks.load import load_run
from ..tasks.runs import KIND_FEATURES, KIND_QA, KIND_TOKEN, read_run_config


@dataclass
class ServedRun:
    """A loaded run under its URL name: `predict` gives JSON answers; a pair run (a cross-encoder) also reranks."""

    name: str
    kind: str
    model: Any  # TextClassifier | FineTunedClassifier | FineTunedTagger

    @property
    def labels(self) -> list[str]:
        """The run's labels: its classes, a tagger's entity types, none for question answering."""
        if self.kind == KIND_QA:  # answers are spans of the context
            return []
        classes = [str(c) for c in self.model.classes_]
        if self.kind == KIND_TOKEN:  # IOB2 tags → entity types
            return sorted({c[2:] for c in classes if c[:2] in ("B-", "I-")})
        return classes

    @property
    def problem(self) -> str:
        """What the run does: a sequence model's `problem`, token_classification or question_answering."""
        problems = {KIND_TOKEN: "token_classification", KIND_QA: "question_answering"}
        return problems.get(self.kind) or getattr(self.model, "problem", "single_label_classification")

    @property
    def takes_pairs(self) -> bool:
        """Whether the run reads text pairs (a cross-encoder)."""
        return getattr(self.model, "takes_pairs", False) is True

    @property
    def ranks(self) -> bool:
        """A pair model that gives one score per pair: a regressor or a two-class classifier."""
        return self.takes_pairs and (self.problem == "regression" or len(self.labels) == 2)

    def describe(self) -> dict:
        """Describe the run as /info lists it: name, kind, labels, problem, pairs, reranks."""
        return {
            "name": self.name,
            "kind": self.kind,
            "labels": self.labels,
            "problem": self.problem,
            "pairs": self.takes_pairs,
            "reranks": self.ranks,
        }

    def predict(self, inputs: list) -> list[dict]:
        """Predict JSON-ready answers for `inputs`.

        Labels with probabilities (classifiers), a score (regressors), labels over the threshold (multi-label), or
        entities with type, text, character span and score (taggers).
        """
        if self.kind == KIND_TOKEN:
            return [{"entities": [_entity(e) for e in entities]} for entities in self.model.predict(inputs)]
        if self.problem == "regression":
            return [{"score": round(float(score), 6)} for score in self.model.predict(inputs)]
        probabilities = np.asarray(self.model.predict_proba(inputs), dtype=np.float64)
        classes = [str(c) for c in self.model.classes_]
        scored = [[{"label": c, "score": round(float(p), 6)} for c, p in zip(classes, row)] for row in probabilities]
        if self.problem == "multi_label_classification":  # the threshold applies to the unrounded probabilities
            chosen = [[c for c, p in zip(classes, row) if p >= self.model.threshold] for row in probabilities]
            return [{"labels": labels, "probabilities": row} for labels, row in zip(chosen, scored)]
        ranked = [[row[k] for k in np.argsort(-p)] for p, row in zip(probabilities, scored)]
        return [{**labels[0], "probabilities": labels} for labels in ranked]


def _entity(e: Any) -> dict:
    """One entity a tagger found, as the service answers it: type, text, character span and score."""
    return {"type": e.type, "text": e.text, "start": e.char_start, "end": e.char_end, "score": e.score}


def load_runs(directories: dict[str, Path]) -> dict[str, ServedRun]:
    """Load each run with `load_run` (safetensors only, no pickle); feature runs without the embedding cache."""
    served = {}
    for name, directory in directories.items():
        kind = record_kind(read_run_config(directory))
        options = {"cache": None} if kind == KIND_FEATURES else {}
        served[name] = ServedRun(name, kind, load_run(directory, **options))
    return served
