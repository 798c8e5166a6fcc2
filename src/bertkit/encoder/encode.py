"""Encoder: batched, length-sorted forward passes; layer selection, sentence pooling and word vectors on top."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from ..display import MAX_ROWS, facts_table, html_table
from ..errors import InputError
from . import tokenize as tok
from .compact import RANGED, check_output_type, compact, int8_ranges
from .defaults import DEFAULT_BATCH_SIZE
from .devices import OutOfDeviceMemory, describe, resolve_device, token_budget
from .int8 import int8_model_for
from .layers import LayerSelection, parse_layers
from .models import LoadedModel, ModelSource, load_model, resolve_model
from .pooling import parse_pooling, pool_sentences, pool_words
from .precision import autocast, check_precision
from .threads import forward_in_parallel, set_threads, total_threads
from .windows import pad_windows, sorted_batches, split_into_windows, stitch

logger = logging.getLogger(__name__)

PROGRESS_MIN_ROWS = 256
_PATH_DEPENDENT_CONFIG = {"_name_or_path", "transformers_version", "_commit_hash", "name_or_path"}


@dataclass
class ForwardOutput:
    """What one forward pass returns: last layer, pooler (None without one), and embeddings + every layer."""

    last_hidden_state: torch.Tensor  # (batch, seq, hidden)
    pooler_output: torch.Tensor | None  # (batch, hidden)
    hidden_states: tuple[torch.Tensor, ...]  # layers + 1 tensors of (batch, seq, hidden)


@dataclass(repr=False)
class TokenEmbedding:
    """Per-token vectors of one text (padding removed) with the tokens they belong to."""

    tokens: list[str]
    vectors: np.ndarray  # (num_tokens, dim) float32
    word_ids: list[int | None]

    def _rows(self) -> list[dict]:
        norms = np.linalg.norm(self.vectors, axis=1) if len(self.vectors) else []
        return [
            {"position": i, "token": t, "word": w, "norm": float(n), "first values": _head(v)}
            for i, (t, w, n, v) in enumerate(zip(self.tokens, self.word_ids, norms, self.vectors))
        ]

    def __repr__(self) -> str:
        shape = "×".join(map(str, self.vectors.shape))
        return f"TokenEmbedding({len(self.tokens)} tokens, vectors {shape}: {' '.join(self.tokens[:MAX_ROWS])})"

    def _repr_html_(self) -> str:
        caption = (
            f"{len(self.tokens)} token vectors of {self.vectors.shape[1] if self.vectors.ndim == 2 else 0} numbers"
        )
        return html_table(self._rows(), ["position", "token", "word", "norm", "first values"], caption)


def _head(vector: np.ndarray, count: int = 4) -> str:
    return "[" + ", ".join(f"{x:.3f}" for x in vector[:count]) + (", …]" if len(vector) > count else "]")


@dataclass
class EmbedReport:
    """What happened during an `embed` call: truncation, windows, vocabulary coverage."""

    n_texts: int = 0
    max_length: int = 0  # the token limit this call applied (the caller's max_length, else the model's)
    truncated_rows: list[int] = field(default_factory=list)
    windowed_rows: list[int] = field(default_factory=list)
    words_without_tokens: int = 0
    coverage: tok.Coverage | None = None
    prompt: str = ""  # the prompt put before every text ('' for none)

    @property
    def n_truncated(self) -> int:
        """How many texts were cut at the token limit."""
        return len(self.truncated_rows)

    def facts(self) -> dict[str, str]:
        """What the report says, one line per fact: what `repr` and Jupyter show."""
        rows = lambda found: ", ".join(map(str, found[:10])) + (" …" if len(found) > 10 else "")  # noqa: E731
        facts = {
            "texts": str(self.n_texts),
            "token limit": str(self.max_length),
            "truncated": f"{self.n_truncated}"
            + (f" (rows {rows(self.truncated_rows)})" if self.truncated_rows else ""),
            "in windows": f"{len(self.windowed_rows)}"
            + (f" (rows {rows(self.windowed_rows)})" if self.windowed_rows else ""),
        }
        if self.coverage is not None:
            facts["vocabulary coverage"] = self.coverage.message()
        if self.words_without_tokens:
            facts["words without tokens"] = str(self.words_without_tokens)
        if self.prompt:
            facts["prompt"] = repr(self.prompt)
        return facts

    def __repr__(self) -> str:
        return "EmbedReport(" + "; ".join(f"{name}: {value}" for name, value in self.facts().items()) + ")"

    def _repr_html_(self) -> str:
        return facts_table(self.facts(), "EmbedReport")


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
    ):
        self._loaded = loaded
        self.device = resolve_device(device)
        self.precision = check_precision(precision, device=self.device)
        self.model = loaded.model.to(self.device)
        self.tokenizer = loaded.tokenizer
        self.max_length = loaded.max_length
        self.position_limit = loaded.position_limit or loaded.max_length
        set_threads(threads)
        self._fingerprint: str | None = None
        if concurrent_batches is None:  # a GPU takes one batch at a time; CPU cores each take their own
            concurrent_batches = 1 if self.device.type != "cpu" else min(total_threads(), 2)
        if concurrent_batches < 1:
            raise InputError(f"concurrent_batches={concurrent_batches}: give 1 or more.")
        self.concurrent_batches = int(concurrent_batches)
        self._accepts_type_ids = "token_type_ids" in inspect.signature(self.model.forward).parameters
        for note in loaded.warnings:
            logger.warning("%s: %s", loaded.source.spec, note)
        # int8: a copy of the model with int8 linear layers (int8.py), and the digest of the calibration it uses
        self._int8: torch.nn.Module | None = None
        self.int8_calibration: str | None = None  # the digest of the calibration texts int8 was calibrated on
        if self.precision == "int8":
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
            torch's CPU threads (default: torch's choice).
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
        wanted = resolve_device(device)
        check_precision(precision, device=wanted)
        return cls(
            load_model(resolve_model(model)),
            threads=threads,
            precision=precision,
            concurrent_batches=concurrent_batches,
            device=wanted,
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
            self._loaded,
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
        return facts_table(facts, f"Encoder {self.name!r}")

    @property
    def source(self) -> ModelSource:
        """Where the model came from: its spec, its local path or hub id, and which of the two."""
        return self._loaded.source

    @property
    def name(self) -> str:
        """The model as it was asked for: 'default', a folder or a hub name."""
        return self._loaded.source.spec

    @property
    def num_layers(self) -> int:
        """Transformer layers; `embed` sees one more hidden state (the embeddings' output, layer 0)."""
        return int(self.model.config.num_hidden_layers)

    @property
    def hidden_size(self) -> int:
        """Width of every hidden state (384 for the packaged model)."""
        return int(self.model.config.hidden_size)

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
            self._fingerprint = digest.hexdigest()[:32]
        return self._fingerprint

    def precision_record(self) -> dict:
        """What decides the arithmetic besides the weights: the precision and, for int8, the calibration's digest.

        Cache keys and run records include it, so int8 vectors from two calibrations are never mixed up.
        """
        if self.int8_calibration is None:
            return {"precision": self.precision}
        return {"precision": self.precision, "int8_calibration": self.int8_calibration}

    @property
    def default_batch_size(self) -> int:
        """Texts per pass when none is asked for: 32 on a CPU (measured best on small CPUs with length-sorted
        batches); on a GPU, no row limit: the token budget (`max_batch_tokens`) decides."""
        return DEFAULT_BATCH_SIZE if self.device.type == "cpu" else self.max_batch_tokens

    @property
    def has_pooler(self) -> bool:
        """Whether the model has BERT's pooler (a dense layer with tanh on `[CLS]`), which `pooling='pooler'` needs."""
        return self._loaded.has_pooler

    def sentence_dim(self, layers: str | LayerSelection = "last", pooling: str | tuple[str, ...] = "mean") -> int:
        """Width of the sentence vectors `embed` returns for these options.

        Parameters
        ----------
        layers : str or LayerSelection
            As `embed` takes it ('last', 'last4:concat', 'all:concat', ...).
        pooling : str or tuple of str
            As `embed` takes it; several poolings ('cls+mean') are concatenated.

        Returns
        -------
        int
            The number of columns, e.g. 384 for 'last' and 1536 for 'last4:concat' on the packaged model.
        """
        selection = parse_layers(layers)
        methods = parse_pooling(pooling) if isinstance(pooling, str) else pooling
        per_layer = selection.output_dim(self.hidden_size, self.num_layers + 1)
        return sum(self.hidden_size if method == "pooler" else per_layer for method in methods)

    def info(self) -> dict:
        """Architecture, layers, hidden size, max length, vocabulary size and casing."""
        config = self.model.config
        return {
            "model": self.name,
            "path": self._loaded.source.path,
            "architecture": type(self.model).__name__,
            "model_type": config.model_type,
            "layers": self.num_layers,
            "hidden_states": self.num_layers + 1,
            "hidden_size": self.hidden_size,
            "attention_heads": getattr(config, "num_attention_heads", getattr(config, "n_heads", None)),
            "max_length": self.max_length,
            "max_length_source": self._loaded.max_length_source,
            "position_limit": self.position_limit,
            "vocab_size": len(self.tokenizer),
            "cased": self._loaded.is_cased,
            "pooler": self.has_pooler,
            "token_type_ids": self._accepts_type_ids,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "precision": self.precision,
            "device": describe(self.device),
            "prompts": dict(self._loaded.prompts),
            "default_prompt_name": self._loaded.default_prompt_name,
            "threads": total_threads(),
            "concurrent_batches": self.concurrent_batches,
        }

    # ---- tokenization -------------------------------------------------------------------------------------------
    def tokenize(
        self,
        texts: str | Sequence[tok.Text],
        text_pairs: str | Sequence[str] | None = None,
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
        text_pairs : str or sequence of str, optional
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
        texts, text_pairs = _as_list(texts), _as_list(text_pairs)
        limit = self._max_length(max_length)
        encoded = tok.encode(
            self.tokenizer, texts, text_pairs, max_length=limit, long_text="truncate" if truncation else "keep"
        )
        return self._pad(encoded, pad_to=limit if padding == "max_length" else None)

    def coverage(self, texts: Sequence[tok.Text]) -> tok.Coverage:
        """Share of [UNK] tokens and other signs that the vocabulary does not fit the text's language."""
        texts = _as_list(texts)
        encoded = tok.encode(self.tokenizer, texts, max_length=self.max_length, long_text="keep")
        return tok.coverage(encoded, texts, self.tokenizer.unk_token_id)

    def _max_length(self, max_length: int | None) -> int:
        if max_length is None:
            return self.max_length
        if not 2 < max_length <= self.position_limit:
            raise InputError(f"max_length={max_length}: this model takes between 3 and {self.position_limit} tokens.")
        return int(max_length)

    def _pad(self, encoded: Sequence[tok.Encoded], pad_to: int | None = None, with_views: bool = True) -> tok.Batch:
        return tok.pad(encoded, self.tokenizer.pad_token_id, self.tokenizer.pad_token, pad_to, with_views)

    # ---- forward ------------------------------------------------------------------------------------------------
    def forward(self, batch: tok.Batch) -> ForwardOutput:
        """One no-grad pass returning last_hidden_state, pooler_output and all hidden_states."""
        inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        if self._accepts_type_ids:
            inputs["token_type_ids"] = batch.token_type_ids
        inputs = {name: tensor.to(self.device, non_blocking=True) for name, tensor in inputs.items()}
        with torch.inference_mode(), autocast(self.precision, self.device):
            out = (self._int8 or self.model)(**inputs, output_hidden_states=True, return_dict=True)
        return ForwardOutput(
            last_hidden_state=out.last_hidden_state,
            pooler_output=getattr(out, "pooler_output", None) if self.has_pooler else None,
            hidden_states=tuple(out.hidden_states),
        )

    # ---- embeddings ---------------------------------------------------------------------------------------------
    def embed(
        self,
        texts: str | Sequence[tok.Text],
        *,
        layers: str | int | Sequence[int] = "last",
        pooling: str = "mean",
        text_pairs: Sequence[str] | None = None,
        batch_size: int | None = None,
        max_length: int | None = None,
        long_text: str = "truncate",
        stride: int | None = None,
        truncation_direction: str = "right",
        prompt: str | None = None,
        prompt_name: str | None = None,
        include_prompt: bool | None = None,
        dimensions: int | None = None,
        normalize: bool = False,
        output: str = "float32",
        ranges: np.ndarray | None = None,
        progress: bool | None = None,
        return_report: bool = False,
        warn: bool = True,
    ):
        """Sentence vectors in input order (or, with pooling='none', each text's token vectors).

        Parameters
        ----------
        texts : str or list
            Texts (one string is one text), or lists of the user's words.
        layers : str, int or list of int
            Which hidden states: 'last', '-2', 'last4:sum', 'all:concat', ... (see `parse_layers`).
        pooling : str
            'cls', 'pooler', 'mean', 'max', several joined by '+', or 'none' for token vectors.
        text_pairs : list of str, optional
            A second text for each (`[CLS] text [SEP] pair [SEP]`).
        batch_size : int, optional
            Texts per forward pass (length-sorted; the output keeps the input order). Default: 32 on a CPU; on a GPU
            as many as fit in `max_batch_tokens` padded tokens.
        max_length : int, optional
            The token limit (default: the model's, see `info()`).
        long_text : str
            'truncate' (reported), 'error', or 'window' (overlapping windows of `stride` shared tokens).
        truncation_direction : str
            'right' keeps a long text's beginning, 'left' its end (TEI's option).
        prompt, prompt_name : str, optional
            A text put before every input ('query: '), or the name of one of the model's prompts
            (config_sentence_transformers.json; its default prompt applies when neither is given). `prompt` wins.
        include_prompt : bool, optional
            False keeps the prompt's tokens out of mean and max pooling (default: the model's Pooling config).
        dimensions : int, optional
            Keep the first `dimensions` numbers of each vector (Matryoshka truncation), before `normalize`.
        normalize : bool
            Scale each vector to unit length.
        output : str
            'float32', 'float16', 'int8', 'uint8', 'binary' or 'ubinary' (see `compact`).
        ranges : numpy.ndarray, optional
            int8/uint8: each dimension's (2, dim) range; default: from bertkit's calibration sentences embedded
            with the same options, so separate calls share one mapping.
        progress : bool, optional
            Show a progress bar (default: for large inputs on a terminal).
        return_report : bool
            Also return the `EmbedReport` (truncated rows, windows, coverage, the prompt used).
        warn : bool
            Log truncation and poor vocabulary coverage.

        Returns
        -------
        numpy.ndarray or list of TokenEmbedding
            (n, dim) in the `output` type; `(result, report)` with `return_report`.

        Examples
        --------
        >>> from bertkit import Encoder
        >>> enc = Encoder.from_pretrained()
        >>> enc.embed(["I love Korea", "the movie was great"], layers="last4:concat", pooling="cls").shape
        (2, 1536)
        >>> enc.embed(["I love Korea"], pooling="none")[0].tokens
        ['[CLS]', 'i', 'love', 'korea', '[SEP]']
        """
        methods = parse_pooling(pooling)
        selection = parse_layers(layers)
        self._check_pooling(methods, selection)
        check_vector_options(methods, dimensions, output, self.sentence_dim(selection, methods))
        prompt_text, prompt_length = self.prompt_setup(prompt, prompt_name, include_prompt)
        texts = _with_prompt(_as_list(texts), prompt_text)
        encoded, report = self._encode(texts, _as_list(text_pairs), max_length, long_text, truncation_direction)
        report.prompt = prompt_text
        if methods == ("none",):
            result: Any = [None] * len(texts)
        else:
            result = np.zeros((len(texts), self.sentence_dim(selection, methods)), dtype=np.float32)
        for rows, vectors, masks, poolers in self._token_states(
            encoded, selection, batch_size, max_length, stride, progress, report
        ):
            if methods == ("none",):
                for k, row in enumerate(rows):
                    length = int(masks[k].sum())
                    item = encoded[row]
                    result[row] = TokenEmbedding(
                        tokens=item.tokens,
                        vectors=vectors[k, :length].float().cpu().numpy(),
                        word_ids=item.word_ids(),
                    )
            else:
                if prompt_length:  # sentence-transformers' include_prompt=False: the prompt stays out of the pooling
                    masks = masks.clone()
                    masks[:, :prompt_length] = 0
                result[rows] = pool_sentences(vectors, masks, methods, poolers).float().cpu().numpy()
        if methods != ("none",):
            options = dict(
                layers=layers,
                pooling=pooling,
                max_length=max_length,
                long_text=long_text,
                stride=stride,
                truncation_direction=truncation_direction,
                prompt=prompt_text,
                include_prompt=include_prompt,
                dimensions=dimensions,
                normalize=normalize,
            )
            result = self.finish_vectors(result, dimensions, normalize, output, ranges, options)
        if warn:
            self._warn(report)
        return (result, report) if return_report else result

    def resolve_prompt(self, prompt: str | None = None, prompt_name: str | None = None) -> str:
        """The text put before every input: `prompt`, else the model's prompt `prompt_name`, else its default one.

        Parameters
        ----------
        prompt : str, optional
            A prompt of the caller's ('query: '); wins over `prompt_name` (as in sentence-transformers).
        prompt_name : str, optional
            One of the model's named prompts (config_sentence_transformers.json; `info()['prompts']`).

        Returns
        -------
        str
            '' for none.
        """
        loaded = self._loaded
        if prompt is not None and prompt_name is not None:
            logger.warning(
                "both prompt and prompt_name were given: prompt=%r is used (as sentence-transformers does).", prompt
            )
        if prompt is None and prompt_name is not None and prompt_name not in loaded.prompts:
            known = ", ".join(sorted(loaded.prompts)) or "none (config_sentence_transformers.json names none)"
            raise InputError(f"prompt_name={prompt_name!r}: this model's prompts are {known}; or give prompt='...'.")
        if prompt is None:
            prompt = loaded.prompts.get(prompt_name or loaded.default_prompt_name or "", "")
        return prompt

    def prompt_setup(self, prompt: str | None, prompt_name: str | None, include_prompt: bool | None) -> tuple[str, int]:
        """The prompt to put before each text, and how many leading tokens to keep out of mean/max pooling.

        As sentence-transformers counts them: the prompt's tokens with the leading special one, not the closing one.

        Parameters
        ----------
        prompt : str, optional
            A prompt text; wins over `prompt_name`.
        prompt_name : str, optional
            A prompt of the model's sentence-transformers config ('query', 'document', ...).
        include_prompt : bool, optional
            Pool the prompt's tokens too (default: the model's config says, else True).

        Returns
        -------
        tuple of (str, int)
            The prompt text ('' for none) and the number of leading tokens left out of pooling (0 keeps them all).
        """
        loaded = self._loaded
        prompt = self.resolve_prompt(prompt, prompt_name)
        include = loaded.include_prompt if include_prompt is None else include_prompt
        if not prompt or include:
            return prompt, 0
        with tok.TOKENIZER_LOCK:
            ids = self.tokenizer(prompt)["input_ids"]
        special = set(self.tokenizer.all_special_ids)
        return prompt, len(ids) - (1 if ids and ids[-1] in special else 0)

    def finish_vectors(
        self,
        vectors: np.ndarray,
        dimensions: int | None,
        normalize: bool,
        output: str,
        ranges: np.ndarray | None,
        options: dict,
    ) -> np.ndarray:
        """Matryoshka truncation, unit length, then the compact type: what `embed` does to its float vectors last.

        Parameters
        ----------
        vectors : numpy.ndarray
            (n, dim) float32 sentence vectors.
        dimensions : int, optional
            Keep the first `dimensions` columns (Matryoshka models).
        normalize : bool
            Divide each row by its norm.
        output : {'float32', 'int8', 'uint8', 'binary', 'ubinary'}
            The type to return (sentence-transformers' `quantize_embeddings` scheme).
        ranges : numpy.ndarray, optional
            (2, dim) per-column minimum and maximum for int8/uint8; default: those of the packaged calibration
            sentences embedded with `options`.
        options : dict
            The `embed` options the calibration sentences are embedded with.

        Returns
        -------
        numpy.ndarray
            (n, dimensions or dim) in `output`'s type; binary types pack 8 columns per byte.
        """
        if dimensions is not None:
            vectors = np.ascontiguousarray(vectors[:, :dimensions])
        if normalize:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        if output in RANGED and ranges is None:
            ranges = self.calibration_ranges(**options)
        return compact(vectors, output, ranges)

    def calibration_ranges(self, **options) -> np.ndarray:
        """int8/uint8 ranges of bertkit's calibration sentences embedded with `options` (computed once per options).

        Parameters
        ----------
        **options
            `embed`'s vector options (layers, pooling, prompt, dimensions, normalize, ...).

        Returns
        -------
        numpy.ndarray
            (2, dim) minima and maxima.
        """
        key = json.dumps(options, sort_keys=True, default=str)
        if key not in self._ranges:
            from .int8 import packaged_texts

            include = options.pop("include_prompt", None)
            vectors = self.embed(packaged_texts(), include_prompt=include, progress=False, warn=False, **options)
            self._ranges[key] = int8_ranges(vectors)
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
    ):
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
        selection = parse_layers(layers)
        encoded, report = self._encode(list(sentences), None, max_length, long_text)
        result: list = [None] * len(sentences)
        for rows, vectors, masks, _ in self._token_states(
            encoded, selection, batch_size, max_length, stride, progress, report
        ):
            for k, row in enumerate(rows):
                item = encoded[row]
                word_ids = item.word_ids()  # windowed inputs are never truncated, so these cover the whole text
                length = int(masks[k].sum())
                pooled = pool_words(vectors[k, :length], word_ids[:length], item.num_words, subtoken_pooling)
                report.words_without_tokens += item.num_words - len({w for w in word_ids if w is not None})
                result[row] = pooled.float().cpu().numpy()
        self._warn(report)
        return (result, report) if return_report else result

    # ---- internals ----------------------------------------------------------------------------------------------
    def _encode(
        self, texts: list, pairs: list | None, max_length: int | None, long_text: str, direction: str = "right"
    ) -> tuple[list, EmbedReport]:
        """Tokenize under the long-text policy and start the call's report (limit, truncated rows, coverage)."""
        report = EmbedReport(n_texts=len(texts), max_length=self._max_length(max_length))
        encoded = tok.encode(
            self.tokenizer, texts, pairs, max_length=report.max_length, long_text=long_text, direction=direction
        )
        report.truncated_rows = [i for i, e in enumerate(encoded) if e.truncated]
        report.coverage = tok.coverage(encoded, texts, self.tokenizer.unk_token_id)
        return encoded, report

    def _check_pooling(self, methods: tuple[str, ...], selection: LayerSelection) -> None:
        if "pooler" not in methods:
            return
        if not self.has_pooler:
            raise InputError(
                f"pooling='pooler': {type(self.model).__name__} has no trained pooler layer (DistilBERT and ELECTRA "
                "have none). Use pooling='cls' (the raw [CLS] vector), 'mean' or 'max'."
            )
        if not selection.is_last_only(self.num_layers + 1):
            raise InputError(
                "pooling='pooler' is the model's pooler applied to the last layer's [CLS]; it cannot use "
                f"layers={selection.spec!r}. Use layers='last', or pooling='cls' for another layer's [CLS]."
            )

    def _warn(self, report: EmbedReport) -> None:
        if report.n_truncated:
            logger.warning(
                "%d of %d texts were longer than %d tokens and were truncated; use long_text='window' to "
                "keep all of them.",
                report.n_truncated,
                report.n_texts,
                report.max_length,
            )
        if report.coverage is not None and report.coverage.poor:
            logger.warning(report.coverage.message())

    def _forward_chunks(self, chunks: list) -> Iterator[tuple]:
        """(chunk, batch, ForwardOutput) for each chunk of pieces, in order."""
        pad = lambda chunk: pad_windows(chunk, self.tokenizer.pad_token_id)  # noqa: E731
        workers = min(self.concurrent_batches, total_threads())
        if workers > 1 and len(chunks) > 1 and self.device.type == "cpu":
            yield from forward_in_parallel(self.forward, chunks, pad, workers)
            return
        for chunk in chunks:
            yield from self._forward_fitting(chunk, pad)

    def _forward_fitting(self, chunk: list, pad) -> Iterator[tuple]:
        """One chunk's pass; on a GPU out of memory, the chunk is split in two and each half tried again."""
        batch = pad(chunk)
        try:
            out = self.forward(batch)
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
            if len(chunk) == 1:
                raise OutOfDeviceMemory(chunk[0].row, len(chunk[0].ids), self.device) from None
            logger.info(
                "%s ran out of memory on %d rows × %d tokens: trying halves",
                self.device,
                len(chunk),
                batch.input_ids.shape[1],
            )
            half = len(chunk) // 2
            yield from self._forward_fitting(chunk[:half], pad)
            yield from self._forward_fitting(chunk[half:], pad)
            return
        yield chunk, batch, out

    def _token_states(
        self,
        encoded: Sequence[tok.Encoded],
        selection: LayerSelection,
        batch_size: int | None,
        max_length: int | None,
        stride: int | None,
        progress: bool | None,
        report: EmbedReport,
    ) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor, torch.Tensor | None]]:
        """Yield (rows, token vectors (b, seq, dim), mask (b, seq), pooler (b, hidden) or None), in length order.

        Long inputs (long_text='window') come back stitched: one vector per token of the whole text.
        """
        batch_size = self.default_batch_size if batch_size is None else batch_size
        if batch_size < 1:
            raise InputError(f"batch_size={batch_size}: give a positive batch size.")
        pieces = split_into_windows(encoded, self._max_length(max_length), stride, report.windowed_rows)
        windows_left = {row: 0 for row in report.windowed_rows}
        for piece in pieces:
            if piece.row in windows_left:
                windows_left[piece.row] += 1
        pending: dict[int, list] = {}
        bar = _progress_bar(len(encoded), progress)
        try:
            chunks = [
                [pieces[i] for i in rows]
                for rows in sorted_batches([len(p.ids) for p in pieces], batch_size, self.max_batch_tokens)
            ]
            for chunk, batch, out in self._forward_chunks(chunks):
                vectors = selection.apply(out.hidden_states)
                whole = [k for k, p in enumerate(chunk) if p.row not in windows_left]
                if whole:
                    index = torch.tensor(whole, device=out.last_hidden_state.device)
                    pooler = out.pooler_output[index] if out.pooler_output is not None else None
                    mask = batch.attention_mask.to(index.device)[index]
                    yield [chunk[k].row for k in whole], vectors[index], mask, pooler
                    bar.update(len(whole))
                for k, piece in enumerate(chunk):
                    if piece.row not in windows_left:
                        continue
                    length = len(piece.ids)
                    pooler = out.pooler_output[k] if out.pooler_output is not None else None
                    kept = vectors[k, :length].float().cpu().clone(), None if pooler is None else pooler.float().cpu()
                    pending.setdefault(piece.row, []).append((piece, *kept))
                    windows_left[piece.row] -= 1
                    if windows_left[piece.row] == 0:
                        stitched, pooler0 = stitch(encoded[piece.row], pending.pop(piece.row))
                        mask = torch.ones((1, stitched.shape[0]), dtype=torch.long)
                        yield (
                            [piece.row],
                            stitched.unsqueeze(0),
                            mask,
                            None if pooler0 is None else pooler0.unsqueeze(0),
                        )
                        bar.update(1)
        finally:
            bar.close()


