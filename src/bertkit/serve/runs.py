"""Served runs: trained run directories loaded with bertkit's safe loaders, each answering with its own predict."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..tasks.load import load_run
from ..tasks.runs import KIND_FEATURES, KIND_TOKEN, read_run_config


@dataclass
class ServedRun:
    """A loaded run under its URL name: `predict(texts)` gives JSON-ready labels or entities."""

    name: str
    kind: str
    model: Any  # TextClassifier | FineTunedClassifier | FineTunedTagger

    @property
    def labels(self) -> list[str]:
        classes = [str(c) for c in self.model.classes_]
        if self.kind == KIND_TOKEN:  # IOB2 tags → entity types
            return sorted({c[2:] for c in classes if c[:2] in ("B-", "I-")})
        return classes

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "labels": self.labels}

    def predict(self, texts: list[str]) -> list[dict]:
        """Labels with probabilities (classifiers) or entities with type, text, character span and score (taggers)."""
        if self.kind == KIND_TOKEN:
            return [
                {
                    "entities": [
                        {"type": e.type, "text": e.text, "start": e.char_start, "end": e.char_end, "score": e.score}
                        for e in entities
                    ]
                }
                for entities in self.model.predict(texts)
            ]
        probabilities = np.asarray(self.model.predict_proba(texts), dtype=np.float64)
        classes = [str(c) for c in self.model.classes_]
        results = []
        for row in probabilities:
            order = np.argsort(-row)
            results.append(
                {
                    "label": classes[int(order[0])],
                    "score": round(float(row[order[0]]), 6),
                    "probabilities": [{"label": classes[int(k)], "score": round(float(row[k]), 6)} for k in order],
                }
            )
        return results


def load_runs(directories: dict[str, Path]) -> dict[str, ServedRun]:
    """Load each run with `load_run` (safetensors only, no pickle); feature runs without the embedding cache."""
    served = {}
    for name, directory in directories.items():
        kind = read_run_config(directory)["kind"]
        options = {"cache": None} if kind == KIND_FEATURES else {}
        served[name] = ServedRun(name, kind, load_run(directory, **options))
    return served
