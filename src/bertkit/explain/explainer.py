"""The explainer's state: one encoder, the served runs and probe tables; `explain` answers every panel for one sentence.

A panel whose options are wrong carries its own error message; only a bad sentence fails the whole request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from cachetools import FIFOCache
from sklearn.decomposition import PCA

from ..encoder.attribution import DEFAULT_STEPS, Attribution, attribute_similarity
from ..encoder.encode import Encoder
from ..errors import BertkitError, InputError
from ..io.readers import column_spec, read_labelled, sample_path
from ..records import read_record
from ..tasks.attributions import attribute_prediction
from ..tasks.classify import TextClassifier
from ..tasks.load import load_run
from ..tasks.runs import PROBE_FILE, parse_run_specs
from . import views
from .request import MAX_CHARS, ExplainRequest

MAP_ROWS = 400  # training sentences drawn on the map (evenly spaced rows of the run's data)
SAMPLE = "reviews.tsv"
ATTRIBUTION_PASSES = 3 * (DEFAULT_STEPS + 2)  # an attribution's work, in passes of its input
RECENT = 16  # sentences whose feature vectors are kept (map and prediction of one request share them)


@dataclass
class MapData:
    """A feature run's training sentences in 2-D: PCA, points, source (no path), whether the texts may be shown."""

    pca: PCA
    points: np.ndarray
    labels: list[str]
    texts: list[str]
    source: str
    public: bool = False


