"""Layer probe: "which layer's vectors?" answered on the user's model and data, from one forward pass per batch.

Every hidden state is embedded once; each layer choice is a cheap slice of those vectors, scored on dev.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from threadpoolctl import threadpool_limits

from ..encoder.runner import call_model
from ..errors import InputError
from ..io.cache import EmbeddingCache
from ..io.conll import read_labelled_text, read_tagged
from .heads import chosen_C, feature_head
from .labels import check_known_labels
from .layer_choices import layer_choices, select
from .scalar_mix import ScalarMixClassifier
from .tagging import entity_scores
from .vectorizer import BertVectorizer, shared_encoder

if TYPE_CHECKING:
    from ..encoder.encode import Encoder

logger = logging.getLogger(__name__)

TEXT_POOLINGS = ("cls", "mean", "max", "pooler")
TOKEN_C = 1.0
MAX_POOLING_NOTE = "max pooling: layers are combined after pooling each layer (sum/mean/concat of per-layer maxima)"


@dataclass
class ProbeRow:
    """One scored choice: pooling and layers, width, the two dev scores, fit time, the C used, a mix's weights."""

    pooling: str
    choice: str
    dim: int
    score: float  # text: dev accuracy; token: dev entity F1
    secondary: float  # text: dev macro-F1; token: dev token accuracy
    fit_seconds: float
    C: float | None  # None where the head did not choose C by cross-validation
    layer_weights: list[float] | None = None


@dataclass(repr=False)
class ProbeResult:
    """Every layer choice × pooling scored by a linear probe on dev: `rows`, `table()`, a chart in Jupyter."""

    task: str
    metric: str
    secondary_metric: str
    rows: list[ProbeRow]
    facts: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        best = max(self.rows, key=lambda row: row.score, default=None)
        head = f"ProbeResult({self.task}: {len(self.rows)} choices scored by {self.metric}"
        return head + (f"; best {best.pooling} / {best.choice} {100 * best.score:.1f})" if best else ")")

    def _repr_html_(self) -> str:
        from ..display import html_table
        from .report import png_html, probe_files

        image, rows = png_html(probe_files(self)["probe.png"]), self.table()  # type: ignore[arg-type]  # bytes
        return f"<div>{html_table(rows, list(rows[0]) if rows else [], repr(self))}{image}</div>"

    def table(self) -> list[dict]:
        """Return the rows as the command line prints them (scores in percent)."""
        return [
            {
                "pooling": r.pooling,
                "layers": r.choice,
                "dim": r.dim,
                self.metric: f"{100 * r.score:.1f}",
                self.secondary_metric: f"{100 * r.secondary:.1f}",
                "C": f"{r.C:g}",
                "fit s": f"{r.fit_seconds:.1f}",
            }
            for r in self.rows
        ]


