"""Faithfulness of attributions on runs' predictions: deletion and insertion curves, and the randomisation test.

    python benchmarks/attribution_faithfulness.py [--sentences 200] [--train 2000] [--steps N] [--json f] [--plot f]

Three runs of the packaged model, trained here (seeded), each explained on its own task:

- a feature classifier (`TextClassifier`: frozen encoder, scaler, logistic regression) on the first --train SST-2
  train sentences, explained on the first --sentences SST-2 dev sentences (its predicted class's probability);
- a fine-tuned classifier (`finetune --task text`, 1 epoch) on the same sentences, the same dev sentences (its
  predicted class's logit);
- a reranker: a pair classifier (`finetune --task pair`, 2 epochs, lr 1e-4) on --train next-sentence pairs of
  CoNLL-2003 train (benchmarks/pairs.py builds them), explained on --sentences pairs of CoNLL-2003 dev (its predicted
  class's logit; the words of both texts are ranked together).

Word orders compared on the same inputs and the same score: Integrated Gradients (`attribute_prediction`, default
steps and baseline), last-layer `[CLS]` attention (mean over heads, the `[CLS]` row), attention rollout (Abnar and
Zuidema 2020: each layer's head-mean attention averaged with the identity, rows normalised, multiplied from the first
layer up; the `[CLS]` row), gradient × input (on the word embeddings), and a random order (seeded). A word's score
from token scores is the sum of its word pieces'.

- Deletion: the score as the top-ranked words are removed, 10 % of them at a time (11 points); the area is the mean
  of the points. Lower is more faithful.
- Insertion: from no words, the top-ranked words put back, 10 % at a time. Higher is more faithful.
- Randomisation (Adebayo et al. 2018): the fine-tuned classifier with every weight re-initialised, the same target
  class attributed; Spearman correlation of each sentence's word scores with the trained model's. A median near 0
  says the attributions depend on what the model learned.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(Path(__file__).resolve().parent))
METHODS = ("Integrated Gradients", "last-layer [CLS] attention", "attention rollout", "gradient × input", "random")


def sst2(path: Path, limit: int) -> tuple[list[str], list[str]]:
    """The first `limit` sentences and labels of an SST-2 TSV (sentence, tab, label; a header)."""
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:] if "\t" in line]
    return [r[0] for r in rows[:limit]], [r[1] for r in rows[:limit]]


def train_runs(folder: Path, train: int) -> dict:
    """The three runs: feature classifier, fine-tuned classifier, next-sentence reranker."""
    from pairs import documents, next_sentence_pairs, write_pairs
    from sklearn.linear_model import LogisticRegression

    from bertkit import BertVectorizer, TextClassifier
    from bertkit.tasks.finetune import finetune

    texts, labels = sst2(DATA / "sst2" / "train.tsv", train)
    features = TextClassifier(BertVectorizer(layers="last", device="cpu"), LogisticRegression(max_iter=2000))
    sst_file = folder / "sst2-train.tsv"
    sst_file.write_text("".join(f"{t}\t{y}\n" for t, y in zip(texts, labels)), encoding="utf-8")
    nsp = next_sentence_pairs(documents(DATA / "conll2003" / "train.txt"), train, 0)
    common = dict(max_length=128, progress=False, dev_share=0.1, seed=0)
    return {
        "feature classifier": features.fit(texts, labels),
        "fine-tuned classifier": finetune(sst_file, output_dir=folder / "sst2", num_train_epochs=1, **common),
        "reranker (next sentence)": finetune(  # as benchmarks/pairs.py trains it: a higher learning rate
            write_pairs(folder / "nsp.tsv", nsp),
            task="pair",
            output_dir=folder / "nsp",
            num_train_epochs=2,
            lr=1e-4,
            **common,
        ),
    }


def accuracy(run, kind: str, count: int) -> float:
    """The run's accuracy on the inputs it is explained on (how much it learned)."""
    from pairs import documents, next_sentence_pairs

    if kind.startswith("reranker"):
        pairs = next_sentence_pairs(documents(DATA / "conll2003" / "dev.txt"), count, 1)
        predicted, gold = run.predict([(a, b) for a, b, _ in pairs]), [y for *_, y in pairs]
    else:
        texts, gold = sst2(DATA / "sst2" / "dev.tsv", count)
        predicted = run.predict(texts)
    return round(float(np.mean([str(p) == str(g) for p, g in zip(predicted, gold)])), 4)


