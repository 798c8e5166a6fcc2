"""What a sentence-transformers folder says about its vectors: pooling, Dense, Normalize, prompts, length, similarity.

A plain transformers folder says none of it: mean pooling, no Dense, no normalization, cosine. A module bertkit does not
compute (LayerNorm, Router, ...) is refused: its vectors would differ from `SentenceTransformer.encode`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError

logger = logging.getLogger(__name__)

SENTENCE_BERT_CONFIG = "sentence_bert_config.json"
SENTENCE_TRANSFORMERS_CONFIG = "config_sentence_transformers.json"
MODULES = "modules.json"
# sentence-transformers' pooling modes that bertkit's `pooling` option names, in the order it concatenates them
ST_POOLING = ("cls", "max", "mean")
OLD_POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
# modules.json types by their last name: those bertkit computes (Dropout does nothing at inference)
KNOWN_MODULES = ("Transformer", "StaticEmbedding", "Pooling", "Dense", "Normalize", "Dropout")
# `similarity_fn_name` of config_sentence_transformers.json as bertkit's metric names
SIMILARITIES = {name: name for name in ("cosine", "dot", "euclidean", "manhattan")} | {"dot_product": "dot"}
# Dense activations by the name sentence-transformers saves (`fullname` of the module); no other name is imported
ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.linear.Identity": "identity",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.GELU": "gelu",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
}


@dataclass(frozen=True)
class DenseLayer:
    """A sentence-transformers `Dense` module: `activation(weight @ x + bias)`, weights as numpy-free torch tensors."""

    weight: Any  # torch.Tensor (out, in)
    bias: Any  # torch.Tensor (out,) or None
    activation: str  # a key of the ACTIVATIONS values

    @property
    def in_features(self) -> int:
        """The width of the vectors it takes."""
        return int(self.weight.shape[1])

    @property
    def out_features(self) -> int:
        """The width of the vectors it gives."""
        return int(self.weight.shape[0])

    def __call__(self, vectors: Any) -> Any:
        """Apply the module to `vectors` (a torch tensor): `activation(weight @ x + bias)`."""
        import torch

        out = torch.nn.functional.linear(vectors, self.weight.to(vectors.device, vectors.dtype), self.bias)
        return out if self.activation == "identity" else getattr(torch.nn.functional, self.activation)(out)


@dataclass(frozen=True)
class SentenceConfig:
    """The sentence-vector defaults a model folder declares (`pooling=None`: it declares none, bertkit uses mean)."""

    pooling: str | None = None  # bertkit's pooling spec ('mean', 'cls', 'cls+mean') from the Pooling module
    normalize: bool = False  # a Normalize module follows the pooling
    dense: tuple[DenseLayer, ...] = ()
    include_prompt: bool = True
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    max_seq_length: int | None = None
    similarity: str | None = None  # `similarity_fn_name`: the metric the model's vectors compare by (None: cosine)

    @classmethod
    def read(cls, path: str, hub: bool = False) -> SentenceConfig:
        """Read the configuration of the model at `path` (a local folder, or a hub name read from the hub cache)."""
        files = _Files(path, hub)
        settings = files.json(SENTENCE_TRANSFORMERS_CONFIG)
        settings = settings if isinstance(settings, dict) else {}
        prompts = {str(k): v for k, v in (settings.get("prompts") or {}).items() if isinstance(v, str)}
        default = settings.get("default_prompt_name")
        length = declared_max_length(path, hub)
        pooling, include, normalize, dense = None, True, False, []
        modules = files.json(MODULES)
        for module in modules if isinstance(modules, list) else []:
            kind = str(module.get("type", "")).rsplit(".", 1)[-1] if isinstance(module, dict) else ""
            folder = str(module.get("path", "")) if isinstance(module, dict) else ""
            if kind not in KNOWN_MODULES:
                raise ModelLoadError(
                    f"{path}: its sentence-transformers module {kind or module!r} ({folder or 'modules.json'}) is one "
                    "bertkit does not compute, so its vectors would differ from SentenceTransformer.encode; embed with "
                    "sentence-transformers, or remove the module from modules.json to embed without it."
                )
            if kind == "Pooling":
                pooling, include = _pooling(files.json(f"{folder}/config.json") or {}, path)
            elif kind == "Normalize":
                normalize = True
            elif kind == "Dense":
                dense.append(_dense(files, folder, path))
        default = default if isinstance(default, str) and default in prompts else None
        similarity = _similarity(settings.get("similarity_fn_name"), path)
        return cls(pooling, normalize, tuple(dense), include, prompts, default, length, similarity)


def declared_max_length(path: str, hub: bool = False) -> int | None:
    """`max_seq_length` of the model's sentence_bert_config.json: the length sentence-transformers truncates to."""
    config = _Files(path, hub).json(SENTENCE_BERT_CONFIG)
    length = config.get("max_seq_length") if isinstance(config, dict) else None
    return int(length) if isinstance(length, int) and length > 2 else None


