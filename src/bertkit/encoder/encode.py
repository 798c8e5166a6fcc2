"""Encoder: a loaded model and its tokenizer; tokenize, forward, and vectors from any layer with any pooling.

The parts live beside it: `models` loads, `tokenize` tokenizes (with the tokenizer's overflow windows), `runner`
plans and runs the passes, `options` holds what an embedding asks for, `vectors` turns hidden states into vectors.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .. import display
from ..errors import InputError
from . import tokenize as tok
from .compact import RANGED, int8_ranges
from .coverage import Coverage, coverage
from .defaults import DEFAULT_BATCH_SIZE
from .devices import describe, resolve_device, token_budget
from .int8 import int8_model_for, packaged_texts
from .models import LoadedModel, ModelSource, load_model, resolve_model
from .options import EmbedOptions, options_from
from .pooling import pool_words
from .precision import autocast, check_precision
from .results import EmbedReport, EmbedResult, TokenEmbedding
from .runner import Runner
from .st_config import SentenceConfig
from .threads import deprecated_threads, total_threads
from .vectors import VectorHead, finish, token_states

logger = logging.getLogger(__name__)

_PATH_DEPENDENT_CONFIG = {"_name_or_path", "transformers_version", "_commit_hash", "name_or_path"}


@dataclass
class ForwardOutput:
    """What one forward pass returns: last layer, pooler (None without one), and embeddings + every layer."""

    last_hidden_state: torch.Tensor  # (batch, seq, hidden)
    pooler_output: torch.Tensor | None  # (batch, hidden)
    hidden_states: tuple[torch.Tensor, ...]  # layers + 1 tensors of (batch, seq, hidden)


class Encoder:
    """A pre-trained encoder and its tokenizer: tokenize, forward, and embeddings from any layer with any pooling.

    Make one with `Encoder.from_pretrained` (the packaged model, a folder or a hub name); the constructor takes a model
    that is already loaded.

    Examples
    --------
    >>> from bertkit import Encoder
    >>> Encoder.from_pretrained(device="cpu")
    Encoder('default': BertModel, 6 layers, hidden 384, max_length 256, fp32 on cpu)
    """

    def __init__(
        self,
        loaded: LoadedModel,
        threads: int | None = None,
        precision: str = "fp32",
        concurrent_batches: int | None = None,
        device: str | torch.device | None = "auto",
    ) -> None:
        deprecated_threads(threads)
        self.loaded = loaded
        self.device = resolve_device(device)
        self.precision = check_precision(precision, device=self.device)
        self.model = loaded.model.to(self.device)
        self.tokenizer = loaded.tokenizer
        self.max_length = loaded.max_length
        self.position_limit = loaded.position_limit or loaded.max_length
        self._fingerprint: str | None = None
        if concurrent_batches is None:  # a GPU takes one batch at a time; CPU cores each take their own
            concurrent_batches = 1 if self.device.type != "cpu" else min(total_threads(), 2)
        if concurrent_batches < 1:
            raise InputError(f"concurrent_batches={concurrent_batches}: give 1 or more.")
        self.concurrent_batches = int(concurrent_batches)
        self.takes_type_ids = "token_type_ids" in inspect.signature(self.model.forward).parameters
        for note in loaded.warnings:
            logger.warning("%s: %s", loaded.source.spec, note)
        self._int8: torch.nn.Module | None = None
        self.int8_calibration: str | None = None  # the digest of the calibration texts int8 was calibrated on
        if self.precision == "int8":  # a copy of the model with int8 linear layers (int8.py)
            self._int8, self.int8_calibration = int8_model_for(self)
        self.max_batch_tokens = token_budget(self.model, self.device, self.position_limit)
        self._ranges: dict[str, np.ndarray] = {}  # int8/uint8 ranges of the calibration sentences, by options

    @classmethod
    def from_pretrained(
        cls,
        model: str | None = None,
        *,
        threads: int | None = None,
        precision: str = "fp32",
        concurrent_batches: int | None = None,
        device: str | torch.device | None = "auto",
    ) -> Encoder:
        """Load the packaged default (None), a local directory saved with `save_pretrained`, or a hub name.

        Parameters
        ----------
        model : str, optional
            None (or 'default') is the packaged all-MiniLM-L6-v2; else a model directory or a hub name.
        threads : int, optional
            Deprecated: set torch's threads with `bertkit.set_threads` (it changes them for the whole process).
        precision : str
            'fp32'; 'bf16' (autocast: on GPUs that have it, and CPUs with native bf16); 'fp16' (autocast, GPUs);
            'int8' (a CPU copy of the model with int8 linear layers, calibrated once and cached).
        concurrent_batches : int, optional
            Batches in flight at once, sharing the CPU threads (default: 2 with 2 or more threads, 1 on a GPU).
        device : str
            'auto' (CUDA, then MPS, then the CPU), 'cpu', 'cuda', 'cuda:N' or 'mps'.

        Returns
        -------
        Encoder
        """
        deprecated_threads(threads)
        wanted = resolve_device(device)
        check_precision(precision, device=wanted)
        return cls(
            load_model(resolve_model(model)), precision=precision, concurrent_batches=concurrent_batches, device=wanted
        )

    def with_options(self, *, precision: str | None = None, concurrent_batches: int | None = None) -> Encoder:
        """Another `Encoder` over the same loaded weights and tokenizer, at another precision or concurrency.

        Parameters
        ----------
        precision : str, optional
            'fp32', 'bf16' or 'int8'; None keeps this encoder's.
        concurrent_batches : int, optional
            Batches in flight at once; None keeps this encoder's.

        Returns
        -------
        Encoder
            Shares the model's memory with this one (int8 builds its own int8 copy).
        """
        return Encoder(
            self.loaded,
            precision=precision or self.precision,
            concurrent_batches=self.concurrent_batches if concurrent_batches is None else concurrent_batches,
            device=self.device,
        )

    # ---- facts about the model -------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"Encoder({self.name!r}: {type(self.model).__name__}, {self.num_layers} layers, hidden {self.hidden_size}, "
            f"max_length {self.max_length}, {self.precision} on {describe(self.device)})"
        )

    def _repr_html_(self) -> str:
        shown = ("architecture", "layers", "hidden_size", "attention_heads", "max_length", "vocab_size", "cased")
        facts = {k: v for k, v in self.info().items() if k in shown}
        facts.update(pooler=self.has_pooler, precision=self.precision, device=describe(self.device))
        return display.facts_table(facts, f"Encoder {self.name!r}")

    @property
    def source(self) -> ModelSource:
        """Where the model came from: its spec, its local path or hub id, and which of the two."""
        return self.loaded.source

    @property
    def name(self) -> str:
        """The model as it was asked for: 'default', a folder or a hub name."""
        return self.loaded.source.spec

    @property
    def num_layers(self) -> int:
        """Transformer layers; `embed` sees one more hidden state (the embeddings' output, layer 0)."""
        return int(self.model.config.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        """Width of every hidden state (384 for the packaged model)."""
        return int(self.model.config.hidden_size)

    @property
    def has_pooler(self) -> bool:
        """Whether the model has BERT's pooler (a dense layer with tanh on `[CLS]`), which `pooling='pooler'` needs."""
        return self.loaded.has_pooler

    @property
    def sentence_config(self) -> SentenceConfig:
        """What the model's sentence-transformers files say: pooling, Dense, Normalize, prompts."""
        return self.loaded.sentence_config

    @property
    def fingerprint(self) -> str:
        """Hash of the weights, config and tokenizer: equal fingerprints mean equal embeddings."""
        if self._fingerprint is None:
            digest = hashlib.sha256()
            config = {k: v for k, v in self.model.config.to_dict().items() if k not in _PATH_DEPENDENT_CONFIG}
            digest.update(json.dumps(config, sort_keys=True, default=str).encode())
            # truncation / padding settings change with each call; they are not part of what the tokenizer is
            tokenizer_state = json.loads(self.tokenizer.backend_tokenizer.to_str())
            tokenizer_state.pop("truncation", None)
            tokenizer_state.pop("padding", None)
            digest.update(json.dumps(tokenizer_state, sort_keys=True).encode())
            for name, tensor in sorted(self.model.state_dict().items()):
                digest.update(name.encode())
                digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
            for layer in self.sentence_config.dense:
                digest.update(layer.weight.contiguous().view(torch.uint8).numpy().tobytes())
            self._fingerprint = digest.hexdigest()[:32]
        return self._fingerprint

    def precision_record(self) -> dict:
        """Record what decides the arithmetic besides the weights.

        The precision and, for int8, the calibration's digest. Cache keys and run records include it, so int8 vectors
        from two calibrations are never mixed up.
        """
        if self.int8_calibration is None:
            return {"precision": self.precision}
        return {"precision": self.precision, "int8_calibration": self.int8_calibration}

    @property
    def default_batch_size(self) -> int:
        """Texts per pass when none is asked for.

        32 on a CPU (measured best on small CPUs with length-sorted batches); on a GPU, no row limit: the token budget
        (`max_batch_tokens`) decides.
        """
        return DEFAULT_BATCH_SIZE if self.device.type == "cpu" else self.max_batch_tokens

    def resolve(self, options: EmbedOptions | None = None, **kwargs: Any) -> EmbedOptions:
        """Embedding options for this model: its defaults filled in, every option checked (nothing runs).

        Parameters
        ----------
        options : EmbedOptions, optional
            The caller's options; keywords (field names) replace its fields.
        **kwargs
            Option values, as `EmbedOptions` takes them.

        Returns
        -------
        EmbedOptions
            Resolved (`EmbedOptions.resolve`).
        """
        return options_from(options, kwargs).resolve(self)

    def sentence_dim(
        self, layers: str = "last", pooling: str | None = None, options: EmbedOptions | None = None
    ) -> int:
        """Width of the sentence vectors `embed` returns for these options (before any truncate_dim).

        Parameters
        ----------
        layers : str
            As `embed` takes it ('last', 'last4:concat', 'all:concat', ...).
        pooling : str, optional
            As `embed` takes it; several poolings ('cls+mean') are concatenated. None: the model's.
        options : EmbedOptions, optional
            All the options at once (then `layers` and `pooling` are ignored).

        Returns
        -------
        int
            The number of columns, e.g. 384 for 'last' and 1536 for 'last4:concat' on the packaged model.
        """
        return self._pooled_width(self.resolve(options or EmbedOptions(layers=layers, pooling=pooling)))

    def output_dim(self, options: EmbedOptions) -> int:
        """Columns of the array `embed(texts, options)` returns (after truncate_dim; binary types: 8 to a byte)."""
        resolved = options.resolve(self)
        width = resolved.truncate_dim or self._pooled_width(resolved)
        return -(-width // 8) if resolved.output_type in ("binary", "ubinary") else width

    def _pooled_width(self, resolved: EmbedOptions) -> int:
        if resolved.dense:
            return self.sentence_config.dense[-1].out_features
        selection, states = VectorHead.of(resolved, 0, ()).selection, self.num_layers + 1
        per_layer = selection.output_dim(self.hidden_size, states)
        return sum(self.hidden_size if m == "pooler" else per_layer for m in (resolved.pooling or "mean").split("+"))

    def info(self) -> dict:
        """Architecture, layers, hidden size, max length, vocabulary size, casing, and the sentence defaults."""
        config, sentence = self.model.config, self.sentence_config
        return {
            "model": self.name,
            "path": self.loaded.source.path,
            "architecture": type(self.model).__name__,
            "model_type": config.model_type,
            "layers": self.num_layers,
            "hidden_states": self.num_layers + 1,
            "hidden_size": self.hidden_size,
            "attention_heads": getattr(config, "num_attention_heads", getattr(config, "n_heads", None)),
            "max_length": self.max_length,
            "max_length_source": self.loaded.max_length_source,
            "position_limit": self.position_limit,
            "vocab_size": len(self.tokenizer),
            "cased": self.loaded.is_cased,
            "pooler": self.has_pooler,
            "token_type_ids": self.takes_type_ids,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "precision": self.precision,
            "device": describe(self.device),
            "pooling": sentence.pooling or "mean",
            "normalize": sentence.normalize,
            "dense": [f"{d.in_features}→{d.out_features} {d.activation}" for d in sentence.dense],
            "prompts": dict(sentence.prompts),
            "default_prompt_name": sentence.default_prompt_name,
            "threads": total_threads(),
            "concurrent_batches": self.concurrent_batches,
        }

    # ---- tokenization -------------------------------------------------------------------------------------------
    def tokenize(
        self,
        texts: str | Sequence[tok.Text],
        text_pair: str | Sequence[str] | None = None,
        *,
        max_length: int | None = None,
        padding: str = "longest",
        truncation: bool = True,
        text_pairs: str | Sequence[str] | None = None,
    ) -> tok.Batch:
        """Tokenize texts (or pairs, or lists of words) into a padded `Batch` with tokens and word ids.

        Parameters
        ----------
        texts : str or sequence of str or sequence of list of str
            One text, several, or pre-split words (lists of strings: word ids then refer to them).
        text_pair : str or sequence of str, optional
            Second segments: each row becomes `[CLS] text [SEP] pair [SEP]` with token type ids 0 then 1.
        max_length : int, optional
            Token limit, special tokens included (default: the encoder's `max_length`).
        padding : {'longest', 'max_length'}
            Pad to the longest row (the tutorial's way) or to `max_length`.
        truncation : bool
            Cut rows at the limit (and say so in `Batch.truncated`); False keeps them whole.
        text_pairs : str or sequence of str, optional
            Deprecated name of `text_pair`.

        Returns
        -------
        Batch
            `input_ids`, `attention_mask`, `token_type_ids` as tensors, plus `tokens` and `word_ids` per row.

        Examples
        --------
        >>> from bertkit import Encoder
        >>> enc = Encoder.from_pretrained()
        >>> enc.tokenize(["I love Korea", "a visually stunning rumination on love"]).tokens[1]
        ['[CLS]', 'a', 'visually', 'stunning', 'rum', '##ination', 'on', 'love', '[SEP]']
        """
        if padding not in tok.PADDINGS:
            raise InputError(f"padding={padding!r}: valid values are {', '.join(tok.PADDINGS)}.")
        text_pair = _renamed("text_pairs", text_pairs, "text_pair", text_pair)
        limit = self.check_max_length(max_length)
        encoded = tok.encode(
            self.tokenizer,
            _as_list(texts),
            _as_list(text_pair),
            max_length=limit,
            long_text="truncate" if truncation else "keep",
        )
        return tok.pad(
            encoded, self.tokenizer.pad_token_id, self.tokenizer.pad_token, limit if padding == "max_length" else None
        )

    def coverage(self, texts: Sequence[tok.Text]) -> Coverage:
        """Share of [UNK] tokens and other signs that the vocabulary does not fit the text's language."""
        texts = _as_list(texts)
        encoded = tok.encode(self.tokenizer, texts, max_length=self.max_length, long_text="keep")
        return coverage(encoded, texts, self.tokenizer.unk_token_id)

    def check_max_length(self, max_length: int | None) -> int:
        """`max_length`, or the model's limit for None; refused past what the position table takes."""
        if max_length is None:
            return self.max_length
        if not 2 < max_length <= self.position_limit:
            raise InputError(f"max_length={max_length}: this model takes between 3 and {self.position_limit} tokens.")
        return int(max_length)

    # ---- forward ------------------------------------------------------------------------------------------------
    def forward(self, batch: tok.Batch) -> ForwardOutput:
        """One no-grad pass returning last_hidden_state, pooler_output and all hidden_states."""
        inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        if self.takes_type_ids:
            inputs["token_type_ids"] = batch.token_type_ids
        return self.forward_inputs(inputs)

    def forward_inputs(self, inputs: dict[str, torch.Tensor]) -> ForwardOutput:
        """`forward` on padded input tensors (what the runner passes)."""
        inputs = {name: tensor.to(self.device, non_blocking=True) for name, tensor in inputs.items()}
        with torch.inference_mode(), autocast(self.precision, self.device):
            out = (self._int8 or self.model)(**inputs, output_hidden_states=True, return_dict=True)
        return ForwardOutput(
            last_hidden_state=out.last_hidden_state,
            pooler_output=getattr(out, "pooler_output", None) if self.has_pooler else None,
            hidden_states=tuple(out.hidden_states),
        )

    def runner(self, batch_size: int | None = None, pad_multiple: int = 1) -> Runner:
        """Return the runner of this encoder's forward passes (`batch_size` rows at most; None: the default)."""
        batch_size = self.default_batch_size if batch_size is None else batch_size
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size={batch_size}: give a positive batch size.")
        return Runner(
            self.forward_inputs,
            self.tokenizer.pad_token_id,
            self.device,
            self.max_batch_tokens,
            batch_size,
            self.concurrent_batches,
            self.takes_type_ids,
            pad_multiple,
            self.position_limit,
        )

    # ---- embeddings ---------------------------------------------------------------------------------------------
    def embed(
        self,
        texts: str | Sequence[tok.Text],
        options: EmbedOptions | None = None,
        *,
        text_pair: Sequence[str] | None = None,
        batch_size: int | None = None,
        ranges: np.ndarray | None = None,
        progress: bool | None = None,
        warn: bool = True,
        return_report: bool = False,
        **kwargs: Any,
    ) -> np.ndarray:
        """Sentence vectors in input order: an (n, dim) array.

        Parameters
        ----------
        texts : str or list
            Texts (one string is one text), or lists of the user's words.
        options : EmbedOptions, optional
            Every option at once; keyword options (below) replace its fields.
        text_pair : list of str, optional
            A second text for each (`[CLS] text [SEP] pair [SEP]`).
        batch_size : int, optional
            Texts per forward pass (length-sorted; the output keeps the input order). Default: 32 on a CPU; on a GPU
            as many as fit in `max_batch_tokens` padded tokens.
        ranges : numpy.ndarray, optional
            int8/uint8: each dimension's (2, dim) range; default: from bertkit's calibration sentences embedded
            with the same options, so separate calls share one mapping.
        progress : bool, optional
            Show a progress bar (default: for large inputs on a terminal).
        warn : bool
            Log truncation and poor vocabulary coverage.
        return_report : bool
            Deprecated: use `embed_with_report`.
        **kwargs
            `EmbedOptions` fields: layers ('last', '-2', 'last4:sum', 'all:concat', ...), pooling ('cls',
            'pooler', 'mean', 'max', joined by '+'; default the model's), max_length, long_text ('truncate',
            'error', 'window'), stride, truncation_direction, prompt, prompt_name, include_prompt, truncate_dim,
            normalize_embeddings (default the model's), output_type, dense.

        Returns
        -------
        numpy.ndarray
            (n, dim) in `output_type`.

        Examples
        --------
        >>> from bertkit import Encoder
        >>> enc = Encoder.from_pretrained()
        >>> enc.embed(["I love Korea", "the movie was great"], layers="last4:concat", pooling="cls").shape
        (2, 1536)
        """
        kwargs = _renamed_kwargs(kwargs, text_pair)
        text_pair = kwargs.pop("text_pair", text_pair)
        result = self.embed_with_report(
            texts,
            options,
            text_pair=text_pair,
            batch_size=batch_size,
            ranges=ranges,
            progress=progress,
            warn=warn,
            **kwargs,
        )
        if return_report or isinstance(result.vectors, list):
            what = "return_report=True" if return_report else "pooling='none'"
            instead = "embed_with_report" if return_report else "embed_tokens"
            warnings.warn(
                f"embed(..., {what}) is deprecated: use {instead}(), which returns one type; embed() will return "
                "sentence vectors only.",
                DeprecationWarning,
                stacklevel=2,
            )
            return (result.vectors, result.report) if return_report else result.vectors  # type: ignore[return-value]
        return result.vectors

    def embed_tokens(
        self,
        texts: str | Sequence[tok.Text],
        options: EmbedOptions | None = None,
        *,
        text_pair: Sequence[str] | None = None,
        batch_size: int | None = None,
        progress: bool | None = None,
        warn: bool = True,
        **kwargs: Any,
    ) -> list[TokenEmbedding]:
        """Each text's token vectors with its tokens and word ids (pooling='none').

        Parameters
        ----------
        texts : str or list
            Texts, or lists of the user's words.
        options : EmbedOptions, optional
            As `embed` takes them; pooling is 'none' whatever it says.
        text_pair, batch_size, progress, warn, **kwargs
            As `embed` takes them (layers, max_length, long_text, prompt, normalize_embeddings, ...).

        Returns
        -------
        list of TokenEmbedding

        Examples
        --------
        >>> from bertkit import Encoder
        >>> Encoder.from_pretrained().embed_tokens(["I love Korea"])[0].tokens
        ['[CLS]', 'i', 'love', 'korea', '[SEP]']
        """
        kwargs["pooling"] = "none"
        result = self.embed_with_report(
            texts, options, text_pair=text_pair, batch_size=batch_size, progress=progress, warn=warn, **kwargs
        )
        return result.vectors  # type: ignore[return-value]

    def embed_with_report(
        self,
        texts: str | Sequence[tok.Text],
        options: EmbedOptions | None = None,
        *,
        text_pair: Sequence[str] | None = None,
        batch_size: int | None = None,
        ranges: np.ndarray | None = None,
        progress: bool | None = None,
        warn: bool = True,
        **kwargs: Any,
    ) -> EmbedResult:
        """`embed` (or `embed_tokens`, for pooling='none') with the report of the call.

        Parameters
        ----------
        texts, options, text_pair, batch_size, ranges, progress, warn, **kwargs
            As `embed` takes them.

        Returns
        -------
        EmbedResult
            `vectors` and `report` (truncated rows, windows, coverage, the prompt used).
        """
        kwargs = _renamed_kwargs(kwargs, text_pair)
        text_pair = kwargs.pop("text_pair", text_pair)
        resolved = options_from(options, kwargs).resolve(self)
        head = self.vector_head(resolved)
        texts = _with_prompt(_as_list(texts), resolved.prompt or "")
        encoded, report = self._encode(texts, _as_list(text_pair), resolved)
        report.prompt = resolved.prompt or ""
        vectors: Any
        if resolved.token_vectors:
            vectors = [None] * len(texts)
            for rows, states, masks, _ in token_states(self.runner(batch_size), encoded, head, report, progress):
                for k, row in enumerate(rows):
                    length = int(masks[k].sum())
                    values = finish(states[k, :length].float().cpu().numpy(), resolved, token_vectors=True)
                    vectors[row] = TokenEmbedding(encoded[row].tokens, values, encoded[row].word_ids())
        else:
            pooled = np.zeros((len(texts), self._pooled_width(resolved)), dtype=np.float32)
            for rows, states, masks, poolers in token_states(self.runner(batch_size), encoded, head, report, progress):
                pooled[rows] = head.sentences(states, masks.to(states.device), poolers).cpu().numpy()
            if resolved.output_type in RANGED and ranges is None:
                ranges = self.calibration_ranges(resolved)
            vectors = finish(pooled, resolved, ranges)
        if warn:
            _warn(report)
        return EmbedResult(vectors, report)

    def calibration_ranges(self, options: EmbedOptions | None = None, **kwargs: Any) -> np.ndarray:
        """int8/uint8 ranges of bertkit's calibration sentences embedded with these options (once per options).

        Parameters
        ----------
        options : EmbedOptions, optional
            The options the vectors are made with (their output_type is ignored).
        **kwargs
            Option fields, as `embed` takes them.

        Returns
        -------
        numpy.ndarray
            (2, dim) minima and maxima.
        """
        resolved = options_from(options, kwargs).resolve(self).replace(output_type="float32")
        key = json.dumps(resolved.record(), sort_keys=True, default=str)
        if key not in self._ranges:
            self._ranges[key] = int8_ranges(self.embed(packaged_texts(), resolved, progress=False, warn=False))
        return self._ranges[key]

    def embed_words(
        self,
        sentences: Sequence[Sequence[str]],
        *,
        layers: str | int | Sequence[int] = "last",
        subtoken_pooling: str = "first",
        batch_size: int | None = None,
        max_length: int | None = None,
        long_text: str = "truncate",
        stride: int | None = None,
        progress: bool | None = None,
        return_report: bool = False,
    ) -> Any:
        """One vector per word the user gave (sub-tokens pooled back onto words): a list of (n_words, dim) arrays.

        Parameters
        ----------
        sentences : sequence of list of str
            Pre-split words, e.g. CoNLL's; a plain string is refused (split it first).
        layers : str or int or sequence of int
            As `embed` takes it.
        subtoken_pooling : {'first', 'mean', 'max', 'last'}
            How a word's sub-tokens become its vector ('first': the usual NER choice).
        batch_size, max_length, long_text, stride, progress
            As `embed` takes them; `long_text='window'` keeps every word of a long sentence.
        return_report : bool
            Also return the `EmbedReport` (its `words_without_tokens` counts words the tokenizer dropped).

        Returns
        -------
        list of numpy.ndarray
            One (n_words, dim) float32 array per sentence; `(vectors, report)` with `return_report`.

        Examples
        --------
        >>> from bertkit import Encoder
        >>> [v.shape for v in Encoder.from_pretrained().embed_words([["EU", "rejects", "German", "lamb"]])]
        [(4, 384)]
        """
        sentences = _as_list(sentences)
        for row, words in enumerate(sentences):
            if isinstance(words, str):
                raise InputError(f"sentences[{row}] is a string; embed_words takes lists of words (e.g. text.split()).")
        resolved = self.resolve(
            layers=layers, pooling="none", max_length=max_length, long_text=long_text, stride=stride, prompt=""
        )
        head = VectorHead.of(resolved, 0, ())
        encoded, report = self._encode(list(sentences), None, resolved)
        result: list = [None] * len(sentences)
        for rows, states, masks, _ in token_states(self.runner(batch_size), encoded, head, report, progress):
            for k, row in enumerate(rows):
                item = encoded[row]
                word_ids = item.word_ids()  # windowed inputs are never truncated, so these cover the whole text
                length = int(masks[k].sum())
                pooled = pool_words(states[k, :length], word_ids[:length], item.num_words, subtoken_pooling)
                report.words_without_tokens += item.num_words - len({w for w in word_ids if w is not None})
                result[row] = pooled.float().cpu().numpy()
        _warn(report)
        return (result, report) if return_report else result

    # ---- internals ----------------------------------------------------------------------------------------------
    def vector_head(self, resolved: EmbedOptions) -> VectorHead:
        """Return what turns this model's hidden states into vectors for resolved options.

        Layers, pooling, prompt tokens left out of the pooling, the model's Dense modules.
        """
        prompt_tokens = 0
        if resolved.prompt and not resolved.include_prompt:  # as sentence-transformers counts them: with the
            with tok.TOKENIZER_LOCK:  # leading special token, without the closing one
                ids = self.tokenizer(resolved.prompt)["input_ids"]
            prompt_tokens = len(ids) - (1 if ids and ids[-1] in set(self.tokenizer.all_special_ids) else 0)
        return VectorHead.of(resolved, prompt_tokens, self.sentence_config.dense)

    def _encode(self, texts: list, pairs: list | None, resolved: EmbedOptions) -> tuple[list[tok.Encoded], EmbedReport]:
        """Tokenize under the long-text policy and start the call's report (limit, truncated rows, coverage)."""
        if pairs is not None and resolved.long_text == "window":
            raise InputError("long_text='window' works on single texts, not sentence pairs; use 'truncate'.")
        report = EmbedReport(n_texts=len(texts), max_length=resolved.max_length or self.max_length)
        started = time.perf_counter()
        encoded = tok.encode(
            self.tokenizer,
            texts,
            pairs,
            max_length=report.max_length,
            long_text=resolved.long_text,
            direction=resolved.truncation_direction,
            stride=resolved.stride,
        )
        report.truncated_rows = [i for i, e in enumerate(encoded) if e.truncated]
        report.windowed_rows = [i for i, e in enumerate(encoded) if e.windows]
        report.coverage = coverage(encoded, texts, self.tokenizer.unk_token_id)
        report.tokenize_seconds = time.perf_counter() - started
        return encoded, report


def _renamed(old_name: str, old: Any, new_name: str, new: Any) -> Any:
    if old is None:
        return new
    warnings.warn(f"{old_name}= is now {new_name}=; {old_name}= goes in the next release.", DeprecationWarning, 3)
    return old


def _renamed_kwargs(kwargs: dict, text_pair: Any) -> dict:
    """`text_pairs` (bertkit 0.2) → `text_pair`, with a warning."""
    if "text_pairs" in kwargs:
        kwargs = dict(kwargs)
        kwargs["text_pair"] = _renamed("text_pairs", kwargs.pop("text_pairs"), "text_pair", text_pair)
    return kwargs


def _as_list(texts: Any) -> Any:
    if texts is None:
        return None
    return [texts] if isinstance(texts, str) else list(texts)


def _with_prompt(texts: list, prompt: str) -> list:
    if not prompt:
        return texts
    if any(not isinstance(text, str) for text in texts):
        raise InputError(
            "a prompt goes before texts, not before lists of words; join the words, or leave the prompt out."
        )
    return [prompt + text for text in texts]


def _warn(report: EmbedReport) -> None:
    if report.n_truncated:
        logger.warning(
            "%d of %d texts were longer than %d tokens and were truncated; use long_text='window' to keep all of them.",
            report.n_truncated,
            report.n_texts,
            report.max_length,
        )
    if report.coverage is not None and report.coverage.poor:
        logger.warning(report.coverage.message())
