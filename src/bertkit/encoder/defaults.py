"""Defaults shared by the API and the CLI, and `option_field`: light enough for the CLI to import at start-up."""

import dataclasses
import os
from pathlib import Path
from typing import Any

DEFAULT_BATCH_SIZE = 32  # the best on a 2-core CPU with length-sorted batches (README, performance)
# Padded tokens per forward pass, at most: rows of long texts go in smaller batches. Past ~2k tokens a batch's
# activations (tokens × 1536 floats in the default model's feed-forward) outgrow the CPU caches (README, performance:
# the cap's effect on CoNLL sentences).
MAX_BATCH_TOKENS = 2048
# On a GPU: padded tokens per pass, at most (text-embeddings-inference's default --max-batch-tokens), within the share
# of free memory devices.token_budget allows; rows per pass are then as many as fit (batch_size=None).
GPU_BATCH_TOKENS = 16384
# On a GPU, texts tokenized at a time, the next chunk while this one's passes run: enough for full passes, few enough
# that the first pass starts soon (on a CPU a call is one chunk: its cores are busy with the passes).
GPU_CHUNK_TEXTS = 2048
# The features of `BertVectorizer`, `TextClassifier` and `bertkit train` when none are given: the mean over tokens of
# every layer, concatenated (the best of the probe's choices for a linear classifier on SST-2, see the README).
DEFAULT_FEATURE_LAYERS = "all:concat"
DEFAULT_FEATURE_POOLING = "mean"


def cache_root() -> Path:
    """Return bertkit's cache folder: $BERTKIT_CACHE, else $XDG_CACHE_HOME/bertkit, else ~/.cache/bertkit.

    Under it, `embeddings/` holds the embedding cache and `int8/` the int8 calibrations of models without their own.
    """
    if os.environ.get("BERTKIT_CACHE"):
        return Path(os.environ["BERTKIT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bertkit"


def option_field(
    default: Any,
    help: str,
    choices: tuple[str, ...] | None = None,
    flag: str | None = None,
    pattern: str | None = None,
    low: int | None = None,
    high: int | None = None,
    metavar: str | None = None,
) -> Any:
    """Return a dataclass field carrying what its surfaces are generated from: help, choices, flag, pattern, bounds.

    The one declaration of an option (`EmbedOptions`, `AnswerOptions`, `FinetuneSettings`, `ServeSettings`); `[]`
    defaults to a fresh list. `pattern`: a string option's grammar as a regular expression, which request schemas
    publish; `low` and `high`: a whole number's bounds, which `check_fields` holds and request schemas publish; a
    `flag` with a '/' is a switch; `metavar` names a command-line value (a tuple field's flag is repeatable).
    """
    factory = {"default_factory": list} if default == [] else {"default": default}
    meta = {"help": help, "choices": choices, "flag": flag, "pattern": pattern, "low": low, "high": high}
    meta["metavar"] = metavar
    return dataclasses.field(**factory, metadata=meta)


def check_fields(options: Any, table: type | None = None) -> None:
    """Refuse, in one line, a field of an options dataclass outside its metadata; a choice is kept lower-cased.

    Its `choices`, a switch (a `flag` with a '/', or a bool default), a whole number's `low` and `high`; a field whose
    default is None may be None. `table`: the dataclass whose fields to check (default: the options' own class).
    """
    from ..errors import InputError, check_flag, check_whole

    for field in dataclasses.fields(table or options):
        value, meta, allow_none = getattr(options, field.name), field.metadata, field.default is None
        if value is None and allow_none:
            continue
        if meta.get("choices"):
            said = str(value).lower()  # any case, as pooling takes it
            if said not in meta["choices"]:
                raise InputError(f"{field.name}={value!r}: valid values are {', '.join(meta['choices'])}.")
            object.__setattr__(options, field.name, said)
        elif "/" in (meta.get("flag") or "") or isinstance(field.default, bool):
            check_flag(field.name, value, allow_none)
        elif meta.get("low") is not None:
            check_whole(field.name, value, meta["low"], allow_none, meta.get("high"))