def declared_similarity(path: str, hub: bool = False) -> str | None:
    """`similarity_fn_name` of the model's config_sentence_transformers.json as bertkit's metric (None: none said)."""
    settings = _Files(path, hub).json(SENTENCE_TRANSFORMERS_CONFIG)
    return _similarity(settings.get("similarity_fn_name") if isinstance(settings, dict) else None, path)


class _Files:
    """A model's files by name: from its folder, or from the local hub cache for a hub name."""

    def __init__(self, path: str, hub: bool) -> None:
        self.path, self.hub = path, hub

    def find(self, name: str) -> Path | None:
        if not self.hub:
            found = Path(self.path) / name
            return found if found.is_file() else None
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(self.path, name)
        return Path(cached) if isinstance(cached, str) else None

    def json(self, name: str) -> Any:
        found = self.find(name)
        if found is None:
            return None
        try:
            return json.loads(found.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None


def _similarity(name: object, path: str) -> str | None:
    """Return bertkit's metric for a `similarity_fn_name` (None when the model names none), or refuse an unknown one."""
    if name is None:
        return None
    if name not in SIMILARITIES:
        raise ModelLoadError(
            f"{path}: config_sentence_transformers.json says similarity_fn_name={name!r}; bertkit compares by "
            f"{', '.join(sorted(set(SIMILARITIES.values())))}."
        )
    return SIMILARITIES[str(name)]


def _pooling(config: dict, path: str) -> tuple[str | None, bool]:
    """Return bertkit's pooling spec and include_prompt from a Pooling module's config (old flags or `pooling_mode`)."""
    mode = config.get("pooling_mode")
    modes = [mode] if isinstance(mode, str) else list(mode) if isinstance(mode, list) else []
    if not modes:
        modes = [name for flag, name in OLD_POOLING_FLAGS.items() if config.get(flag)]
    unknown = [m for m in modes if m not in ST_POOLING]
    include = bool(config.get("include_prompt", True))
    if unknown:
        logger.warning(
            "%s: its sentence-transformers Pooling uses %s, which bertkit does not compute; bertkit's default is "
            "mean pooling (give pooling= to choose).",
            path,
            ", ".join(unknown),
        )
        return None, include
    return "+".join(name for name in ST_POOLING if name in modes) or None, include


def _dense(files: _Files, folder: str, path: str) -> DenseLayer:
    """Read a Dense module's weights (safetensors only) and activation."""
    config = files.json(f"{folder}/config.json") or {}
    activation = ACTIVATIONS.get(str(config.get("activation_function", "torch.nn.modules.activation.Tanh")))
    if activation is None or config.get("use_residual"):
        raise ModelLoadError(
            f"{path}: its Dense module ({folder}) uses {config.get('activation_function')}"
            + (" with a residual connection" if config.get("use_residual") else "")
            + f", which bertkit does not load (it loads {', '.join(sorted(set(ACTIVATIONS.values())))})."
        )
    weights = files.find(f"{folder}/model.safetensors")
    if weights is None:
        raise ModelLoadError(
            f"{path}: its Dense module ({folder}) has no model.safetensors; bertkit does not unpickle weights. Save "
            "the model again with sentence-transformers (safe_serialization=True)."
        )
    from safetensors.torch import load_file

    tensors = load_file(str(weights))
    weight = tensors.get("linear.weight")
    if weight is None:
        raise ModelLoadError(f"{path}: {folder}/model.safetensors has no linear.weight.")
    return DenseLayer(weight.float(), tensors.get("linear.bias"), activation)
