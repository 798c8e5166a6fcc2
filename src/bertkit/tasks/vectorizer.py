"""BertVectorizer: a scikit-learn transformer from texts to sentence vectors, with the embedding cache built in."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..encoder.compact import DTYPES
from ..encoder.defaults import DEFAULT_FEATURE_LAYERS, DEFAULT_FEATURE_POOLING
from ..encoder.devices import resolve_device
from ..encoder.encode import Encoder, vectors_record
from ..encoder.options import FIELDS, EmbedOptions
from ..encoder.tokenize import check_texts
from ..errors import InputError
from ..io.cache import EmbeddingCache

MAX_SHARED_ENCODERS = 4  # loaded models kept for reuse by vectorizer clones (grid searches); least recent goes


def shared_encoder(model: str | None, precision: str = "fp32", device: str | None = "auto") -> Encoder:
    """One loaded Encoder per (model, precision, device, local files' sizes and times), shared by clones (LRU)."""
    name = str(model) if model is not None else None
    return _load_shared(name, precision, str(resolve_device(device)), _files_signature(model))


@functools.lru_cache(maxsize=MAX_SHARED_ENCODERS)
def _load_shared(model: str | None, precision: str, device: str, files_signature: tuple) -> Encoder:
    return Encoder.from_pretrained(model, precision=precision, device=device)


def _files_signature(model: str | None) -> tuple:
    if model is None or not Path(model).is_dir():
        return ()
    return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(model).iterdir() if p.is_file()))


