"""A refactor keeps every number: vectors, predictions, accuracy and speed of two bertkit trees, in one run.

    python benchmarks/refactor_check.py --before /path/to/old/src [--after src] [--repeats 3] [--json out.json]

Each tree runs in its own process (`PYTHONPATH=<tree>`), on the same SST-2 sentences of ../shared/data, one tree
after the other, `--repeats` times, alternating: the packaged model's vectors of the dev sentences (explicit options:
the last layer, mean pooling, no normalization, so that a changed default cannot hide a changed number; and the CLS
vector of layer -2), a feature classifier (logistic regression, C=1) trained on the first `--train` training
sentences and its dev predictions and accuracy, and embedding throughput (texts/s, median of the repeats) on the
training sentences. The report puts the two trees side by side: the largest vector difference, how many predictions
differ, both accuracies, the throughput ratio.

Only API that both trees share is used (`Encoder.from_pretrained`, `embed(texts, layers=, pooling=)`,
`BertVectorizer`, `TextClassifier`); a newer tree is asked not to normalize (`normalize_embeddings=False`): the
packaged model's own vector (its mean of the last layer) is now unit length by default, as its sentence-transformers
configuration says, which is a change of default, not of numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "sst2"
ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import json, sys, time
import numpy as np
from sklearn.linear_model import LogisticRegression
import bertkit
from bertkit import BertVectorizer, Encoder, TextClassifier

args = json.loads(sys.argv[1])
def sentences(name):
    lines = open(f"{args['data']}/{name}", encoding="utf-8").read().splitlines()[1:]
    return [l.split("\t")[0] for l in lines if l.strip()], [l.split("\t")[1] for l in lines if l.strip()]
train, train_labels = sentences("train.tsv")
dev, dev_labels = sentences("dev.tsv")
encoder = Encoder.from_pretrained()
def embed(texts, **options):
    try:
        return np.asarray(encoder.embed(texts, normalize_embeddings=False, **options))
    except TypeError:  # a tree without normalize_embeddings never normalizes an explicit pooling
        return np.asarray(encoder.embed(texts, **options))
out = {"version": bertkit.__version__, "file": bertkit.__file__}
mean = embed(dev, layers="last", pooling="mean")
cls = embed(dev, layers="-2", pooling="cls")
np.save(args["vectors"] + ".mean.npy", mean)
np.save(args["vectors"] + ".cls.npy", cls)
embed(train[:200], layers="last", pooling="mean")  # warm-up
started = time.perf_counter()
embed(train, layers="last", pooling="mean")
out["texts_per_second"] = len(train) / (time.perf_counter() - started)
n = args["train"]
try:
    vectorizer = BertVectorizer(layers="last", pooling="mean", normalize_embeddings=False)
except TypeError:  # a tree without normalize_embeddings never normalizes an explicit pooling
    vectorizer = BertVectorizer(layers="last", pooling="mean")
model = TextClassifier(vectorizer, LogisticRegression(C=1.0, max_iter=3000))
model.fit(train[:n], train_labels[:n])
predicted = [str(p) for p in model.predict(dev)]
out["predictions"] = predicted
out["accuracy"] = float(np.mean([p == g for p, g in zip(predicted, dev_labels)]))
print(json.dumps(out))
"""


def run_tree(src: Path, vectors: Path, train: int) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(src), "BERTKIT_CACHE": tempfile.mkdtemp(prefix="bertkit-cache-")}
    payload = json.dumps({"data": str(DATA), "vectors": str(vectors), "train": train})
    done = subprocess.run(
        [sys.executable, "-c", WORKER, payload], env=environment, capture_output=True, text=True, timeout=3600
    )
    if done.returncode != 0:
        raise SystemExit(f"{src}: the worker failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(result["file"]).resolve().is_relative_to(src.resolve()):
        raise SystemExit(f"{src}: bertkit was imported from {result['file']}, not from this tree")
    return result


def main() -> int:
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="the old tree's src folder")
    parser.add_argument("--after", type=Path, default=ROOT / "src", help="the new tree's src folder")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--train", type=int, default=2000, help="training sentences for the classifier")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bertkit-refactor-"))
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    for repeat in range(args.repeats):
        for name in ("before", "after"):  # alternating, so that a slower minute of the machine hits both
            src = args.before if name == "before" else args.after
            runs[name].append(run_tree(src, folder / f"{name}-{repeat}", args.train))
            print(f"repeat {repeat + 1}: {name} {runs[name][-1]['texts_per_second']:.0f} texts/s", flush=True)
    before, after = runs["before"][0], runs["after"][0]
    report = {
        "versions": {"before": before["version"], "after": after["version"]},
        "max_abs_mean_vectors": float(
            np.abs(np.load(folder / "before-0.mean.npy") - np.load(folder / "after-0.mean.npy")).max()
        ),
        "max_abs_cls_vectors": float(
            np.abs(np.load(folder / "before-0.cls.npy") - np.load(folder / "after-0.cls.npy")).max()
        ),
        "predictions_differing": sum(a != b for a, b in zip(before["predictions"], after["predictions"])),
        "dev_sentences": len(before["predictions"]),
        "accuracy": {"before": before["accuracy"], "after": after["accuracy"]},
        "texts_per_second": {
            name: {
                "median": statistics.median(r["texts_per_second"] for r in results),
                "runs": [round(r["texts_per_second"], 1) for r in results],
            }
            for name, results in runs.items()
        },
    }
    speeds = report["texts_per_second"]
    report["speed_ratio_after_over_before"] = speeds["after"]["median"] / speeds["before"]["median"]
    print(
        f"vectors (dev, last/mean): max |before - after| {report['max_abs_mean_vectors']:.2e}; "
        f"(layer -2, cls) {report['max_abs_cls_vectors']:.2e}\n"
        f"predictions: {report['predictions_differing']} of {report['dev_sentences']} differ; accuracy "
        f"{before['accuracy']:.4f} before, {after['accuracy']:.4f} after\n"
        f"throughput (median of {args.repeats}): {speeds['before']['median']:.0f} texts/s before, "
        f"{speeds['after']['median']:.0f} after ({report['speed_ratio_after_over_before']:.2f}x)"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
