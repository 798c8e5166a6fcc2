"""Attributions of a similarity on SST-2 dev sentences: speed against plain captum, completeness, and the baseline.

    python benchmarks/attributions.py [--data ../shared/data/sst2/dev.tsv] [--pairs 40] [--steps 16 24 32] [--json f]

On the packaged model, with its default embedding options:

1. Speed: one text of 64 tokens attributed against a held partner at the default steps (32), median of 5 after a
   warm-up: `bertkit.attribute_similarity`'s per-text cost (the call does both texts, 64 tokens each: half its time)
   against plain captum `LayerIntegratedGradients` on the word-embedding layer over the same score, once with all
   steps in one batch (captum's default) and once a step at a time (`internal_batch_size=1`).
2. Completeness: each text's `delta` (|sum − (f(input) − f(baseline))| as a share) over --pairs pairs: median and max,
   at each of --steps (speed too: the default number of steps is chosen by these two).
3. The baseline, by a deletion curve: each pair is an SST-2 dev sentence and its nearest other sentence (cosine of
   the packaged model's vectors among the first 400). The first text's words are deleted in order of attribution,
   most similar-making first, 10 % of them at a time, and the cosine to the second text read after each step; the
   area under that curve (the mean of the 11 points) is lower where the order is more faithful. Orders: IG with a
   [PAD] baseline, IG with a [MASK] baseline, and a random order (seeded), over the same pairs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent


def sentences(path: Path, limit: int) -> list[str]:
    """The first `limit` sentences of an SST-2 TSV (sentence, tab, label)."""
    rows = [line.split("\t")[0] for line in path.read_text(encoding="utf-8").splitlines() if "\t" in line]
    return [row for row in rows if row and row != "sentence"][:limit]


def nearest_pairs(encoder, texts: list[str], count: int) -> list[tuple[str, str]]:
    """Each of the first `count` texts with its nearest other text (cosine), among `texts`."""
    vectors = encoder.embed(texts, normalize_embeddings=True)
    cosines = vectors @ vectors.T
    np.fill_diagonal(cosines, -2)
    return [(texts[i], texts[int(cosines[i].argmax())]) for i in range(count)]


def speed(encoder, n_steps: int, repeats: int = 5) -> dict:
    """Seconds per text of 64 tokens: bertkit's per-text half against plain captum LayerIntegratedGradients."""
    from captum.attr import LayerIntegratedGradients

    from bertkit import attribute_similarity

    text = " ".join(
        ["the film is a gorgeous and witty look at love , loss and the quiet courage of ordinary people"] * 4
    )
    while len(encoder.tokenizer(text)["input_ids"]) > 64:
        text = text.rsplit(" ", 1)[0]
    other = " ".join(["a moving , funny and tender story about the small brave acts of people we never notice"] * 4)
    while len(encoder.tokenizer(other)["input_ids"]) > 64:
        other = other.rsplit(" ", 1)[0]
    tokens = len(encoder.tokenizer(text)["input_ids"])
    model, tokenizer = encoder.model.eval(), encoder.tokenizer
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    special = torch.tensor([tokenizer(text, return_special_tokens_mask=True)["special_tokens_mask"]])
    base = torch.where(special.bool(), ids, torch.full_like(ids, tokenizer.pad_token_id))
    with torch.no_grad():
        partner = torch.nn.functional.normalize(torch.tensor(encoder.embed([other])), dim=-1)

    def score(input_ids: torch.Tensor) -> torch.Tensor:
        mask = torch.ones_like(input_ids)
        states = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        return (torch.nn.functional.normalize(states.mean(1), dim=-1) * partner).sum(-1)

    lig = LayerIntegratedGradients(score, model.get_input_embeddings())
    ways = {
        "bertkit (per text)": lambda: attribute_similarity(encoder, text, other, n_steps=n_steps),
        "captum LIG, all steps in one batch": lambda: lig.attribute(ids, base, n_steps=n_steps),
        # what bertkit reports with every attribution: completeness, which costs captum the same two extra scores
        "captum LIG, one batch, with its convergence delta": lambda: lig.attribute(
            ids, base, n_steps=n_steps, return_convergence_delta=True
        ),
        "captum LIG, a step at a time": lambda: lig.attribute(ids, base, n_steps=n_steps, internal_batch_size=1),
    }
    for way in ways.values():
        way()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(repeats):
        for name, way in ways.items():  # interleaved
            started = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) for name, values in times.items()}
    medians["bertkit (per text)"] /= 2  # the call attributes both texts, of 64 tokens each
    return {"tokens": tokens, "steps": n_steps, "seconds": {k: round(v, 3) for k, v in medians.items()}}


