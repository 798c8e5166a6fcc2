"""Pure views of one sentence: JSON-able dicts (floats rounded) built from the same library calls as the CLI."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Sequence
from itertools import groupby
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..encoder.coverage import text_coverage
from ..encoder.encode import Encoder
from ..encoder.layers import parse_layers
from ..encoder.pooling import parse_pooling
from ..encoder.runner import call_model, takes_type_ids
from ..errors import InputError

if TYPE_CHECKING:
    from ..encoder.tokenize import Batch

MAX_TOKENS = 128  # the token panels (heatmaps, attention) show at most this many positions
DIGITS = 4
# One served answer carries at most this many layers of token vectors and attention maps (each up to 128 x 128):
# every head of one layer, or one head (or the mean) of every layer of a 12-layer model; about 6 MB of JSON at most.
MAX_VECTOR_LAYERS = 4
MAX_ATTENTION_MAPS = 16
ALL, MEAN = "all", "mean"
Choice = int | list[int] | str | None  # layers or heads asked for: a number, a list, 'all' (a head: 'mean') or None

_EAGER: weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module] = weakref.WeakKeyDictionary()


def tokenization(encoder: Encoder, text: str, pad_to: int | None = None, pair: str | None = None) -> dict:
    """Build the guide's table (tokens, ids, mask, type ids, word ids) padded to `pad_to`, with the CLI's coverage line.

    With a `pair`, the tutorial's `[CLS] a [SEP] b [SEP]`: where each segment runs and where `[SEP]` divides them.
    """
    batch = _batch(encoder, text, pad_to, pair)
    coverage = text_coverage(encoder.tokenizer, [text] + ([pair] if pair else []))
    rows = batch.table(0)
    separators = [r["position"] for r in rows if r["mask"] and r["token"] == encoder.tokenizer.sep_token]
    return {
        "words": text.split(),
        "pair": pair,
        "pair_words": pair.split() if pair else [],
        "separators": separators,
        "segments": _segments(rows),
        "rows": rows,
        "unknown_positions": [r["position"] for r in rows if r["id"] == encoder.tokenizer.unk_token_id],
        "length": int(batch.attention_mask[0].sum()),
        "width": int(batch.input_ids.shape[1]),
        "truncated": bool(batch.truncated[0]),
        "coverage": {
            "message": coverage.message(),
            "poor": bool(coverage.poor),
            "unknown": coverage.n_unknown,
            "tokens_per_word": round(coverage.tokens_per_word, 2),
        },
    }


def through_model(
    encoder: Encoder,
    text: str,
    pad_to: int | None = None,
    pair: str | None = None,
    layer: Choice = None,
    attention_layer: Choice = None,
    head: Choice = None,
    max_layers: int | None = None,
    max_maps: int | None = None,
) -> dict:
    """Tensor shapes, per-layer norms and cosines, token vectors of layer(s) and attention of layer(s) / head(s).

    Parameters
    ----------
    encoder, text, pad_to, pair
        The model and the sentence, as `tokenization` takes them.
    layer, attention_layer : int, list of int, 'all' or None
        The hidden states whose token vectors, and the layers whose attention, to send (None: the last).
    head : int, list of int, 'all', 'mean' or None
        The heads of each of those layers ('mean' and None: their average).
    max_layers, max_maps : int, optional
        Refuse to send more layers of token vectors / attention maps than this (None: no cap).

    Returns
    -------
    dict
        Tokens, shapes, norms, cosines, `vectors` by layer and `attention` by layer and head.
    """
    n_states, n_heads = encoder.num_layers + 1, _heads(encoder)
    layers = _pick(layer, n_states, "layer", "hidden states (0 = embeddings)", n_states - 1)
    attention_layers = _pick(attention_layer, n_states, "attention layer", "layers", n_states - 1, first=1)
    heads = _pick(MEAN if head is None else head, n_heads, "head", "attention heads", MEAN, extra=(MEAN,))
    _cap(len(layers), max_layers, "layer", "layers of token vectors")
    _cap(len(attention_layers) * len(heads), max_maps, "attention_layer x head", "attention maps")
    batch = _batch(encoder, text, pad_to, pair)
    out = encoder.forward(batch)
    states = out.hidden_states  # layers + 1 tensors of (1, n, hidden)
    attentions = attention_weights(encoder, batch)  # layers tensors of (1, heads, n, n)
    stacked = torch.stack([s[0].float() for s in states])  # (states, n, hidden)
    norms = stacked.norm(dim=-1)
    cosines = torch.nn.functional.cosine_similarity(stacked[1:], stacked[:-1], dim=-1)
    n, hidden = int(batch.input_ids.shape[1]), encoder.hidden_size
    named: list[tuple[str, list[int] | None]] = [("input_ids", [1, n]), ("attention_mask", [1, n])]
    named += [(f"hidden_states[{i}]" + (" (embeddings)" if i == 0 else ""), [1, n, hidden]) for i in range(n_states)]
    named += [("attentions[i] (each layer)", [1, n_heads, n, n]), ("last_hidden_state", [1, n, hidden])]
    named += [("pooler_output", [1, hidden] if out.pooler_output is not None else None)]
    return {
        "tokens": batch.tokens[0],
        "mask": batch.attention_mask[0].tolist(),
        "n_states": n_states,
        "n_heads": n_heads,
        "hidden_size": hidden,
        "shapes": [{"name": name, "shape": shape} for name, shape in named],
        "norms": _round(norms),
        "cosine_to_previous": _round(cosines),
        "vectors": {str(i): _round(stacked[i]) for i in layers},
        "attention": {
            str(i): {str(h): _round(_head(attentions[i - 1][0], h)) for h in heads} for i in attention_layers
        },
    }


def _heads(encoder: Encoder) -> int:
    config = encoder.model.config
    return int(getattr(config, "num_attention_heads", getattr(config, "n_heads", 1)))


def _head(attention: torch.Tensor, head: int | str) -> torch.Tensor:
    """One head's (n, n) attention of a layer's (heads, n, n), or their mean."""
    return attention.mean(dim=0) if head == MEAN else attention[head]


def _cap(count: int, cap: int | None, name: str, what: str) -> None:
    if cap is not None and count > cap:
        raise InputError(
            f"{name}: that asks for {count} {what}; one answer carries at most {cap}. Ask for fewer "
            "(a number or a short list such as [0, 6])."
        )


def attention_weights(encoder: Encoder, batch: Batch) -> tuple[torch.Tensor, ...]:
    """Attention probabilities of every layer, (1, heads, n, n) each, from an eager-attention twin of the model.

    SDPA kernels do not return attention weights, and switching the shared model to eager attention would slow
    every other caller; the twin shares the weight tensors (no copy) and differs only in its attention function.
    """
    twin = _EAGER.get(encoder.model)
    if twin is None:
        shared = {id(t): t for t in list(encoder.model.parameters()) + list(encoder.model.buffers())}
        twin = copy.deepcopy(encoder.model, shared)
        twin.set_attn_implementation("eager")
        _EAGER[encoder.model] = twin
    inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
    if takes_type_ids(twin):
        inputs["token_type_ids"] = batch.token_type_ids
    out = call_model(twin, inputs, encoder.device, encoder.precision, output_attentions=True, return_dict=True)
    return tuple(a.float() for a in out.attentions)


def sentence_vector(
    encoder: Encoder, text: str, layers: str = "last", pooling: str = "mean", compare: str | None = None
) -> dict:
    """`Encoder.embed(text, layers, pooling)`: the vector, its dimension, and its cosine to a second sentence."""
    selection = parse_layers(layers)
    methods = parse_pooling(pooling)
    if methods == ("none",):
        raise InputError(
            "pooling='none' gives token vectors, not one sentence vector; choose cls, mean, max or pooler."
        )
    vectors = encoder.embed([text, compare] if compare else [text], layers=layers, pooling=pooling, warn=False)
    a, b = vectors[0], vectors[-1]
    cosine = round(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12)), DIGITS) if compare else None
    return {
        "layers": selection.spec,
        "pooling": "+".join(methods),
        "dim": int(vectors.shape[1]),
        "vector": _round(a),
        "norm": round(float(np.linalg.norm(a)), DIGITS),
        "compare": compare or None,
        "cosine": cosine,
    }


def prediction(run: Any, text: str, features: np.ndarray | None = None, pair: str | None = None) -> dict:
    """Predict as the CLI prints it: a classifier's label and probabilities, a regressor's score, a tagger's entities.

    A pair run reads (text, pair); a QA run answers the text from the pair. `features`: a feature run's vectors of
    [text] when already computed, so that the map and the prediction share one forward pass.
    """
    if hasattr(run, "explanation"):  # question answering: the sentence is the question, the pair its context
        if not pair:
            raise InputError("this run answers questions: type the context under “Pair”; the sentence is the question.")
        return run.explanation(text, pair)
    takes_pairs = getattr(run, "takes_pairs", False) is True
    if takes_pairs and not pair:
        raise InputError("this run scores text pairs: type a second text under “Pair” to see its score.")
    item = (text, pair) if takes_pairs else text
    if getattr(run, "problem", None) == "regression":
        score = round(float(run.predict([item])[0]), DIGITS)
        return {"kind": "score", "pair": pair if takes_pairs else None, "score": score}
    if hasattr(run, "predict_proba"):
        probabilities = (run.head_.predict_proba(features) if features is not None else run.predict_proba([item]))[0]
        best = int(np.argmax(probabilities))
        return {
            "kind": "classifier",
            "label": str(run.classes_[best]),
            "probability": f"{probabilities[best]:.4f}",
            "classes": [
                {"label": str(c), "probability": round(float(p), DIGITS)} for c, p in zip(run.classes_, probabilities)
            ],
        }
    found = run.predict([text])[0]
    entities = [
        {"type": e.type, "text": e.text, "start": e.char_start, "end": e.char_end, "score": e.score} for e in found
    ]
    return {"kind": "tagger", "text": text, "entities": entities}


def probe_table(record: dict) -> dict:
    """Lay out a probe run's `probe.json` as a table and one score-by-layer series per pooling."""
    rows = record.get("rows", [])
    if not rows:
        raise InputError("the probe record has no rows; write it with `bertkit probe`.")
    metric = record.get("metric", "score")
    choices = list(dict.fromkeys(r["choice"] for r in rows if r["pooling"] != "pooler"))
    series = []
    for pooling in dict.fromkeys(r["pooling"] for r in rows):
        by_choice = {r["choice"]: r for r in rows if r["pooling"] == pooling}
        xs = [c for c in choices if c in by_choice] if pooling != "pooler" else list(by_choice)
        series.append({"pooling": pooling, "x": xs, "y": [round(100 * by_choice[c]["score"], 2) for c in xs]})
    best = max(rows, key=lambda r: r["score"])
    return {
        "task": record.get("task"),
        "metric": metric,
        "secondary_metric": record.get("secondary_metric"),
        "facts": _named(record.get("facts", {})),
        "rows": [
            {
                "pooling": r["pooling"],
                "layers": r["choice"],
                "dim": r["dim"],
                metric: round(100 * r["score"], 1),
                record.get("secondary_metric", "secondary"): round(100 * r["secondary"], 1),
            }
            for r in rows
        ],
        "series": series,
        "best": {"pooling": best["pooling"], "layers": best["choice"], "score": round(100 * best["score"], 1)},
    }


