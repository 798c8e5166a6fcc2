"""`Encoder`: a loaded encoder and its tokenizer, and vectors from any layer with any pooling.

Read top to bottom: loading and facts, tokenizing, the forward pass, then `embed` (sort → batch → forward → head →
unsort, in the runner's token-budget passes and the tokenizer's windows). The parts live beside it: `models` loads,
`tokenize` tokenizes, `runner` plans and runs the passes, `options` holds what an embedding asks for, `vectors`
turns hidden states into vectors.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from .. import display
from ..errors import InputError
from . import tokenize as tok
from .attribution import DEFAULT_STEPS, Attribution
from .compact import RANGED, compact, int8_ranges
from .coverage import Coverage, combined, coverage
from .defaults import DEFAULT_BATCH_SIZE, GPU_CHUNK_TEXTS
from .devices import describe, resolve_device
from .engines import check_engine, encoder_digest
from .int8 import packaged_texts
from .models import LoadedModel, ModelSource, load_model, resolve_model
from .network import Network
from .options import EmbedOptions, options_from
from .pooling import pool_words
from .precision import check_precision
from .progress import Progress
from .results import EmbedReport, EmbedResult, TokenEmbedding
from .runner import Runner
from .st_config import SentenceConfig
from .static import STATIC_BATCH_SIZE, StaticTable, static_settings
from .threads import computed_ahead, total_threads
from .vectors import PROGRESS_MIN_ROWS, VectorHead, token_states, vector_head

logger = logging.getLogger(__name__)

E = TypeVar("E", bound="Encoder")


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
        precision: str = "fp32",
        concurrent_batches: int | None = None,
        device: str | torch.device | None = "auto",
        engine: str | None = None,
    ) -> None:
        self._loaded = loaded
        if isinstance(loaded.model, StaticTable):
            precision, engine = static_settings(precision, engine)
        self.model, self.tokenizer, self.max_length = loaded.model, loaded.tokenizer, loaded.max_length
        self._position_limit = loaded.position_limit or loaded.max_length
        for note in loaded.warnings:
            logger.warning("%s: %s", loaded.source.spec, note)
        source = loaded.source
        self.network = Network(
            loaded.model,
            loaded.tokenizer,
            width=self._position_limit,
            max_length=loaded.max_length,
            digest=lambda: self.fingerprint,
            source=source.spec,
            device=device,
            precision=precision,
            engine=engine,
            concurrent_batches=concurrent_batches,
            calibration_dir=source.path if source.kind in ("local", "default") else None,
            half_copy=True,
            call_options={"output_hidden_states": True, "return_dict": True},  # every hidden state (and a pooler's)
        )
        self.device, self.precision, self.engine = self.network.device, self.network.precision, self.network.engine
        self.engine_reason = self.network.engine_reason if self.num_layers else "a static model is a table lookup"
        self._chunk_texts = GPU_CHUNK_TEXTS if self.device.type == "cuda" else None  # encode.py: _encoded_chunks
        self._ranges: dict[str, np.ndarray] = {}  # int8/uint8 ranges of the calibration sentences, by options

    @classmethod
    def from_pretrained(
        cls: type[E],
        model: str | None = None,
        *,
        precision: str = "fp32",
        concurrent_batches: int | None = None,
        device: str | torch.device | None = "auto",
        engine: str | None = None,
    ) -> E:
        """Load the packaged default (None), a local directory saved with `save_pretrained`, or a hub name.

        Parameters
        ----------
        model : str, optional
            None (or 'default') is the packaged all-MiniLM-L6-v2; else a model directory or a hub name.
        precision : str
            'fp32'; 'bf16' (GPUs that have it: bf16 weights; CPUs with native bf16: autocast); 'fp16' (GPUs: fp16
            weights); 'int8' (a CPU copy of the model with int8 linear layers, calibrated once and cached).
        concurrent_batches : int, optional
            Batches in flight at once, sharing the CPU threads (default: 2 with 2 or more threads, 1 on a GPU).
        device : str
            'auto' (CUDA, then MPS, then the CPU), 'cpu', 'cuda', 'cuda:N' or 'mps'.
        engine : str, optional
            What runs the forward passes: 'auto' (OpenVINO for fp32 and bf16 on a CPU when it is installed, else
            torch), 'torch' or 'openvino'; None reads $BERTKIT_ENGINE, else 'auto'. `engine` and `engine_reason`
            say what was chosen and why.

        Returns
        -------
        Encoder
        """
        wanted = resolve_device(device)
        check_engine(engine, wanted, check_precision(precision, device=wanted))  # before the model loads
        return cls(load_model(resolve_model(model)), precision, concurrent_batches, wanted, engine)

    def with_options(
        self: E, *, precision: str | None = None, concurrent_batches: int | None = None, engine: str | None = None
    ) -> E:
        """Another `Encoder` over the same loaded weights and tokenizer, at another precision or concurrency.

        Parameters
        ----------
        precision : str, optional
            'fp32', 'bf16' or 'int8'; None keeps this encoder's.
        concurrent_batches : int, optional
            Batches in flight at once; None keeps this encoder's.
        engine : str, optional
            'auto', 'torch' or 'openvino'; None keeps the one this encoder was asked for.

        Returns
        -------
        Encoder
            Shares the model's memory with this one (int8 builds its own int8 copy).
        """
        batches = self.network.concurrent_batches if concurrent_batches is None else concurrent_batches
        engine = engine or self.network.engine_asked
        return type(self)(self._loaded, precision or self.precision, batches, self.device, engine)

    # ---- facts about the model -------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"Encoder({self.source.spec!r}: {type(self.model).__name__}, {self.num_layers} layers, "
            f"hidden {self.hidden_size}, max_length {self.max_length}, {self.precision} on {describe(self.device)})"
        )

    def _repr_html_(self) -> str:
        shown = ("architecture", "layers", "hidden_size", "attention_heads", "max_length", "vocab_size", "cased")
        facts = {k: v for k, v in self.info().items() if k in shown}
        facts.update(pooler=self.has_pooler, precision=self.precision, device=describe(self.device))
        return display.facts_table(facts, f"Encoder {self.source.spec!r}")

    @property
    def source(self) -> ModelSource:
        """Where the model came from: its spec, its local path or hub id, and which of the two."""
        return self._loaded.source

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
        return self._loaded.has_pooler

    @property
    def sentence_config(self) -> SentenceConfig:
        """What the model's sentence-transformers files say: pooling, Dense, Normalize, prompts."""
        return self._loaded.sentence_config

    fingerprint = functools.cached_property(encoder_digest)  # equal fingerprints mean equal embeddings

    @property
    def _default_batch_size(self) -> int:
        """Texts per pass when none is asked for.

        32 on a CPU (measured best on small CPUs with length-sorted batches); on a GPU, no row limit: the token budget
        (`max_batch_tokens`) decides. A static model: 256 (`STATIC_BATCH_SIZE`).
        """
        if self.num_layers == 0:
            return STATIC_BATCH_SIZE
        return DEFAULT_BATCH_SIZE if self.device.type == "cpu" else self.network.max_batch_tokens

    def info(self) -> dict:
        """Architecture, layers, hidden size, max length, vocabulary size, casing, and the sentence defaults."""
        config, sentence = self.model.config, self.sentence_config
        return {
            "model": self.source.spec,
            "path": self._loaded.source.path,
            "architecture": type(self.model).__name__,
            "model_type": config.model_type,
            "layers": self.num_layers,
            "hidden_states": self.num_layers + 1,
            "hidden_size": self.hidden_size,
            "attention_heads": getattr(config, "num_attention_heads", getattr(config, "n_heads", None)),
            "max_length": self.max_length,
            "max_length_source": self._loaded.max_length_source,
            "position_limit": self._position_limit,
            "vocab_size": len(self.tokenizer),
            "cased": self._loaded.is_cased,
            "pooler": self.has_pooler,
            "token_type_ids": self.network.takes_type_ids,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "precision": self.precision,
            "device": describe(self.device),
            "pooling": sentence.pooling or "mean",
            "normalize": sentence.normalize,
            "dense": [f"{d.in_features}→{d.out_features} {d.activation}" for d in sentence.dense],
            "prompts": dict(sentence.prompts),
            "default_prompt_name": sentence.default_prompt_name,
            "threads": total_threads(),
            "concurrent_batches": self.network.concurrent_batches,
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
        limit = self.check_max_length(max_length)
        long_text = "truncate" if truncation else "keep"
        encoded = tok.encode(self.tokenizer, as_list(texts), as_list(text_pair), max_length=limit, long_text=long_text)
        pad_to = limit if padding == "max_length" else None
        return tok.pad(encoded, self.tokenizer.pad_token_id, self.tokenizer.pad_token, pad_to)

    def check_max_length(self, max_length: int | None) -> int:
        """Return `max_length`, or the model's limit for None; refused past what the position table takes.

        Parameters
        ----------
        max_length : int, optional
            Tokens per text.

        Returns
        -------
        int
            The limit to use.
        """
        if max_length is None:
            return self.max_length
        if not 2 < max_length <= self._position_limit:
            raise InputError(f"max_length={max_length}: this model takes between 3 and {self._position_limit} tokens.")
        return int(max_length)

    # ---- forward ------------------------------------------------------------------------------------------------
    def forward(self, batch: tok.Batch) -> ForwardOutput:
        """One no-grad pass returning last_hidden_state, pooler_output and all hidden_states."""
        inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        if self.network.takes_type_ids:
            inputs["token_type_ids"] = batch.token_type_ids
        out = self.network.forward_inputs(inputs)
        pooler = getattr(out, "pooler_output", None) if self.has_pooler else None
        return ForwardOutput(out.last_hidden_state, pooler, tuple(out.hidden_states))

    def runner(self, batch_size: int | None = None) -> Runner:
        """Return the runner of this encoder's forward passes (`batch_size` rows at most; None: the default)."""
        return self.network.runner(self._default_batch_size if batch_size is None else batch_size)

    # ---- vector widths -------------------------------------------------------------------------------------------
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
        if kwargs.get("pooling", getattr(options, "pooling", None)) == "none":
            raise InputError("embed returns sentence vectors; for token vectors (pooling='none') use embed_tokens.")
        settings: dict[str, Any] = dict(text_pair=text_pair, batch_size=batch_size, ranges=ranges, progress=progress)
        return self.embed_with_report(texts, options, **settings, warn=warn, **kwargs).vectors  # type: ignore[return-value]

    def encode(
        self,
        sentences: str | Sequence[str],
        prompt_name: str | None = None,
        prompt: str | None = None,
        batch_size: int = 32,
        show_progress_bar: bool | None = None,
        output_value: str | None = "sentence_embedding",
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: str | torch.device | None = None,
        normalize_embeddings: bool = False,
        truncate_dim: int | None = None,
    ) -> np.ndarray | torch.Tensor | list[torch.Tensor]:
        """Embed as sentence-transformers' `SentenceTransformer.encode` does: its parameters, defaults and returns.

        Code written for sentence-transformers (and the LangChain, LlamaIndex and Haystack wrappers around it) runs
        on bertkit unchanged; the vectors are `embed`'s with its default options.

        Parameters
        ----------
        sentences : str or list of str
            One text (a 1-D result) or several (2-D).
        prompt_name, prompt : str, optional
            As `embed` takes them.
        batch_size : int
            Texts per forward pass.
        show_progress_bar : bool, optional
            Show a progress bar.
        output_value : str
            'sentence_embedding' (token vectors come from `embed_tokens`).
        precision : str
            'float32', 'int8', 'uint8', 'binary' or 'ubinary' (`embed`'s `output_type`; int8 / uint8 ranges are
            bertkit's calibration, not the batch's own minimum and maximum).
        convert_to_numpy, convert_to_tensor : bool
            A NumPy array (default), one torch tensor, or (both False) a list of tensors.
        device : str, optional
            Must be the encoder's device, if given (the model is not moved).
        normalize_embeddings : bool
            True: unit length. False: as the model's own configuration says (its Normalize module, as in
            sentence-transformers).
        truncate_dim : int, optional
            Keep the first N numbers of each vector, after the model's own normalization (as sentence-transformers
            does: not unit length then, unless `normalize_embeddings`; `embed` normalizes after cutting).

        Returns
        -------
        numpy.ndarray, torch.Tensor or list of torch.Tensor

        Examples
        --------
        >>> from bertkit import Encoder
        >>> Encoder.from_pretrained().encode(["I love Korea", "a film"], batch_size=16).shape
        (2, 384)
        """
        if output_value != "sentence_embedding":
            raise InputError(
                f"output_value={output_value!r}: encode gives sentence embeddings; token vectors come from "
                "Encoder.embed_tokens."
            )
        if device is not None and resolve_device(device) != self.device:
            raise InputError(f"device={device!r}: this encoder runs on {self.device}; load it there instead.")
        single = isinstance(sentences, str)
        cut_after = truncate_dim is not None and not normalize_embeddings and precision not in RANGED
        vectors = self.embed(
            [sentences] if single else list(sentences),
            prompt=prompt,
            prompt_name=prompt_name,
            batch_size=batch_size,
            progress=show_progress_bar,
            output_type="float32" if cut_after else precision,
            normalize_embeddings=True if normalize_embeddings else None,
            truncate_dim=None if cut_after else truncate_dim,
        )
        if cut_after:  # sentence-transformers cuts the model's (normalized) output, then makes it compact
            vectors = compact(np.ascontiguousarray(vectors[:, :truncate_dim]), precision)
        if convert_to_tensor:
            found: Any = torch.from_numpy(vectors)
        elif not convert_to_numpy:
            found = list(torch.from_numpy(vectors))
        else:
            found = vectors
        return found[0] if single else found

    def explain(
        self,
        text: str,
        other: str,
        options: EmbedOptions | None = None,
        *,
        metric: str = "cosine",
        n_steps: int = DEFAULT_STEPS,
        baseline: str = "pad",
        **kwargs: Any,
    ) -> Attribution:
        """Which words make two texts similar: Integrated Gradients of their similarity, one text at a time.

        `attribute_similarity(self, ...)`: `metric` is 'cosine' or 'dot', the options are `embed`'s.

        Returns
        -------
        Attribution
            The similarity and each text's word scores; `to_dict()` is its JSON.

        Examples
        --------
        >>> from bertkit import Encoder
        >>> result = Encoder.from_pretrained().explain("a great movie", "a wonderful film")
        >>> [text.words for text in result.texts]
        [['a', 'great', 'movie'], ['a', 'wonderful', 'film']]
        """
        from .attribution import attribute_similarity

        return attribute_similarity(
            self, text, other, options, metric=metric, n_steps=n_steps, baseline=baseline, **kwargs
        )

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
        resolved = options_from(options, kwargs).resolve(self)
        head = vector_head(self, resolved)
        texts = tok.with_prompt(as_list(texts), resolved.prompt or "")
        pairs = as_list(text_pair)
        runner = self.runner(batch_size)
        report = EmbedReport(n_texts=len(texts), max_length=resolved.max_length or self.max_length)
        coverages: list[tuple[int, Coverage]] = []
        bar = Progress("embed", len(texts), "texts", show=progress, min_total=PROGRESS_MIN_ROWS)
        token_vectors: list = [None] * len(texts)
        width = resolved.truncate_dim or self._pooled_width(resolved)
        pooled = np.zeros((0 if resolved.token_vectors else len(texts), width), np.float32)
        waiting: list[tuple[np.ndarray, torch.Tensor]] = []  # pooled rows still on the device, copied a chunk late
        with bar:
            offsets = resolved.token_vectors or pairs is not None  # sentence vectors read no character offsets
            for first, encoded, part in self._encoded_chunks(texts, pairs, resolved, offsets):
                report.add_chunk(part, first)
                coverages.append((first, part.coverage))  # type: ignore[arg-type]
                done = len(waiting)
                for rows, states, masks, poolers in token_states(runner, encoded, head, part, bar):
                    if resolved.token_vectors:
                        for k, row in enumerate(rows):
                            length = int(masks[k].sum())
                            values = head.unit(states[k, :length].float()).cpu().numpy()
                            item = encoded[row]
                            token_vectors[first + row] = TokenEmbedding(item.tokens, values, item.word_ids())
                    else:
                        sentences = head.sentences(states, masks.to(states.device, non_blocking=True), poolers)
                        waiting.append((first + np.asarray(rows), sentences))
                _copy_back(pooled, waiting[:done])  # the chunk before: its passes have long finished on the device
                del waiting[:done]
            _copy_back(pooled, waiting)
        report.coverage = combined(coverages)
        report.prompt = resolved.prompt or ""
        report.forward_seconds = runner.forward_seconds
        if resolved.output_type in RANGED and ranges is None:  # token vectors are float32: never ranged
            ranges = calibration_ranges(self, resolved)
        vectors: Any = token_vectors if resolved.token_vectors else compact(pooled, resolved.output_type, ranges)
        if warn:
            _warn(report, pairs=text_pair is not None)
        return EmbedResult(vectors, report)

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
        subtoken_pooling : {'first', 'last', 'mean', 'first_last'}
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
        sentences = as_list(sentences)
        for row, words in enumerate(sentences):
            if isinstance(words, str):
                raise InputError(f"sentences[{row}] is a string; embed_words takes lists of words (e.g. text.split()).")
        given = dict(layers=layers, pooling="none", max_length=max_length, long_text=long_text, stride=stride)
        resolved = options_from(None, given | {"prompt": ""}).resolve(self)
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
    def _encoded_chunks(
        self, texts: list, pairs: list | None, resolved: EmbedOptions, offsets: bool = True
    ) -> Iterator[tuple]:
        """(first row, encodings, report) of each chunk of `_chunk_texts` texts, the next tokenized meanwhile (GPU).

        On a CPU a call is one chunk; on a GPU the device is not idle while the host tokenizes the next texts.
        """
        size = self._chunk_texts or len(texts)
        if len(texts) <= size or resolved.long_text == "error":  # 'error' refuses before any pass runs
            yield 0, *self._encode(texts, pairs, resolved, offsets)
            return
        tok.check_inputs(texts, pairs)  # a bad text is named by its row in the call, not in its chunk
        chunk = lambda a: (
            a,
            *self._encode(texts[a : a + size], pairs[a : a + size] if pairs else None, resolved, offsets),
        )  # noqa: E731
        yield from computed_ahead(chunk, range(0, len(texts), size))

    def _encode(
        self, texts: list, pairs: list | None, resolved: EmbedOptions, offsets: bool = True
    ) -> tuple[list[tok.Encoded], EmbedReport]:
        """Tokenize under the long-text policy and start the call's report (limit, truncated rows, coverage).

        `offsets=False`: without character offsets (sentence vectors read none; `tok.encode`).
        """
        if pairs is not None and resolved.long_text == "window":
            raise InputError("long_text='window' works on single texts, not sentence pairs; use 'truncate'.")
        report = EmbedReport(n_texts=len(texts), max_length=resolved.max_length or self.max_length)
        started = time.perf_counter()
        policy: dict[str, Any] = dict(
            long_text=resolved.long_text, direction=resolved.truncation_direction, stride=resolved.stride
        )
        encoded = tok.encode(self.tokenizer, texts, pairs, max_length=report.max_length, offsets=offsets, **policy)
        report.truncated_rows = [i for i, e in enumerate(encoded) if e.truncated]
        report.windowed_rows = [i for i, e in enumerate(encoded) if e.windows]
        report.coverage = coverage(encoded, self.tokenizer.unk_token_id)
        report.tokenize_seconds = time.perf_counter() - started
        return encoded, report


def _copy_back(pooled: np.ndarray, waiting: list[tuple[np.ndarray, torch.Tensor]]) -> None:
    """Copy pooled rows from the device into `pooled`: one copy (one synchronisation) for all of them."""
    if waiting:
        pooled[np.concatenate([rows for rows, _ in waiting])] = torch.cat([v for _, v in waiting]).cpu().numpy()


def calibration_ranges(encoder: Encoder, options: EmbedOptions | None = None, **kwargs: Any) -> np.ndarray:
    """int8/uint8 ranges of bertkit's calibration sentences embedded with these options (once per options).

    Parameters
    ----------
    encoder : Encoder
        The encoder the vectors come from.
    options : EmbedOptions, optional
        The options the vectors are made with (their output_type is ignored). long_text='error' is the caller's
        policy for the caller's texts: a calibration sentence over max_length is cut ('truncate'), not refused.
    **kwargs
        Option fields, as `embed` takes them.

    Returns
    -------
    numpy.ndarray
        (2, dim) minima and maxima.
    """
    resolved = options_from(options, kwargs).resolve(encoder)
    cut = "truncate" if resolved.long_text == "error" else resolved.long_text  # a window's vectors stay windowed
    resolved = resolved.replace(output_type="float32", long_text=cut)
    key = json.dumps(resolved.record(), sort_keys=True, default=str)
    if key not in encoder._ranges:
        encoder._ranges[key] = int8_ranges(encoder.embed(packaged_texts(), resolved, progress=False, warn=False))
    return encoder._ranges[key]


def _warn(report: EmbedReport, pairs: bool = False) -> None:
    tok.warn_truncated(report.n_truncated, report.n_texts, report.max_length, pairs)
    if report.coverage is not None and report.coverage.poor:
        logger.warning(report.coverage.message())


def vectors_record(encoder: Encoder, resolved: EmbedOptions) -> dict:
    """Record what decides a vector besides its text: cache keys, vector files and runs keep it.

    The weights' fingerprint, the resolved options, the precision and, at int8, the calibration's digest (so int8
    vectors of two calibrations are never mixed up).
    """
    record = {"fingerprint": encoder.fingerprint, **resolved.record(), "precision": encoder.precision}
    if encoder.network.int8_calibration is not None:
        record["int8_calibration"] = encoder.network.int8_calibration
    return record


def as_list(texts: Any) -> Any:
    """Return texts as a list (one string is one text); None stays None."""
    if texts is None:
        return None
    return [texts] if isinstance(texts, str) else list(texts)
