"""Tokenization from a model directory's `tokenizer.json` alone (the tokenizers library: no torch, no transformers).

It lets `bertkit tokenize` answer in well under two seconds. It gives what `Encoder.tokenize` gives (the tests hold
the two tables equal); models without a `tokenizer.json`, and hub names, go through `Encoder`.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from tokenizers import Tokenizer, normalizers

from ..errors import InputError
from . import tokenize as tok
from .batch import COLUMNS
from .coverage import coverage
from .models import ModelSource, fix_casing, max_length_in_force, read_json_object, resolve_model
from .st_config import declared_max_length


@dataclass
class TokenizerOnly:
    """A model's tokenizer with the facts `tokenize` needs: max length, pad and [UNK] tokens, casing."""

    source: ModelSource
    backend_tokenizer: Tokenizer  # named as transformers' fast tokenizers name it: `tokenize.encode` reads it
    max_length: int
    position_limit: int
    pad_token: str
    pad_id: int
    unk_id: int | None

    @classmethod
    def from_model(cls, spec: str | None) -> TokenizerOnly | None:
        """Load the tokenizer of a local or packaged model; None when only transformers can load it."""
        if spec is not None and not Path(spec).is_dir() and spec != "default":
            return None  # a hub name: `Encoder` resolves it (and says what is wrong)
        source = resolve_model(spec)
        folder = Path(source.path)
        if not (folder / "tokenizer.json").is_file():
            return None
        settings = read_json_object(folder / "tokenizer_config.json")
        config = read_json_object(folder / "config.json")
        backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
        _follow_config(backend, settings)
        fix_casing(backend, str(folder))
        pad_token = _token_text(settings.get("pad_token")) or _token_text(
            read_json_object(folder / "special_tokens_map.json").get("pad_token")
        )
        unk_token = _token_text(settings.get("unk_token"))
        if pad_token is None or backend.token_to_id(pad_token) is None or "max_position_embeddings" not in config:
            return None
        max_length, positions, _ = max_length_in_force(
            declared_max_length(source.path),
            SimpleNamespace(**{"pad_token_id": None, **config}),
            SimpleNamespace(model_max_length=settings.get("model_max_length")),
        )
        unk_id = backend.token_to_id(unk_token) if unk_token else None
        return cls(source, backend, max_length, positions, pad_token, backend.token_to_id(pad_token), unk_id)

    def table(self, text: str, pair: str | None = None, max_length: int | None = None) -> tuple[list[dict], bool, str]:
        """Return the tutorial's table of one text (or pair), whether it was truncated, and the coverage line.

        Parameters
        ----------
        text : str
            The text.
        pair : str, optional
            A second text (token type id 1).
        max_length : int, optional
            Pad to (and cut at) this many tokens; None: no padding, cut at the model's limit.

        Returns
        -------
        tuple
            (rows of position, token, id, mask, type_id, word), truncated?, the vocabulary coverage message.
        """
        if max_length is not None and not 2 < max_length <= self.position_limit:
            raise InputError(f"max_length={max_length}: this model takes between 3 and {self.position_limit} tokens.")
        limit = max_length or self.max_length
        item = tok.encode(self, [text], [pair] if pair is not None else None, max_length=limit)[0]
        kept = len(item.ids)
        padding = max(kept, max_length or 0) - kept
        values: tuple[list, ...] = (item.tokens, item.ids, [1] * kept, item.type_ids, item.word_ids())
        pads = (self.pad_token, self.pad_id, 0, 0, None)
        columns = [value + [pad] * padding for value, pad in zip(values, pads)]  # Batch.table's columns, padded
        rows = [dict(zip(COLUMNS, row)) for row in zip(itertools.count(), *columns)]
        texts = [text] + ([pair] if pair else [])
        everything = tok.encode(self, texts, max_length=self.max_length, long_text="keep")
        return rows, item.truncated, coverage(everything, self.unk_id).message()


def _follow_config(backend: Tokenizer, settings: dict) -> None:
    """Do what transformers' BERT-style fast tokenizers do on loading.

    The normalizer follows tokenizer_config.json's do_lower_case, strip_accents and tokenize_chinese_chars.
    """
    try:
        state = json.loads(backend.normalizer.__getstate__())
    except (AttributeError, TypeError, ValueError):
        return
    if state.get("type") != "BertNormalizer":
        return
    wanted = {
        "lowercase": settings.get("do_lower_case", state.get("lowercase")),
        "strip_accents": settings.get("strip_accents", state.get("strip_accents")),
        "handle_chinese_chars": settings.get("tokenize_chinese_chars", state.get("handle_chinese_chars")),
    }
    if any(state.get(key) != value for key, value in wanted.items()):
        backend.normalizer = normalizers.BertNormalizer(clean_text=state.get("clean_text", True), **wanted)


def _token_text(value: object) -> str | None:
    """Read a special token as tokenizer_config.json writes it: a string, or an AddedToken dict with its content."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
