"""BertVectorizer: a scikit-learn transformer from texts to sentence vectors, with the embedding cache built in."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ..encoder.defaults import DEFAULT_FEATURE_LAYERS, DEFAULT_FEATURE_POOLING
from ..encoder.devices import resolve_device
from ..encoder.encode import Encoder
from ..encoder.layers import parse_layers
from ..encoder.pooling import parse_pooling
from ..encoder.tokenize import check_texts
from ..errors import InputError
from ..io.cache import EmbeddingCache

MAX_SHARED_ENCODERS = 4  # loaded models kept for reuse by vectorizer clones (grid searches); least recent goes


def shared_encoder(
    model: str | None, threads: int | None = None, precision: str = "fp32", device: str | None = "auto"
) -> Encoder:
    """One loaded Encoder per (model, threads, precision, device) in this process, so clones in a grid search reuse it.

    At most MAX_SHARED_ENCODERS stay loaded (least recently used first out). A local directory is keyed on its
    files' sizes and times too: a model replaced on disk is loaded afresh.
    """
    name = str(model) if model is not None else None
    return _load_shared(name, threads, precision, str(resolve_device(device)), _files_signature(model))


@functools.lru_cache(maxsize=MAX_SHARED_ENCODERS)
def _load_shared(model: str | None, threads: int | None, precision: str, device: str, files_signature: tuple):
    return Encoder.from_pretrained(model, threads=threads, precision=precision, device=device)


def _files_signature(model: str | None) -> tuple:
    if model is None or not Path(model).is_dir():
        return ()
    return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(model).iterdir() if p.is_file()))


class BertVectorizer(TransformerMixin, BaseEstimator):
    """Texts → float32 sentence vectors from a frozen encoder (any layers, any pooling): a scikit-learn transformer.

    Parameters
    ----------
    model : str, optional
        The packaged default (None), a model directory or a hub name.
    layers, pooling : str
        As `Encoder.embed` (default: every layer's mean, concatenated).
    max_length : int, optional
        The token limit (default: the model's).
    long_text : str
        'truncate', 'error' or 'window'.
    batch_size : int, optional
        Texts per forward pass (default: 32 on a CPU; on a GPU, as many as fit in the encoder's token budget).
    cache : str, Path or None
        "memory" (default; process-wide), a directory (memory + disk, survives restarts), or None (off).
    progress : bool, optional
        Show a progress bar.
    threads : int, optional
        torch's CPU threads.
    precision : str
        'fp32', 'bf16', 'fp16' (GPUs) or 'int8' (CPUs).
    device : str
        'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'.
    prompt, prompt_name : str, optional
        A prompt before every text, or one of the model's named prompts (as `Encoder.embed`).
    dimensions : int, optional
        Keep the first `dimensions` numbers of each vector.
    normalize : bool
        Unit-length vectors.
    truncation_direction : str
        'right' (keep the beginning of a long text) or 'left' (its end).

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
        batch_size: int | None = None,
        cache: str | Path | None = "memory",
        progress: bool | None = None,
        threads: int | None = None,
        precision: str = "fp32",
        device: str | None = "auto",
        prompt: str | None = None,
        prompt_name: str | None = None,
        dimensions: int | None = None,
        normalize: bool = False,
        truncation_direction: str = "right",
    ):
        self.model = model
        self.layers = layers
        self.pooling = pooling
        self.max_length = max_length
        self.long_text = long_text
        self.batch_size = batch_size
        self.cache = cache
        self.progress = progress
        self.threads = threads
        self.precision = precision
        self.device = device
        self.prompt = prompt
        self.prompt_name = prompt_name
        self.dimensions = dimensions
        self.normalize = normalize
        self.truncation_direction = truncation_direction

    def fit(self, X: Sequence[str], y=None) -> BertVectorizer:
        """Load the encoder and check the options; nothing is learned from X.

        Parameters
        ----------
        X : sequence of str
            Texts (unused: the encoder is pre-trained; scikit-learn's signature).
        y : ignored

        Returns
        -------
        BertVectorizer
            self, fitted: `encoder_` and `n_features_out_` are set.
        """
        parse_layers(self.layers)
        if parse_pooling(self.pooling) == ("none",):
            raise InputError(
                "BertVectorizer makes one vector per text; pooling='none' gives token vectors, use Encoder.embed."
            )
        self.encoder_ = shared_encoder(self.model, self.threads, self.precision, self.device)
        self.n_features_out_ = self.dimensions or self.encoder_.sentence_dim(self.layers, self.pooling)
        self.encoder_.embed(["a check of the options"], warn=False, **self._options())  # refuses bad ones now
        self.cache_ = self._make_cache()
        return self

    def transform(self, X: str | Sequence[str]) -> np.ndarray:
        """(n_texts, n_features) float32; a single string is one text and gives one row."""
        check_is_fitted(self, "encoder_")
        texts = check_texts(_to_list(X), "X")
        if self.cache_ is None:
            return self._embed(texts)
        vectors = self.cache_.get_or_compute(texts, self._embed)
        return vectors.reshape(len(texts), self.n_features_out_)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        """Column names `bert0` … `bertN-1`, as scikit-learn's `set_output` and pipelines ask for them."""
        check_is_fitted(self, "n_features_out_")
        return np.array([f"bert{i}" for i in range(self.n_features_out_)], dtype=object)

    def feature_options(self) -> dict:
        """Everything that determines a vector besides the text: the cache key and the saved-model record."""
        encoder = self.encoder_
        options = {
            "fingerprint": encoder.fingerprint,
            "layers": parse_layers(self.layers).spec,
            "pooling": "+".join(parse_pooling(self.pooling)),
            "max_length": self.max_length or encoder.max_length,
            "long_text": self.long_text,
            **encoder.precision_record(),
        }
        prompt = encoder.resolve_prompt(self.prompt, self.prompt_name)
        extra = {
            "prompt": prompt,
            "dimensions": self.dimensions,
            "normalize": self.normalize,
            "truncation_direction": self.truncation_direction,
        }
        # only what differs from the defaults: caches written before these options existed stay valid
        return {**options, **{k: v for k, v in extra.items() if v not in (None, False, "", "right")}}

    def _make_cache(self) -> EmbeddingCache | None:
        if self.cache is None or self.cache is False:
            return None
        directory = None if self.cache == "memory" else Path(self.cache)
        return EmbeddingCache(self.feature_options(), directory)

    def _options(self) -> dict:
        return dict(
            layers=self.layers,
            pooling=self.pooling,
            max_length=self.max_length,
            long_text=self.long_text,
            prompt=self.prompt,
            prompt_name=self.prompt_name,
            dimensions=self.dimensions,
            normalize=self.normalize,
            truncation_direction=self.truncation_direction,
        )

    def _embed(self, texts: list[str]) -> np.ndarray:
        return self.encoder_.embed(texts, batch_size=self.batch_size, progress=self.progress, **self._options())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.requires_fit = True
        return tags


def _to_list(X) -> list:
    """Texts as a list; one string is one text (the rule of every bertkit transform and predict)."""
    if isinstance(X, str):
        return [X]
    if isinstance(X, np.ndarray):
        if X.ndim == 2 and X.shape[1] == 1:
            X = X[:, 0]
        elif X.ndim != 1:
            raise InputError(f"X must be a 1-D list of texts, got an array of shape {X.shape}.")
        return X.tolist()
    if hasattr(X, "iloc") and getattr(X, "ndim", 1) == 2:  # one-column DataFrame
        if X.shape[1] != 1:
            raise InputError(f"X has {X.shape[1]} columns; give the text column only.")
        X = X.iloc[:, 0]
    return list(X)