def _named(facts: dict) -> dict:
    """Return a probe record's facts with names, not paths: its data files' names, a local model's directory name."""
    named = dict(facts)
    for key in ("train", "dev"):
        if isinstance(named.get(key), str):
            named[key] = PurePath(named[key]).name
    model = named.get("model")
    if isinstance(model, str) and (PurePath(model).is_absolute() or model.startswith((".", "~"))):
        named["model"] = PurePath(model).name
    return named


def _batch(encoder: Encoder, text: str, pad_to: int | None, pair: str | None = None) -> Batch:
    """Build what `bertkit tokenize --max-length [--pair]` builds: padded to `pad_to` (3 to the limit), or unpadded."""
    limit = min(MAX_TOKENS, encoder.max_length)
    if pad_to is not None and (isinstance(pad_to, bool) or not isinstance(pad_to, int) or not 3 <= pad_to <= limit):
        raise InputError(f"padding {pad_to!r}: give a whole number of tokens from 3 to {limit}, or leave it empty.")
    pairs = [pair] if pair else None
    return encoder.tokenize([text], pairs, max_length=pad_to or limit, padding="max_length" if pad_to else "longest")


def _segments(rows: list[dict]) -> list[dict]:
    """Each segment's real tokens: [{type_id, first, last}] in order (one for a single text, two for a pair)."""
    runs = [list(run) for _, run in groupby((row for row in rows if row["mask"]), key=lambda row: row["type_id"])]
    return [{"type_id": run[0]["type_id"], "first": run[0]["position"], "last": run[-1]["position"]} for run in runs]


def _pick(
    choice: Choice, count: int, name: str, what: str, default: int | str, first: int = 0, extra: Sequence[str] = ()
) -> list:
    """Return the chosen indices: None → [default], 'all' → every one, a number or a list (or an `extra` word)."""
    if choice is None:
        return [default]
    if choice == ALL:
        return list(range(first, count))
    if isinstance(choice, str) and choice in extra:
        return [choice]
    values = choice if isinstance(choice, list) else [choice]
    words = "".join(f", '{word}'" for word in (ALL, *extra))
    for value in values or [None]:
        if isinstance(value, bool) or not isinstance(value, int) or not first <= value < count:
            raise InputError(
                f"{name} {value!r}: this model has {what} {first} to {count - 1}; give one, a list of "
                f"them{words} or null."
            )
    return list(dict.fromkeys(values))


def _round(values: torch.Tensor | np.ndarray | Sequence[float]) -> list:
    array = values.float().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values, dtype=np.float32)
    return np.round(array.astype(np.float64), DIGITS).tolist()