def _as_list(texts):
    if texts is None:
        return None
    return [texts] if isinstance(texts, str) else list(texts)


def _progress_bar(total: int, progress: bool | None):
    show = progress if progress is not None else (total >= PROGRESS_MIN_ROWS and sys.stderr.isatty())
    return tqdm(total=total, disable=not show, unit="text", desc="embedding", leave=False)


def _with_prompt(texts: list, prompt: str) -> list:
    if not prompt:
        return texts
    if any(not isinstance(text, str) for text in texts):
        raise InputError(
            "a prompt goes before texts, not before lists of words; join the words, or leave the prompt out."
        )
    return [prompt + text for text in texts]


def check_vector_options(methods: tuple[str, ...], dimensions: int | None, output: str, dim: int) -> None:
    """dimensions, output: refused with one line where they cannot apply."""
    check_output_type(output)
    if methods == ("none",) and (dimensions is not None or output != "float32"):
        raise InputError(
            f"{'dimensions' if dimensions is not None else f'output={output!r}'} applies to sentence vectors; "
            "pooling='none' gives token vectors. Choose a pooling, or leave it out."
        )
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or not 1 <= dimensions <= dim
    ):
        raise InputError(f"dimensions={dimensions!r}: these vectors have {dim} numbers; give 1 to {dim}.")