def probe_text(
    train: str | Path,
    dev: str | Path,
    *,
    model: str | None = None,
    poolings: Sequence[str] = TEXT_POOLINGS,
    limit: int | None = None,
    seed: int = 0,
    cv: int = 5,
    cache: str | Path | None = "memory",
    device: str | None = "auto",
    text_column: str | int | None = None,
    label_column: str | int | None = None,
    header: bool | None = None,
    progress: bool | None = None,
) -> ProbeResult:
    """Sentence classification probe: LogisticRegression (C by CV) per pooling × layer choice; accuracy, macro-F1.

    Every text passes through the model once; each hidden state and the usual combinations (last, second-to-last,
    sum and concatenation of the last four, mean of all, a learned scalar mix) are pooled each way and scored on dev.

    Parameters
    ----------
    train, dev : str or Path
        Labelled files (TSV/CSV/JSONL/Parquet; text and label columns as `bertkit train` reads them).
    model : str, optional
        The encoder (default: the packaged model).
    poolings : sequence of str
        Among 'cls', 'mean', 'max', 'pooler'.
    limit : int, optional
        Use the first `limit` training rows.
    seed : int
        The classifier's random state.
    cv : int
        Folds for choosing C.
    cache : str or Path or None
        Where token vectors are cached ('memory', a folder, or None).
    device : str, optional
        'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'.
    text_column, label_column, header
        As `bertkit train` takes them.
    progress : bool, optional
        Report the embedding as `embed` does (None: from 256 texts).

    Returns
    -------
    ProbeResult
        `rows` (pooling, layer choice, width, dev accuracy, macro-F1, fit seconds, C), `table()`, a chart in
        Jupyter.
    """
    poolings = tuple(p.strip().lower() for p in poolings if p.strip())
    if not poolings or set(poolings) - set(TEXT_POOLINGS):
        raise InputError(f"poolings {list(poolings)}: choose from {', '.join(TEXT_POOLINGS)}.")
    data, dev_data = (read_labelled_text(path, text_column, label_column, header) for path in (train, dev))
    texts, labels = data.texts[:limit], [str(v) for v in data.labels[:limit]]
    dev_labels = [str(v) for v in dev_data.labels]
    check_known_labels(dev, dev_labels, labels, train)
    # Always the same three poolings (the pooler is computed from the last [CLS]): one cache entry serves every probe.
    token_poolings = ["cls", "mean", "max"]
    vectorizer = BertVectorizer(
        model, "all:concat", "+".join(token_poolings), cache=cache, progress=progress, device=device
    )
    encoder = vectorizer.fit([]).encoder_
    if "pooler" in poolings and not encoder.info()["pooler"]:
        logger.info("%s has no pooler: the pooler rows are left out.", type(encoder.model).__name__)
        poolings = tuple(p for p in poolings if p != "pooler")
    started = time.perf_counter()
    shape = (-1, len(token_poolings), encoder.num_layers + 1, encoder.hidden_size)
    train_blocks, dev_blocks = (vectorizer.transform(t).reshape(shape) for t in (texts, dev_data.texts))
    embed_seconds = time.perf_counter() - started
    stats = vectorizer.cache_.stats if vectorizer.cache_ is not None else None
    said = (
        f"embedded {len(texts)} + {len(dev_data.texts)} texts once (all {encoder.num_layers + 1} hidden states, "
        f"poolings {'+'.join(token_poolings)}) in {embed_seconds:.1f}s" + (f" ({stats})" if stats else "")
    )
    logger.info(said)
    fit = functools.partial(_fit_text, labels=labels, dev_labels=dev_labels, seed=seed, cv=cv)
    rows = []
    for pooling in poolings:
        if pooling == "pooler":
            features, dev_features = _pooler(encoder, train_blocks[:, 0, -1]), _pooler(encoder, dev_blocks[:, 0, -1])
            rows.append(fit(pooling, f"pooler(h{encoder.num_layers} [CLS])", features, dev_features))
            logger.info(_row_line(rows[-1], "accuracy"))
            continue
        k = token_poolings.index(pooling)
        blocks, dev_pooled = train_blocks[:, k], dev_blocks[:, k]
        mean_all_C = 1.0
        for choice in layer_choices(encoder.num_layers):
            if choice.combine == "mix":
                rows.append(fit(pooling, choice.name, blocks, dev_pooled, mix_C=mean_all_C))
            else:
                rows.append(fit(pooling, choice.name, select(blocks, choice), select(dev_pooled, choice)))
                if choice.combine == "mean":
                    mean_all_C = rows[-1].C or mean_all_C
            logger.info(_row_line(rows[-1], "accuracy"))
    facts = _facts(encoder, train, dev, len(texts), len(dev_labels), limit, seed, embed_seconds)
    facts.update(cv_folds=cv, poolings=list(poolings), note=MAX_POOLING_NOTE)
    return ProbeResult("text", "accuracy", "macro_f1", rows, facts)


def _pooler(encoder: Encoder, cls_last: np.ndarray) -> np.ndarray:
    """Apply the model's pooler (dense + tanh over the last layer's [CLS]) to cached vectors: no second pass."""
    states = {"hidden_states": torch.from_numpy(np.ascontiguousarray(cls_last))[:, None, :]}
    return call_model(encoder.model.pooler, states, encoder.device, encoder.precision).float().cpu().numpy()