def deletion_area(encoder, text: str, other: str, order: list[int]) -> float:
    """Mean cosine to `other` as the words of `text` are deleted in `order`, 10 % at a time (11 points)."""
    words = text.split()
    points = []
    for step in range(11):
        gone = set(order[: round(len(words) * step / 10)])
        kept = " ".join(w for k, w in enumerate(words) if k not in gone)
        points.append(kept)
    vectors = encoder.embed([*points, other], normalize_embeddings=True)
    return float((vectors[:-1] @ vectors[-1]).mean())


def faithfulness(encoder, pairs: list[tuple[str, str]]) -> dict:
    """Deletion areas (lower: more faithful) and completeness of IG-[PAD], IG-[MASK] and a random order."""
    from bertkit import attribute_similarity

    rng = random.Random(0)
    areas: dict[str, list[float]] = {"IG, [PAD] baseline": [], "IG, [MASK] baseline": [], "random order": []}
    deltas: dict[str, list[float]] = {"pad": [], "mask": []}
    for text, other in pairs:
        for baseline, name in (("pad", "IG, [PAD] baseline"), ("mask", "IG, [MASK] baseline")):
            result = attribute_similarity(encoder, text, other, baseline=baseline)
            deltas[baseline] += [part.delta for part in result.texts]
            scores = result.texts[0].word_scores
            areas[name].append(deletion_area(encoder, text, other, list(np.argsort(-scores))))
        order = list(range(len(text.split())))
        rng.shuffle(order)
        areas["random order"].append(deletion_area(encoder, text, other, order))
    return {
        "pairs": len(pairs),
        "deletion_area_mean": {k: round(statistics.mean(v), 4) for k, v in areas.items()},
        "delta_median_pct": {k: round(100 * statistics.median(v), 3) for k, v in deltas.items()},
        "delta_max_pct": {k: round(100 * max(v), 3) for k, v in deltas.items()},
    }


def completeness(encoder, pairs: list[tuple[str, str]], n_steps: int) -> dict:
    """Median and largest `delta` (%) of both texts of every pair at `n_steps`, [PAD] baseline."""
    from bertkit import attribute_similarity

    deltas = [part.delta for a, b in pairs for part in attribute_similarity(encoder, a, b, n_steps=n_steps).texts]
    return {"median_pct": round(100 * statistics.median(deltas), 3), "max_pct": round(100 * max(deltas), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "sst2" / "dev.tsv")
    parser.add_argument("--pairs", type=int, default=40)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--steps", type=int, nargs="+", default=[32], help="the speed and completeness at each")
    args = parser.parse_args()

    from bertkit import Encoder

    torch.set_num_threads(2)
    encoder = Encoder.from_pretrained(device="cpu")
    report: dict = {"speed": [speed(encoder, n) for n in args.steps]}
    print(json.dumps(report["speed"], indent=1), flush=True)
    pairs = nearest_pairs(encoder, sentences(args.data, 400), args.pairs)
    report["completeness_by_steps"] = {n: completeness(encoder, pairs, n) for n in args.steps}
    print(json.dumps(report["completeness_by_steps"], indent=1), flush=True)
    report["faithfulness"] = faithfulness(encoder, pairs)
    print(json.dumps(report["faithfulness"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