def inputs(kind: str, count: int) -> list[tuple[str, str | None]]:
    """What each run is explained on: SST-2 dev sentences, or CoNLL-2003 dev next-sentence pairs."""
    from pairs import documents, next_sentence_pairs

    if kind.startswith("reranker"):
        return [(a, b) for a, b, _ in next_sentence_pairs(documents(DATA / "conll2003" / "dev.txt"), count, 1)]
    return [(text, None) for text in sst2(DATA / "sst2" / "dev.tsv", count)[0]]


def scores(run, texts: list[tuple[str, str | None]], index: int) -> np.ndarray:
    """The attributed score of each input: a feature classifier's probability of class `index`, else its logit."""
    from bertkit import TextClassifier

    if isinstance(run, TextClassifier):
        return run.predict_proba([t for t, _ in texts])[:, index]
    items = [t if p is None else (t, p) for t, p in texts]
    return np.asarray(run.logits(items))[:, index]


def curve(run, text: str, pair: str | None, order: list[int], index: int, insert: bool) -> float:
    """Deletion (or insertion) area: the mean score as the words in `order` go (or come back), 10 % at a time."""
    words = text.split() + ([] if pair is None else pair.split())
    cut = len(text.split())
    variants = []
    for step in range(11):
        chosen = set(order[: round(len(words) * step / 10)])
        first = " ".join(w for k, w in enumerate(words[:cut]) if (k in chosen) == insert)
        second = " ".join(w for k, w in enumerate(words[cut:], cut) if (k in chosen) == insert)
        variants.append((first, second if pair is not None else None))
    return float(scores(run, variants, index).mean())


def word_scores(target, token_scores: np.ndarray) -> np.ndarray:
    """Token scores summed onto the words of each text, the texts' words in order."""
    from bertkit.encoder.attribution import text_parts

    return np.concatenate([part.word_scores for part in text_parts(target.item, token_scores, 0.0, 0.0)])


def attention_scores(target) -> tuple[np.ndarray, np.ndarray]:
    """Last-layer [CLS] attention and attention rollout, per token, of the target's input."""
    integrator = target.integrator
    network = integrator.network
    previous = network.config._attn_implementation
    network.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            embeds = integrator.embed(target.item.ids)
            out = integrator.call(integrator.inputs(target.item, embeds), output_attentions=True)
    finally:
        network.set_attn_implementation(previous)
    layers = [a[0].detach().float().mean(0) for a in out.attentions]  # (tokens, tokens) per layer, mean over heads
    cls = 0  # BERT's [CLS] is the first token
    rollout = torch.eye(layers[0].shape[0])
    for attention in layers:
        mixed = 0.5 * attention + 0.5 * torch.eye(attention.shape[0])
        rollout = (mixed / mixed.sum(-1, keepdim=True)) @ rollout
    return layers[-1][cls].numpy(), rollout[cls].numpy()


def gradient_times_input(target) -> np.ndarray:
    """Gradient × input on the word embeddings, per token."""
    embeds = target.integrator.embed(target.item.ids).detach().requires_grad_(True)
    target.score(embeds).sum().backward()
    return (embeds.grad * embeds).sum(-1)[0].detach().double().numpy()