def _fit_text(
    pooling: str,
    name: str,
    features: np.ndarray,
    dev_features: np.ndarray,
    labels: list[str],
    dev_labels: list[str],
    seed: int,
    cv: int,
    mix_C: float | None = None,
) -> ProbeRow:
    """Fit a logistic regression choosing C by CV (or, given `mix_C`, a scalar mix on layer blocks); score it on dev."""
    started = time.perf_counter()
    if mix_C is None:
        rarest = int(np.unique(labels, return_counts=True)[1].min())
        with threadpool_limits(1):
            head = feature_head(n_folds=max(2, min(cv, rarest)), random_state=seed).fit(features, labels)
            seconds = time.perf_counter() - started
            predicted = head.predict(dev_features)
        C = chosen_C(head)[0]
        weights = None
    else:
        classes, codes = np.unique(np.array(labels), return_inverse=True)
        found, weights = _fit_mix(features, dev_features, codes, mix_C, seed)
        seconds = time.perf_counter() - started
        predicted = classes[found]
        C = mix_C
    accuracy = float(np.mean(predicted == np.array(dev_labels)))
    macro_f1 = float(f1_score(dev_labels, predicted, average="macro"))
    return ProbeRow(pooling, name, features.shape[-1], accuracy, macro_f1, seconds, C, weights)


def _fit_mix(
    blocks: np.ndarray, dev_blocks: np.ndarray, codes: np.ndarray, C: float, seed: int
) -> tuple[np.ndarray, list[float]]:
    """Fit a scalar mix on each layer standardised on the training rows; its dev predictions and layer weights."""
    mean = blocks.mean(axis=0, keepdims=True)
    scale = blocks.std(axis=0, keepdims=True)
    scale[scale == 0] = 1.0
    scaled, dev_scaled = (((b - mean) / scale).astype(np.float32) for b in (blocks, dev_blocks))
    mix = ScalarMixClassifier(C=C, random_state=seed).fit(scaled, codes)
    return mix.predict(dev_scaled), [round(float(w), 4) for w in mix.layer_weights_]