class BertVectorizer(TransformerMixin, BaseEstimator):
    """Texts → sentence vectors from a frozen encoder (any layers, any pooling): a scikit-learn transformer.

    Its embedding parameters are `EmbedOptions`' fields (a test holds the two equal), so that scikit-learn can set
    each one (`vectorizer__layers` in a grid search); `options_` is the resolved value.

    Parameters
    ----------
    model : str, optional
        The packaged default (None), a model directory or a hub name.
    layers, pooling : str
        As `Encoder.embed` (default: every layer's mean, concatenated).
    max_length, long_text, stride, truncation_direction, prompt, prompt_name, include_prompt, truncate_dim,
    normalize_embeddings, output_type, dense
        As `EmbedOptions` takes them.
    batch_size : int, optional
        Texts per forward pass (default: 32 on a CPU; on a GPU, as many as fit in the encoder's token budget).
    cache : str, Path or None
        "memory" (default; process-wide), a directory (memory + disk, survives restarts), or None (off).
    progress : bool, optional
        Show a progress bar.
    precision : str
        The encoder's arithmetic: 'fp32', 'bf16', 'fp16' (GPUs) or 'int8' (CPUs).
    device : str
        'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'.

    Examples
    --------
    >>> from bertkit import BertVectorizer
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.linear_model import LogisticRegression
    >>> pipe = make_pipeline(BertVectorizer(layers="last4:sum"), LogisticRegression())
    >>> pipe.fit(["a gripping film", "a dull mess", "a joy", "a bore"], ["pos", "neg", "pos", "neg"]).predict(["a joy"])
    array(['pos'], dtype='<U3')
    >>> BertVectorizer(layers="last4:concat").fit_transform(["I love Korea"]).shape
    (1, 1536)
    """

    def __init__(
        self,
        model: str | None = None,
        layers: str = DEFAULT_FEATURE_LAYERS,
        pooling: str = DEFAULT_FEATURE_POOLING,
        max_length: int | None = None,
        long_text: str = "truncate",
        stride: int | None = None,
        truncation_direction: str = "right",
        prompt: str | None = None,
        prompt_name: str | None = None,
        include_prompt: bool | None = None,
        truncate_dim: int | None = None,
        normalize_embeddings: bool | None = None,
        output_type: str = "float32",
        dense: bool | None = None,
        batch_size: int | None = None,
        cache: str | Path | None = "memory",
        progress: bool | None = None,
        precision: str = "fp32",
        device: str | None = "auto",
    ) -> None:
        self.model, self.layers, self.pooling, self.max_length = model, layers, pooling, max_length
        self.long_text, self.stride, self.truncation_direction = long_text, stride, truncation_direction
        self.prompt, self.prompt_name, self.include_prompt = prompt, prompt_name, include_prompt
        self.truncate_dim, self.normalize_embeddings, self.output_type = truncate_dim, normalize_embeddings, output_type
        self.dense, self.batch_size, self.cache, self.progress = dense, batch_size, cache, progress
        self.precision, self.device = precision, device

    def fit(self, X: Sequence[str], y: Any = None) -> BertVectorizer:
        """Load the encoder and check the options; nothing is learned from X.

        Parameters
        ----------
        X : sequence of str
            Texts (unused: the encoder is pre-trained; scikit-learn's signature).
        y : ignored
            scikit-learn's signature.

        Returns
        -------
        BertVectorizer
            self, fitted: `encoder_`, `options_` and `n_features_out_` are set.
        """
        options = self.embed_options()
        if options.token_vectors:
            raise InputError(
                "BertVectorizer makes one vector per text; pooling='none' gives token vectors: use "
                "Encoder.embed_tokens."
            )
        self.encoder_ = shared_encoder(self.model, self.precision, self.device)
        self.options_ = options.resolve(self.encoder_)  # refuses options this model cannot serve, before any work
        self.n_features_out_ = self.encoder_.output_dim(self.options_)
        self.cache_ = self._make_cache()
        return self

    def embed_options(self) -> EmbedOptions:
        """Return the `EmbedOptions` these parameters make (not yet resolved against the model)."""
        values = {name: getattr(self, name) for name in FIELDS}
        return EmbedOptions.from_kwargs(None, **values)

    def transform(self, X: str | Sequence[str]) -> np.ndarray:
        """(n_texts, n_features) vectors; a single string is one text and gives one row.

        Parameters
        ----------
        X : str or sequence of str
            The texts.

        Returns
        -------
        numpy.ndarray
            In `output_type` (float32 by default).
        """
        check_is_fitted(self, "encoder_")
        texts = check_texts(_column(X), "X")
        if self.cache_ is None or not texts:  # no texts: the encoder knows the width, the cache does not
            return self._embed(texts)
        vectors = self.cache_.get_or_compute(texts, self._embed)  # the cache keeps float32: exact for every type
        return vectors.reshape(len(texts), -1).astype(DTYPES[self.options_.output_type], copy=False)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """Column names `bert0` … `bertN-1`, as scikit-learn's `set_output` and pipelines ask for them."""
        check_is_fitted(self, "n_features_out_")
        return np.array([f"bert{i}" for i in range(self.n_features_out_)], dtype=object)

    def feature_options(self) -> dict:
        """Everything that determines a vector besides the text: the cache key and the saved-model record."""
        return vectors_record(self.encoder_, self.options_)

    def _make_cache(self) -> EmbeddingCache | None:
        if self.cache is None or self.cache is False:
            return None
        return EmbeddingCache(self.feature_options(), None if self.cache == "memory" else Path(self.cache))

    def _embed(self, texts: list[str]) -> np.ndarray:
        return self.encoder_.embed(texts, self.options_, batch_size=self.batch_size, progress=self.progress)

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags: the input is a list of strings."""
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array, tags.input_tags.string = False, True
        return tags


def _column(X: Any) -> Any:
    """Unwrap an array or a one-column DataFrame of texts; anything else passes as given (check_texts lists it)."""
    if isinstance(X, np.ndarray):
        if X.ndim == 2 and X.shape[1] == 1:
            X = X[:, 0]
        elif X.ndim != 1:
            raise InputError(f"X must be a 1-D list of texts, got an array of shape {X.shape}.")
        return X.tolist()
    if hasattr(X, "iloc") and getattr(X, "ndim", 1) == 2:  # one-column DataFrame
        if X.shape[1] != 1:
            raise InputError(f"X has {X.shape[1]} columns; give the text column only.")
        return X.iloc[:, 0]
    return X
