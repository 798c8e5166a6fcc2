"""The model half of `Encoder`: the loaded model and tokenizer, facts about them, tokenization and the forward pass.

`Encoder` (encode.py) adds what turns texts into vectors; `runner` plans and runs the passes.
"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from .. import display
from ..errors import InputError
from . import tokenize as tok
from .defaults import DEFAULT_BATCH_SIZE, GPU_CHUNK_TEXTS
from .devices import describe, resolve_device, token_budget
from .engines import check_engine, encoder_digest, engine_for, engine_named, openvino_forward
from .int8 import int8_model_for
from .models import LoadedModel, ModelSource, load_model, resolve_model
from .precision import HALF_DTYPES, check_precision
from .runner import Runner, call_model, takes_type_ids
from .st_config import SentenceConfig
from .threads import total_threads

logger = logging.getLogger(__name__)

E = TypeVar("E", bound="EncoderBase")


@dataclass
class ForwardOutput:
    """What one forward pass returns: last layer, pooler (None without one), and embeddings + every layer."""

    last_hidden_state: torch.Tensor  # (batch, seq, hidden)
    pooler_output: torch.Tensor | None  # (batch, hidden)
    hidden_states: tuple[torch.Tensor, ...]  # layers + 1 tensors of (batch, seq, hidden)


class EncoderBase:
    """A loaded encoder and its tokenizer: facts, tokenization and the forward pass (`Encoder` embeds)."""

    def __init__(
        self,
        loaded: LoadedModel,
        precision: str = "fp32",
        concurrent_batches: int | None = None,
        device: str | torch.device | None = "auto",
        engine: str | None = None,
    ) -> None:
        self._loaded = loaded
        self.device = resolve_device(device)
        self.precision = check_precision(precision, device=self.device)
        self.model = loaded.model.to(self.device)
        self.tokenizer = loaded.tokenizer
        self.max_length = loaded.max_length
        self._position_limit = loaded.position_limit or loaded.max_length
        if concurrent_batches is None:  # a GPU takes one batch at a time; CPU cores each take their own
            concurrent_batches = 1 if self.device.type != "cpu" else min(total_threads(), 2)
        if concurrent_batches < 1:
            raise InputError(f"concurrent_batches={concurrent_batches}: give 1 or more.")
        self._concurrent_batches = int(concurrent_batches)
        self._takes_type_ids = takes_type_ids(self.model)
        for note in loaded.warnings:
            logger.warning("%s: %s", loaded.source.spec, note)
        self._engine_asked = check_engine(engine, self.device, self.precision)  # before int8 calibrates
        self._int8: torch.nn.Module | None = None
        self._int8_calibration: str | None = None  # the digest of the calibration texts int8 was calibrated on
        if self.precision == "int8":  # a copy of the model with int8 linear layers (int8.py)
            self._int8, self._int8_calibration = int8_model_for(self)
        # On a GPU, fp16/bf16 run on a half copy of the weights (as sentence-transformers and TEI do): autocast would
        # cast every weight again in every pass, launches that cost more than a small model's arithmetic there.
        self._half: torch.nn.Module | None = None
        if self.device.type == "cuda" and self.precision in HALF_DTYPES:
            self._half = copy.deepcopy(self.model).to(HALF_DTYPES[self.precision]).eval()
        build = lambda: openvino_forward(  # noqa: E731
            self.model, self._takes_type_ids, self._position_limit, self.precision, self.fingerprint
        )
        self.engine, self.engine_reason, self._openvino = engine_for(
            self._engine_asked, self.device, self.precision, build, loaded.source.spec, engine_named(engine)
        )
        self._max_batch_tokens = token_budget(self.model, self.device, self._position_limit)
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
        return cls(
            load_model(resolve_model(model)),
            precision=precision,
            concurrent_batches=concurrent_batches,
            device=wanted,
            engine=engine,
        )

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
        return type(self)(
            self._loaded,
            precision=precision or self.precision,
            concurrent_batches=self._concurrent_batches if concurrent_batches is None else concurrent_batches,
            device=self.device,
            engine=engine or self._engine_asked,
        )

    # ---- facts about the model -------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"Encoder({self.source.spec!r}: {type(self.model).__name__}, {self.num_layers} layers, "
            f"hidden {self.hidden_size}, max_length {self.max_length}, {self.precision} on {describe(self.device)})"
        )

    def _repr_html_(self) -> str:
        shown = ("architecture", "layers", "hidden_size", "attention_heads", "max_length", "vocab_size", "cased")
        facts = {k: v for k, v in self.info().items() if k in shown}
        facts.update(pooler=self._has_pooler, precision=self.precision, device=describe(self.device))
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
    def _has_pooler(self) -> bool:
        """Whether the model has BERT's pooler (a dense layer with tanh on `[CLS]`), which `pooling='pooler'` needs."""
        return self._loaded.has_pooler

    @property
    def _sentence_config(self) -> SentenceConfig:
        """What the model's sentence-transformers files say: pooling, Dense, Normalize, prompts."""
        return self._loaded.sentence_config

    fingerprint = functools.cached_property(encoder_digest)  # equal fingerprints mean equal embeddings

    @property
    def _default_batch_size(self) -> int:
        """Texts per pass when none is asked for.

        32 on a CPU (measured best on small CPUs with length-sorted batches); on a GPU, no row limit: the token budget
        (`max_batch_tokens`) decides.
        """
        return DEFAULT_BATCH_SIZE if self.device.type == "cpu" else self._max_batch_tokens

    def info(self) -> dict:
        """Architecture, layers, hidden size, max length, vocabulary size, casing, and the sentence defaults."""
        config, sentence = self.model.config, self._sentence_config
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
            "pooler": self._has_pooler,
            "token_type_ids": self._takes_type_ids,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "precision": self.precision,
            "device": describe(self.device),
            "pooling": sentence.pooling or "mean",
            "normalize": sentence.normalize,
            "dense": [f"{d.in_features}→{d.out_features} {d.activation}" for d in sentence.dense],
            "prompts": dict(sentence.prompts),
            "default_prompt_name": sentence.default_prompt_name,
            "threads": total_threads(),
            "concurrent_batches": self._concurrent_batches,
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
        limit = self._check_max_length(max_length)
        encoded = tok.encode(
            self.tokenizer,
            as_list(texts),
            as_list(text_pair),
            max_length=limit,
            long_text="truncate" if truncation else "keep",
        )
        return tok.pad(
            encoded, self.tokenizer.pad_token_id, self.tokenizer.pad_token, limit if padding == "max_length" else None
        )

    def _check_max_length(self, max_length: int | None) -> int:
        """`max_length`, or the model's limit for None; refused past what the position table takes."""
        if max_length is None:
            return self.max_length
        if not 2 < max_length <= self._position_limit:
            raise InputError(f"max_length={max_length}: this model takes between 3 and {self._position_limit} tokens.")
        return int(max_length)

    # ---- forward ------------------------------------------------------------------------------------------------
    def forward(self, batch: tok.Batch) -> ForwardOutput:
        """One no-grad pass returning last_hidden_state, pooler_output and all hidden_states."""
        inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        if self._takes_type_ids:
            inputs["token_type_ids"] = batch.token_type_ids
        return self._forward_inputs(inputs)

    def _forward_inputs(self, inputs: dict[str, torch.Tensor]) -> ForwardOutput:
        """`forward` on padded input tensors (what the runner passes)."""
        if self._openvino is not None:
            outputs = self._openvino(inputs)  # the pooler's output where the model has one, then every hidden state
            states = outputs[-(self.num_layers + 1) :]
            pooler = outputs[0] if len(outputs) > len(states) and self._has_pooler else None
            return ForwardOutput(last_hidden_state=states[-1], pooler_output=pooler, hidden_states=states)
        model = self._int8 or self._half or self.model
        precision = "fp32" if self._half is not None else self.precision  # half weights: nothing left to autocast
        out = call_model(model, inputs, self.device, precision, output_hidden_states=True, return_dict=True)
        return ForwardOutput(
            last_hidden_state=out.last_hidden_state,
            pooler_output=getattr(out, "pooler_output", None) if self._has_pooler else None,
            hidden_states=tuple(out.hidden_states),
        )

    def runner(self, batch_size: int | None = None, pad_multiple: int = 1) -> Runner:
        """Return the runner of this encoder's forward passes (`batch_size` rows at most; None: the default)."""
        return Runner(
            self._forward_inputs,
            self.tokenizer.pad_token_id,
            self.device,
            self._max_batch_tokens,
            self._default_batch_size if batch_size is None else batch_size,
            self._concurrent_batches,
            self._takes_type_ids,
            pad_multiple,
            self._position_limit,
        )


def as_list(texts: Any) -> Any:
    """Return texts as a list (one string is one text); None stays None."""
    if texts is None:
        return None
    return [texts] if isinstance(texts, str) else list(texts)