@dataclass
class Explainer:
    """An encoder plus named runs (classifiers, taggers) and probe records, with a cache of each run's map.

    `map_texts`: the map panel carries a run's training sentences (for the hover text); off, it carries only points
    and labels, so that a served page does not hand out the training data (bertkit's sample reviews always show).
    """

    encoder: Encoder
    runs: dict = field(default_factory=dict)
    probes: dict = field(default_factory=dict)
    map_texts: bool = False
    _maps: dict = field(default_factory=dict)
    _recent: FIFOCache = field(default_factory=lambda: FIFOCache(RECENT))  # (run, text) → features, the last few
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_paths(
        cls,
        model: str | None = None,
        run_dirs: list[str] | None = None,
        encoder: Encoder | None = None,
        device: str | None = "auto",
    ) -> Explainer:
        """Load the encoder and each `[name=]DIR` (a run, or a `bertkit probe` output), all on `device`."""
        explainer = cls(encoder or Encoder.from_pretrained(model, device=device))
        for name, directory in parse_run_specs(list(run_dirs or [])).items():
            probe = load_probe(directory)
            if probe is not None:
                explainer.probes[name] = probe
            else:
                explainer.runs[name] = load_run(directory, device=device)
        return explainer

    def info(self) -> dict:
        """Return what the page needs before the first sentence: model facts, runs by kind, probe names."""
        facts = self.encoder.info()
        keys = ("architecture", "layers", "hidden_states", "hidden_size", "heads", "pooling", "max_length", "pooler")
        return {
            "model": model_name(self.encoder),
            **{key: facts["attention_heads" if key == "heads" else key] for key in keys},
            "limits": {"chars": MAX_CHARS, "tokens": min(views.MAX_TOKENS, self.encoder.max_length)},
            "runs": {name: run_kind(run) for name, run in self.runs.items()},
            "map_runs": [name for name, run in self.runs.items() if isinstance(run, TextClassifier)],
            "probes": list(self.probes),
        }

    def explain(self, settings: ExplainRequest, bounded: bool = True) -> dict:
        """Every panel for one sentence; each panel is its data or {"error": message}.

        Parameters
        ----------
        settings : ExplainRequest
            The sentence and what to show of it.
        bounded : bool
            Cap the token vectors and attention maps one answer carries (`views.MAX_VECTOR_LAYERS`,
            `views.MAX_ATTENTION_MAPS`); the offline page of `bertkit explain` asks for every one.

        Returns
        -------
        dict
            One entry per panel, plus the settings used.
        """
        if settings.pooling is None:  # the model's own pooling: the vector `Encoder.embed` and `/embed` give
            settings = replace(settings, pooling=self.encoder.info()["pooling"])
        text, encoder = settings.text, self.encoder
        map_run = self._map_run(settings)
        limits = (views.MAX_VECTOR_LAYERS, views.MAX_ATTENTION_MAPS) if bounded else (None, None)
        shown = (settings.layer, settings.attention_layer, settings.head, *limits)
        result = {
            "settings": {**settings.__dict__, "map_run": map_run},
            "tokenization": _panel(views.tokenization, encoder, text, settings.pad_to, settings.pair),
            "model": _panel(views.through_model, encoder, text, settings.pad_to, settings.pair, *shown),
            "sentence": _panel(
                views.sentence_vector, encoder, text, settings.layers, settings.pooling, settings.compare
            ),
            "map": _panel(self.map_view, map_run, text),
            "predictions": {name: _panel(self._prediction, name, text, settings.pair) for name in self.runs},
            "probes": {name: _panel(views.probe_table, record) for name, record in self.probes.items()},
        }
        if settings.attributions:
            self._attribute(result, settings)
        return result

    def _attribute(self, result: dict, settings: ExplainRequest) -> None:
        """Add to each panel with a score the score's attributions.

        The two sentences' cosine, each run's prediction (a classifier's class, a regressor's score, a QA answer, a
        tagger's first entity).
        """
        text, sentence = settings.text, result["sentence"]
        if settings.compare and "error" not in sentence:
            options = {"layers": settings.layers, "pooling": settings.pooling}
            sentence["attribution"] = _panel(attribute_similarity, self.encoder, text, settings.compare, **options)
        for name, run in self.runs.items():
            panel = result["predictions"][name]
            if "error" not in panel and (panel["kind"] in ("classifier", "score", "qa") or panel.get("entities")):
                pair = settings.pair if getattr(run, "takes_pairs", False) is True or panel["kind"] == "qa" else None
                panel["attribution"] = _panel(attribute_prediction, run, text, pair)

    def work_tokens(self, settings: ExplainRequest) -> int:
        """About how many tokens of model work `explain(settings)` does: what it counts against the server's queue.

        The sentence goes through the model for the token panels (twice: hidden states and attention), the sentence
        vector and each run; the second sentence once; a run's map is fitted on its first use.
        """
        sentence, pair, compare = (
            min(len(text) // 4 + 2, self.encoder.max_length) if text else 0
            for text in (settings.text, settings.pair, settings.compare)
        )
        map_run = self._map_run(settings)
        first_map = MAP_ROWS * 16 if map_run in self.runs and map_run not in self._maps else 0
        # each attributed score: its integration steps, forward and backward (about 3 passes' work)
        scores = (sentence + compare) * bool(compare) + (sentence + pair) * len(self.runs)
        attributed = ATTRIBUTION_PASSES * scores if settings.attributions else 0
        return (sentence + pair) * (3 + len(self.runs)) + compare + first_map + attributed

    def _map_run(self, settings: ExplainRequest) -> str | None:
        return settings.map_run or next(iter(self.info()["map_runs"]), None)

    def map_view(self, name: str | None, text: str) -> dict:
        """Map the run's training sentences with PCA, coloured by label, with `text` placed by the same projection."""
        if name is None:  # not an error: the page works without a run, and says what a run would add
            return {
                "note": "No feature-classifier run is loaded. Add one trained with `bertkit train` (--run DIR) to see "
                "where the sentence sits among its training sentences."
            }
        run = self.runs.get(name)
        if not isinstance(run, TextClassifier):
            known = ", ".join(self.info()["map_runs"]) or "none"
            raise InputError(
                f"run {name!r} is not a feature classifier, so it has no sentence vectors to map "
                f"(feature runs: {known})."
            )
        with self._lock:
            if name not in self._maps:
                self._maps[name] = _fit_map(run, name, self.map_texts)
        data = self._maps[name]
        features = self._features(name, text)
        point_x, point_y = (round(float(value), 3) for value in data.pca.transform(features)[0])
        predicted = run.classes_[int(run.head_.predict_proba(features).argmax(axis=1)[0])]

        group_of = lambda label: {"label": label, "x": [], "y": [], **({"text": []} if data.public else {})}

        # the run's classes in order, as `train --report`'s pca.png draws them, so a label has one colour on both
        groups = {str(label): group_of(str(label)) for label in run.classes_}
        for (x, y), label, sentence in zip(data.points, data.labels, data.texts):
            group = groups.setdefault(label, group_of(label))
            group["x"].append(round(float(x), 3))
            group["y"].append(round(float(y), 3))
            if data.public:
                group["text"].append(sentence[:80])
        return {
            "run": name,
            "source": data.source,
            "n": len(data.texts),
            "explained_variance": [round(float(v), 4) for v in data.pca.explained_variance_ratio_],
            "groups": [group for group in groups.values() if group["x"]],
            "sentence": {"x": point_x, "y": point_y, "text": text[:80], "predicted": str(predicted)},
        }

    def _prediction(self, name: str, text: str, pair: str | None) -> dict:
        """Return a run's prediction panel; a feature run's vectors are shared with the map."""
        return views.prediction(self.runs[name], text, self._features(name, text), pair)

    def _features(self, name: str, text: str) -> np.ndarray | None:
        """Compute a feature run's vectors of [text], once per sentence for the map and the prediction."""
        run = self.runs[name]
        if not isinstance(run, TextClassifier):
            return None
        with self._lock:
            if (name, text) in self._recent:
                return self._recent[(name, text)]
        features = run.vectorizer_.transform([text])
        with self._lock:
            self._recent[(name, text)] = features
        return features


def _fit_map(run: TextClassifier, name: str, map_texts: bool = False) -> MapData:
    texts, labels, source, sample = map_source(run, name)
    rows = np.unique(np.linspace(0, len(texts) - 1, min(MAP_ROWS, len(texts))).astype(int))
    texts, labels = [texts[i] for i in rows], [str(labels[i]) for i in rows]
    vectors = run.vectorizer_.transform(texts)
    if sample:  # the sample's labels are not the run's: colour its points by what the run predicts, one label set
        labels = [str(label) for label in run.predict(texts)]
        source += ", coloured by the run's predictions"
    pca = PCA(n_components=2, random_state=0).fit(vectors)
    return MapData(pca, pca.transform(vectors), labels, texts, source, public=sample or map_texts)


def map_source(run: TextClassifier, name: str = "the run") -> tuple[list[str], list, str, bool]:
    """Return (texts, labels, source in words, is the sample): the run's training file if there, else the sample."""
    data = run.record_.get("data", {}) if hasattr(run, "record_") else {}
    train = data.get("train")
    if train and Path(train).is_file():
        columns = [column_spec(data.get("text_column")), column_spec(data.get("label_column"))]
        loaded = read_labelled(train, *columns, header=data.get("header"))
        n = min(MAP_ROWS, len(loaded.texts))
        return loaded.texts, loaded.labels, f"{n} evenly spaced rows of run {name}'s training file", False
    loaded = read_labelled(sample_path(SAMPLE), "text", "label", header=True)
    why = "its training file is not reachable here" if train else "the run does not record its training file"
    return loaded.texts, loaded.labels, f"bertkit's {len(loaded.texts)} sample reviews ({why})", True


def model_name(encoder: Encoder) -> str:
    """Name the model for answers and pages: the hub name, 'default', or a local model's directory name (no path)."""
    return Path(encoder.source.path).name if encoder.source.kind == "local" else encoder.source.spec


def load_probe(directory: str) -> dict | None:
    """Read the `probe.json` of a `bertkit probe` output directory, or None when the directory is not one."""
    path = Path(directory) / PROBE_FILE
    return read_record(path, "probe", "run `bertkit probe` again") if path.is_file() else None


def run_kind(run: object) -> str:
    """Name what a run is: 'feature classifier', 'fine-tuned classifier', 'pair classifier', 'regressor', ...."""
    if isinstance(run, TextClassifier):
        return "feature classifier"
    if hasattr(run, "answer"):
        return "question answering"
    if not hasattr(run, "predict_proba"):
        return "tagger"
    pairs = "pair " if getattr(run, "takes_pairs", False) is True else ""
    if getattr(run, "problem", None) == "regression":
        return f"{pairs}regressor"
    return f"{pairs}classifier" if pairs else "fine-tuned classifier"


def _panel(compute: Callable[..., dict | Attribution], *args: Any, **kwargs: Any) -> dict:
    """Return `compute(*args, **kwargs)` as a panel: its data, or {"error": message}."""
    try:
        answer = compute(*args, **kwargs)
    except BertkitError as exc:
        return {"error": str(exc)}
    return answer.to_dict() if isinstance(answer, Attribution) else answer
