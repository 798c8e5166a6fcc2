"""`EmbedOptions`: every option of an embedding, one frozen value that every face builds and nothing else lists.

`resolve` fills what the caller left to the model and checks the rest against it, without running it; `record()` is
how every file, cache key and run record writes the options.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import InputError, quoted
from .defaults import check_fields, option_field
from .layers import LAYERS_PATTERN, parse_layers
from .pooling import parse_pooling

if TYPE_CHECKING:
    from .st_config import SentenceConfig

# the choices of the table's fields (this module imports nothing heavy: the command line builds its options from it)
LONG_TEXT_POLICIES = ("truncate", "error", "window")
DIRECTIONS = ("right", "left")  # which side of a long text truncation cuts
OUTPUT_TYPES = ("float32", "float16", "int8", "uint8", "binary", "ubinary")


class Model(Protocol):
    """What `EmbedOptions.resolve` reads of a model (an `Encoder` has it all)."""

    model: Any
    tokenizer: Any

    @property
    def sentence_config(self) -> Any:
        """The model's sentence-transformers configuration (`SentenceConfig`)."""

    @property
    def num_layers(self) -> int:
        """The model's transformer layers."""

    @property
    def hidden_size(self) -> int:
        """The width of the model's hidden states."""

    @property
    def has_pooler(self) -> bool:
        """Whether the model has a pooler."""

    def check_max_length(self, max_length: int | None) -> int:
        """Return `max_length`, or the model's limit for None; refused past what the position table takes."""


