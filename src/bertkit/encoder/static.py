"""Static models (model2vec): a table of token vectors, averaged. bertkit's encoder with no layers.

A model2vec folder (`config.json` with `model_type: model2vec`, the table in `model.safetensors`, `tokenizer.json`)
or a sentence-transformers folder whose first module is a `StaticEmbedding` loads as a `StaticTable`: a torch module
that answers as a transformers model with no layers would, its one hidden state each token's row of the table. Its
tokenizer adds no special tokens, and mean pooling over its rows is model2vec's `encode`; so the encoder, the runner,
the service, Ray and the feature classifiers run it as they run any model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..errors import InputError, ModelLoadError, brief

MODEL_TYPE = "model2vec"  # config.json's model_type of a model2vec folder
TABLE_FILE = "model.safetensors"
DEFAULT_MAX_LENGTH = 512  # model2vec's own default when the config names none
POSITION_LIMIT = 100_000  # a table has no position limit; the longest text `max_length=` may ask for
# texts a pass: SST-2 dev on one AVX-512 core, texts/s (median of 3): 10,305 at 32, 15,107 at 256, 14,589 at 1024
# (the tokenizer is most of the time; model2vec's own encode: 25,384)
STATIC_BATCH_SIZE = 256


def static_folder(path: str | Path) -> Path | None:
    """Return the folder that holds a static model's table and tokenizer, or None when `path` is not a static model.

    A model2vec folder holds them itself; a sentence-transformers folder in its first module's folder.
    """
    root = Path(path)
    if _json(root / "config.json").get("model_type") == MODEL_TYPE:
        return root
    modules = _json(root / "modules.json", [])
    first = modules[0] if isinstance(modules, list) and modules and isinstance(modules[0], dict) else {}
    if str(first.get("type", "")).endswith("StaticEmbedding"):
        return root / str(first.get("path") or ".")
    return None


class StaticConfig:
    """What bertkit reads of a model's config, for a table: no layers, its width, the longest text it takes."""

    model_type = MODEL_TYPE
    num_hidden_layers = 0
    max_position_embeddings = POSITION_LIMIT

    def __init__(self, hidden_size: int, vocab_size: int, normalize: bool, max_length: int) -> None:
        self.hidden_size, self.vocab_size, self.normalize, self.max_length = (
            hidden_size,
            vocab_size,
            normalize,
            max_length,
        )

    def to_dict(self) -> dict:
        """Return the config as a dict (what bertkit's weight hash reads)."""
        return {"model_type": MODEL_TYPE, **vars(self)}


class StaticTable(torch.nn.Module):
    """A model2vec table as a transformers model with no layers: each token's (weighted) row is its one hidden state.

    model2vec drops the unknown token before averaging; here each unknown token's row is the mean of its text's
    known rows, which leaves the text's mean unchanged (and a text with no known token all zeros, as model2vec's).
    """

    def __init__(
        self,
        table: torch.Tensor,
        config: StaticConfig,
        unk_id: int | None,
        weights: torch.Tensor | None = None,
        mapping: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.config, self.unk_id = config, unk_id
        self.embeddings = torch.nn.Embedding.from_pretrained(table.float(), freeze=True)
        self.register_buffer("weights", None if weights is None else weights.float())
        self.register_buffer("mapping", None if mapping is None else mapping.long())
        self.pooler = None

    def get_input_embeddings(self) -> torch.nn.Embedding:
        """Return the table (rows by token id; after the vocabulary mapping when the model has one)."""
        return self.embeddings

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool = True,
        return_dict: bool = True,
    ) -> Any:
        """Look up each token's row; every unknown token's row becomes the mean of its text's known rows.

        `inputs_embeds` (attributions) are the rows themselves, taken as they are.
        """
        from transformers.modeling_outputs import BaseModelOutput

        if inputs_embeds is not None or input_ids is None:
            return BaseModelOutput(last_hidden_state=inputs_embeds, hidden_states=(inputs_embeds,))
        rows = self.embeddings(input_ids if self.mapping is None else self.mapping[input_ids])
        if self.weights is not None:
            rows = rows * self.weights[input_ids].unsqueeze(-1)
        if self.unk_id is not None and attention_mask is not None:
            unknown = input_ids == self.unk_id
            known = (attention_mask.bool() & ~unknown).unsqueeze(-1).to(rows.dtype)
            mean = (rows * known).sum(1, keepdim=True) / known.sum(1, keepdim=True).clamp(min=1)
            rows = torch.where(unknown.unsqueeze(-1), mean, rows)
        return BaseModelOutput(last_hidden_state=rows, hidden_states=(rows,))


def static_settings(precision: str, engine: str | None) -> tuple[str, str]:
    """Return the precision and engine a static model runs at: fp32 on torch (a lookup has nothing to speed up)."""
    if precision not in ("fp32", "auto"):
        raise InputError(f"precision={precision!r}: a static model is a table lookup, kept in fp32; leave it out.")
    if engine == "openvino":
        raise InputError("engine='openvino': a static model is a table lookup; it runs on torch.")
    return "fp32", "torch"


def load_static(folder: Path, spec: str) -> tuple[StaticTable, Any, int]:
    """Load a static model's table and tokenizer from `folder`: (module, fast tokenizer, default max length)."""
    from transformers import PreTrainedTokenizerFast

    config = _json(folder / "config.json")
    tokenizer_file = folder / "tokenizer.json"
    if not (folder / TABLE_FILE).is_file() or not tokenizer_file.is_file():
        raise ModelLoadError(f"{spec}: a static model needs {TABLE_FILE} and tokenizer.json in {folder}.")
    try:
        tensors = load_file(str(folder / TABLE_FILE))
    except (SafetensorError, OSError) as exc:
        raise ModelLoadError(
            f"{spec}: the table {folder / TABLE_FILE} is truncated or corrupt ({brief(exc)})."
        ) from exc
    table = tensors.get("embeddings", tensors.get("embedding.weight"))
    if table is None or table.ndim != 2:
        raise ModelLoadError(f"{spec}: {folder / TABLE_FILE} holds no 2-D table ('embeddings' or 'embedding.weight').")
    backend = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    unk = backend.get("model", {}).get("unk_token")
    padding = backend.get("padding") or {}
    pad = padding.get("pad_token") or unk or "[PAD]"
    max_length = int(config.get("max_length") or DEFAULT_MAX_LENGTH)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file), unk_token=unk, pad_token=pad, model_max_length=POSITION_LIMIT
    )
    tokenizer.backend_tokenizer.no_truncation()
    tokenizer.backend_tokenizer.no_padding()
    mapping = tensors.get("mapping")
    rows = int(mapping.max()) + 1 if mapping is not None else table.shape[0]
    if len(tokenizer) > (table.shape[0] if mapping is None else len(mapping)) or rows > table.shape[0]:
        raise ModelLoadError(f"{spec}: the tokenizer has {len(tokenizer)} tokens but the table {table.shape[0]} rows.")
    normalize = bool(config.get("normalize", False))
    static_config = StaticConfig(int(table.shape[1]), len(tokenizer), normalize, max_length)
    unk_id = tokenizer.convert_tokens_to_ids(unk) if unk is not None else None
    return StaticTable(table, static_config, unk_id, tensors.get("weights"), mapping).eval(), tokenizer, max_length


def _json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {} if default is None else default