def explain(
    run, kind: str, count: int, rng: random.Random, steps: int | None
) -> tuple[dict, list[np.ndarray], list[int]]:
    """Each method's deletion and insertion areas over the inputs; IG's word scores and targets (for randomisation)."""
    from bertkit.encoder.attribution import DEFAULT_STEPS
    from bertkit.tasks.attributions import integrator_of, prediction_target

    areas = {m: {"deletion": [], "insertion": []} for m in METHODS}
    kept, targets = [], []
    integrator = integrator_of(run, steps or DEFAULT_STEPS, "pad")
    for text, pair in inputs(kind, count):
        target = prediction_target(run, text, pair, None, integrator)
        index = [str(c) for c in run.classes_].index(target.name.split("'")[1])
        attributed = target.attribute()
        ig = np.concatenate([part.word_scores for part in attributed.texts])
        last, rollout = attention_scores(target)
        by_method = {
            "Integrated Gradients": ig,
            "last-layer [CLS] attention": word_scores(target, last),
            "attention rollout": word_scores(target, rollout),
            "gradient × input": word_scores(target, gradient_times_input(target)),
            "random": np.array([rng.random() for _ in ig]),
        }
        for method, values in by_method.items():
            order = [int(k) for k in np.argsort(-values, kind="stable")]
            areas[method]["deletion"].append(curve(run, text, pair, order, index, insert=False))
            areas[method]["insertion"].append(curve(run, text, pair, order, index, insert=True))
        kept.append(ig)
        targets.append(index)
    return areas, kept, targets


def randomised(run, count: int, trained: list[np.ndarray], targets: list[int], steps: int | None) -> dict:
    """Spearman correlation of IG word scores: the trained fine-tuned classifier against a re-initialised copy."""
    from scipy.stats import spearmanr

    from bertkit import attribute_prediction
    from bertkit.encoder.attribution import DEFAULT_STEPS

    shuffled = copy.deepcopy(run)
    torch.manual_seed(0)
    shuffled.model.apply(shuffled.model._init_weights)
    correlations = []
    for (text, _), ig, index in zip(inputs("fine-tuned classifier", count), trained, targets):
        other = attribute_prediction(shuffled, text, target=str(run.classes_[index]), n_steps=steps or DEFAULT_STEPS)
        values = np.concatenate([part.word_scores for part in other.texts])
        if len(values) > 2:
            correlations.append(float(spearmanr(ig, values).statistic))
    return {"sentences": len(correlations), "median_spearman": round(statistics.median(correlations), 3)}


def plot(report: dict, path: Path) -> None:
    """Deletion and insertion areas per method, one panel per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = report["runs"]
    figure, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 4), sharey=False)
    for ax, (name, table) in zip(np.atleast_1d(axes), runs.items()):
        x = np.arange(len(METHODS))
        ax.bar(x - 0.2, [table[m]["deletion"] for m in METHODS], 0.4, label="deletion (lower: more faithful)")
        ax.bar(x + 0.2, [table[m]["insertion"] for m in METHODS], 0.4, label="insertion (higher: more faithful)")
        ax.set_xticks(x, [m.replace(" ", "\n", 1) for m in METHODS], fontsize=7)
        ax.set_title(f"{name} (accuracy {report['accuracy'][name]:.3f})", fontsize=10)
        ax.set_ylabel("mean " + ("probability" if name.startswith("feature") else "logit") + " of the predicted class")
    np.atleast_1d(axes)[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--train", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--steps", type=int, help="integration steps (default: bertkit's)")
    args = parser.parse_args()

    torch.set_num_threads(2)
    started = time.perf_counter()
    report: dict = {"sentences": args.sentences, "train": args.train, "runs": {}}
    with tempfile.TemporaryDirectory() as folder:
        runs = train_runs(Path(folder), args.train)
        report["train_seconds"] = round(time.perf_counter() - started, 1)
        for kind, run in runs.items():
            areas, ig, targets = explain(run, kind, args.sentences, random.Random(0), args.steps)
            report["runs"][kind] = {
                m: {curve_name: round(statistics.mean(v), 4) for curve_name, v in a.items()} for m, a in areas.items()
            }
            report.setdefault("accuracy", {})[kind] = accuracy(run, kind, args.sentences)
            print(kind, json.dumps(report["runs"][kind], indent=1, ensure_ascii=False), flush=True)
            if kind == "fine-tuned classifier":
                report["randomisation"] = randomised(run, args.sentences, ig, targets, args.steps)
                print("randomisation", report["randomisation"], flush=True)
    report["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    if args.plot:
        plot(report, args.plot)


if __name__ == "__main__":
    main()