def probe_token(
    train: str | Path,
    dev: str | Path,
    *,
    model: str | None = None,
    subtoken_pooling: str = "first",
    limit: int | None = None,
    seed: int = 0,
    C: float = TOKEN_C,
    cache: str | Path | None = "memory",
    device: str | None = "auto",
    progress: bool | None = None,
) -> ProbeResult:
    """Tagging probe: a per-word LogisticRegression on word vectors per layer choice; entity F1 and token accuracy.

    Parameters
    ----------
    train, dev : str or Path
        CoNLL files (a word and its tag per line, sentences apart by blank lines).
    model : str, optional
        The encoder (default: the packaged model).
    subtoken_pooling : {'first', 'mean', 'max', 'last'}
        How a word's sub-tokens become its vector.
    limit : int, optional
        Use the first `limit` training sentences.
    seed : int
        The classifier's random state.
    C : float
        The logistic regression's inverse regularisation (fixed: a search per layer costs too much here).
    cache, device, progress
        As `probe_text` takes them.

    Returns
    -------
    ProbeResult
        One row per layer choice: entity F1 and token accuracy on dev.
    """
    data, dev_data = read_tagged(train), read_tagged(dev)
    words, tags = data.words[:limit], data.tags[:limit]
    names = sorted({t for s in tags for t in s})
    check_known_labels(dev, [t for s in dev_data.tags for t in s], names, "the training sentences used")
    encoder = shared_encoder(model, device=device)
    options = {
        "model": encoder.fingerprint,
        "words": True,
        "layers": "all:concat",
        "subtoken_pooling": subtoken_pooling,
        "long_text": "window",
        "max_length": encoder.max_length,
        "precision": encoder.precision,
    }
    directory = None if cache in (None, "memory") else cache
    store = EmbeddingCache(options, directory=directory) if cache is not None else None
    started = time.perf_counter()
    train_blocks, dev_blocks = (
        _word_blocks(encoder, sentences, subtoken_pooling, store, progress) for sentences in (words, dev_data.words)
    )
    embed_seconds = time.perf_counter() - started
    said = (
        f"embedded {len(words)} + {len(dev_data.words)} sentences once (all {encoder.num_layers + 1} hidden states, "
        f"{len(train_blocks)} + {len(dev_blocks)} words) in {embed_seconds:.1f}s"
        + (f" ({store.stats})" if store else "")
    )
    logger.info(said)
    index = {name: i for i, name in enumerate(names)}
    codes = np.array([index[t] for s in tags for t in s])
    rows = []
    for choice in layer_choices(encoder.num_layers):
        started = time.perf_counter()
        if choice.combine == "mix":
            predicted, weights = _fit_mix(train_blocks, dev_blocks, codes, C, seed)
            dim = train_blocks.shape[2]
        else:
            features, dev_features = select(train_blocks, choice), select(dev_blocks, choice)
            with threadpool_limits(1):
                head = feature_head(LogisticRegression(C=C, max_iter=1000)).fit(features, codes)
                predicted = head.predict(dev_features)
            weights, dim = None, features.shape[1]
        flat = iter(predicted)
        scores = entity_scores(dev_data.tags, [[names[next(flat)] for _ in sentence] for sentence in dev_data.tags])
        seconds = time.perf_counter() - started
        pooling = "word:" + subtoken_pooling
        rows.append(ProbeRow(pooling, choice.name, dim, scores["f1"], scores["token_accuracy"], seconds, C, weights))
        logger.info(_row_line(rows[-1], "entity F1"))
    facts = _facts(encoder, train, dev, len(words), len(dev_data.words), limit, seed, embed_seconds)
    facts.update(
        train_words=len(train_blocks), dev_words=len(dev_blocks), labels=names, subtoken_pooling=subtoken_pooling, C=C
    )
    return ProbeResult("token", "entity_f1", "token_accuracy", rows, facts)


def _word_blocks(
    encoder: Encoder,
    sentences: list[list[str]],
    subtoken_pooling: str,
    store: EmbeddingCache | None,
    progress: bool | None,
) -> np.ndarray:
    """(total words, layers, hidden): every word's vector in every hidden state, from one pass (cached per sentence)."""

    def compute(keys: list[str]) -> list[np.ndarray]:
        words = [key.split("\x1f") for key in keys]
        return encoder.embed_words(
            words, layers="all:concat", subtoken_pooling=subtoken_pooling, long_text="window", progress=progress
        )

    keys = ["\x1f".join(s) for s in sentences]
    vectors = store.get_or_compute(keys, compute, stack=False) if store is not None else compute(keys)
    flat = np.concatenate(vectors)
    return flat.reshape(len(flat), encoder.num_layers + 1, -1)


def _facts(
    encoder: Encoder,
    train: str | Path,
    dev: str | Path,
    n_train: int,
    n_dev: int,
    limit: int | None,
    seed: int,
    embed_seconds: float,
) -> dict:
    return {
        "model": encoder.source.spec,
        "fingerprint": encoder.fingerprint,
        "architecture": type(encoder.model).__name__,
        "hidden_states": encoder.num_layers + 1,
        "hidden_size": encoder.hidden_size,
        "train": str(Path(train).resolve()),
        "dev": str(Path(dev).resolve()),
        "train_rows": n_train,
        "dev_rows": n_dev,
        "limit": limit,
        "seed": seed,
        "embed_seconds": round(embed_seconds, 1),
    }


def _row_line(row: ProbeRow, metric: str) -> str:
    mix = f"  weights {row.layer_weights}" if row.layer_weights else ""
    score = f"{metric} {100 * row.score:5.1f}"
    return f"{row.pooling:>8}  {row.choice:<26} dim {row.dim:>5}  {score}  ({row.fit_seconds:.1f}s){mix}"