@dataclass(frozen=True)
class EmbedOptions:
    """How texts become vectors: layers, pooling, lengths, the long-text policy, prompts and the output's form.

    Parameters
    ----------
    layers : str, int or sequence of int
        Hidden states: 'last', '-2', 'last4:sum', 'all:concat', ... (see `parse_layers`).
    pooling : str, optional
        'cls', 'pooler', 'mean', 'max', several joined by '+', or 'none' (token vectors). None: the model's
        (a sentence-transformers Pooling module), else 'mean'.
    max_length : int, optional
        The token limit (None: the model's).
    long_text : {'truncate', 'error', 'window'}
        A text over the limit is cut (and reported), refused, or read in overlapping windows.
    stride : int, optional
        Tokens two neighbouring windows share (None: a quarter of a window).
    truncation_direction : {'right', 'left'}
        'right' keeps a long text's beginning, 'left' its end.
    prompt, prompt_name : str, optional
        A text put before every input, or one of the model's named prompts (None: its default prompt, if any).
    include_prompt : bool, optional
        False keeps the prompt's tokens out of mean and max pooling (None: the model's Pooling config).
    truncate_dim : int, optional
        Keep the first `truncate_dim` numbers of each vector (Matryoshka), before normalization.
    normalize_embeddings : bool, optional
        Unit-length vectors (None: the model's — True where a Normalize module follows the pooling).
    output_type : str
        'float32', 'float16', 'int8', 'uint8', 'binary' or 'ubinary' (see `compact`).
    dense : bool, optional
        Apply the model's sentence-transformers Dense modules (None: when the vector is the model's own sentence
        vector, i.e. its pooling of the last layer).

    Examples
    --------
    >>> from bertkit import EmbedOptions
    >>> EmbedOptions(layers="last4:sum", pooling="mean").record()["layers"]
    'last4:sum'
    """

    layers: str = option_field(
        "last", "Hidden states: last, -2, 0, last4:sum, last4:concat, all:mean, '-1,-2'.", pattern=LAYERS_PATTERN
    )
    pooling: str | None = option_field(
        None, "cls, pooler, mean, max, several joined by +, or none (token vectors); default: the model's, else mean."
    )
    max_length: int | None = option_field(None, "The token limit (default: the model's).", low=3)
    long_text: str = option_field(
        "truncate", "A text over the limit is cut, refused, or read in windows.", LONG_TEXT_POLICIES
    )
    stride: int | None = option_field(
        None, "Tokens two neighbouring windows share (default: a quarter of a window).", low=0
    )
    truncation_direction: str = option_field("right", "right keeps a long text's beginning, left its end.", DIRECTIONS)
    prompt: str | None = option_field(None, "Text put before every input, e.g. 'passage: '.")
    prompt_name: str | None = option_field(None, "One of the model's named prompts (bertkit info lists them).")
    include_prompt: bool | None = option_field(
        None,
        "Pool over the prompt's tokens too (default: the model's Pooling config).",
        flag="--include-prompt/--exclude-prompt",
    )
    truncate_dim: int | None = option_field(
        None, "Keep the first N numbers of each vector (Matryoshka), before normalizing.", low=1
    )
    normalize_embeddings: bool | None = option_field(
        None,
        "Unit-length vectors (default: the model's sentence-transformers config).",
        flag="--normalize/--no-normalize",
    )
    output_type: str = option_field("float32", "The vectors' form: float or compact.", OUTPUT_TYPES)
    dense: bool | None = option_field(
        None,
        "Apply the model's Dense modules (default: to the model's own sentence vector).",
        flag="--dense/--no-dense",
    )

    def __post_init__(self) -> None:
        set_field = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_field("layers", parse_layers(self.layers).spec)
        if self.pooling is not None:
            set_field("pooling", "+".join(parse_pooling(self.pooling)))
        check_fields(self)
        for name in ("prompt", "prompt_name"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise InputError(f"{name}={getattr(self, name)!r}: give a string or None.")
        if self.pooling == "none" and (self.truncate_dim is not None or self.output_type != "float32"):
            what = "truncate_dim" if self.truncate_dim is not None else f"output_type={self.output_type!r}"
            raise InputError(
                f"{what} applies to sentence vectors; pooling='none' gives token vectors. Choose a pooling, or "
                "leave it out."
            )

    @classmethod
    def from_kwargs(cls, options: EmbedOptions | None = None, **kwargs: Any) -> EmbedOptions:
        """`options` with `kwargs` replacing its fields; a name that is not an option is refused.

        Parameters
        ----------
        options : EmbedOptions, optional
            The starting value (default: all defaults).
        **kwargs
            Field values; None leaves a field as `options` has it.

        Returns
        -------
        EmbedOptions
        """
        if options is not None and not isinstance(options, EmbedOptions):
            raise InputError(
                f"options={quoted(options)}: give an EmbedOptions, or the options as keywords (layers=..., "
                "pooling=...)."
            )
        changes = {}
        for name, value in kwargs.items():
            if name not in FIELDS:
                raise InputError(f"unknown embedding option {name!r}; the options are {', '.join(FIELDS)}.")
            if value is not None:
                changes[name] = value
        return dataclasses.replace(options or cls(), **changes)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> EmbedOptions:
        """Read the options a file or run recorded (`record()`), other keys ignored."""
        return cls(**{k: v for k, v in record.items() if k in FIELDS and k != "prompt_name"})

    def replace(self, **changes: Any) -> EmbedOptions:
        """Return a copy with `changes` (checked again)."""
        return dataclasses.replace(self, **changes)

    def record(self) -> dict[str, Any]:
        """Return the options as plain JSON values: what vector files, manifests, caches and runs store."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "prompt_name"}

    @property
    def token_vectors(self) -> bool:
        """pooling='none': each text's token vectors instead of one vector."""
        return self.pooling == "none"

    def resolve(self, encoder: Model) -> EmbedOptions:
        """Resolve these options for `encoder`'s model: its defaults filled in, every option checked against it.

        Parameters
        ----------
        encoder : Encoder
            The model the options will run on (nothing is run): anything with what `Model` lists.

        Returns
        -------
        EmbedOptions
            pooling, max_length, prompt, include_prompt, normalize_embeddings and dense set; prompt_name None.
        """
        config = encoder.sentence_config
        pooling = self.pooling or config.pooling or "mean"
        selection, methods = parse_layers(self.layers), parse_pooling(pooling)
        if encoder.num_layers == 0:  # a static model: one table, its rows averaged
            _check_static(self.layers, selection, pooling)
        states = encoder.num_layers + 1
        selection.resolve(states)  # a layer the model does not have: refused with the valid range
        if "pooler" in methods:
            _check_pooler(encoder, selection.is_last_only(states), self.layers)
        width = sum(
            encoder.hidden_size if m == "pooler" else selection.output_dim(encoder.hidden_size, states) for m in methods
        )
        own_vector = pooling == (config.pooling or "mean") and selection.is_last_only(states)
        dense = bool(config.dense) and own_vector if self.dense is None else self.dense
        if dense and not config.dense:
            raise InputError("dense=True: this model has no sentence-transformers Dense module.")
        if dense and width != config.dense[0].in_features:
            raise InputError(
                f"dense=True: the model's Dense module takes {config.dense[0].in_features} numbers, but "
                f"layers={self.layers!r} with pooling={pooling!r} gives {width}; leave dense out."
            )
        width = config.dense[-1].out_features if dense else width
        if self.truncate_dim is not None and self.truncate_dim > width:
            raise InputError(
                f"truncate_dim={self.truncate_dim}: these vectors have {width} numbers; give 1 to {width}."
            )
        normalize = config.normalize and own_vector if self.normalize_embeddings is None else self.normalize_embeddings
        max_length = encoder.check_max_length(self.max_length)
        if self.stride is not None:
            if self.long_text != "window":
                raise InputError(
                    f"stride={self.stride} is the overlap of long_text='window'; with long_text={self.long_text!r} "
                    "no text is cut into windows. Add long_text='window', or leave stride out."
                )
            budget = max_length - encoder.tokenizer.backend_tokenizer.num_special_tokens_to_add(False)
            if not 0 <= self.stride < budget:  # two windows of `budget` content tokens can share that many
                raise InputError(f"stride={self.stride}: give a number of overlapping tokens from 0 to {budget - 1}.")
        settled: dict[str, Any] = dict(pooling=pooling, max_length=max_length, prompt_name=None, dense=dense)
        settled["include_prompt"] = config.include_prompt if self.include_prompt is None else self.include_prompt
        return dataclasses.replace(self, prompt=self._prompt(config), normalize_embeddings=bool(normalize), **settled)

    def _prompt(self, config: SentenceConfig) -> str:
        """Return the prompt text: `prompt`, else the model's prompt `prompt_name`, else its default one, else ''."""
        if self.prompt is not None:
            return self.prompt
        if self.prompt_name is not None and self.prompt_name not in config.prompts:
            known = ", ".join(sorted(config.prompts)) or "none (its config_sentence_transformers.json names none)"
            raise InputError(
                f"prompt_name={self.prompt_name!r}: this model's prompts are {known}; "
                "or give the prompt's own text as prompt=."
            )
        return config.prompts.get(self.prompt_name or config.default_prompt_name or "", "")


OPTIONS = {f.name: f for f in dataclasses.fields(EmbedOptions)}  # each field, with its metadata
FIELDS = tuple(OPTIONS)


def _check_static(layers: str, selection: Any, pooling: str) -> None:
    """Refuse the options that have no meaning for a static model (a table of token vectors, averaged).

    Its one hidden state is its table's rows: a selection of every state ('all:concat') is that one.
    """
    try:
        one_state = selection.is_last_only(1)
    except InputError:
        one_state = False
    if not one_state:
        raise InputError(f"layers={layers!r}: a static model has no layers; its vectors are its table's rows.")
    if pooling not in ("mean", "none"):
        raise InputError(f"pooling={pooling!r}: a static model's vectors are the mean of its rows; leave pooling out.")


def _check_pooler(encoder: Model, last_only: bool, layers: str) -> None:
    if not encoder.has_pooler:
        raise InputError(
            f"pooling='pooler': {type(encoder.model).__name__} has no trained pooler layer (DistilBERT and ELECTRA "
            "have none). Use pooling='cls' (the raw [CLS] vector), 'mean' or 'max'."
        )
    if not last_only:
        raise InputError(
            "pooling='pooler' is the model's pooler applied to the last layer's [CLS]; it cannot use "
            f"layers={layers!r}. Use layers='last', or pooling='cls' for another layer's [CLS]."
        )


def options_from(options: EmbedOptions | None, kwargs: Mapping[str, Any]) -> EmbedOptions:
    """`EmbedOptions.from_kwargs(options, **kwargs)`: a name that is not an option (a typo) is refused, not dropped."""
    return EmbedOptions.from_kwargs(options, **kwargs)
