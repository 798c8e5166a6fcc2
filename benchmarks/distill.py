"""What a smaller model costs and gains: the teacher against itself cut to 4, 3 and 2 layers (`bertkit distill -l K`)
and static tables of 256 and 128 dimensions (`bertkit distill --static --dims D`).

    python benchmarks/distill.py [--data ../shared/data/sst2] [--model DIR] [--layers 4 3 2] [--repeats 3]
        [--trained 3] [--conll 2000] [--static 256 128] [--repeats 5]

`--trained K`: also a K-layer cut trained (`bertkit distill -l K --texts`) to give the teacher's vectors on the SST-2
training sentences and the first `--conll` CoNLL-2003 training sentences, one epoch; never on the dev sentences.

For each model: SST-2 feature accuracy (the model's own sentence vectors on train, a standardised logistic
regression with C chosen by 5-fold CV on train, scored on dev: nothing the cut was made from); retrieval with the
dev sentences as queries over the training sentences (cosine, top 10): recall@10 of the teacher's own top 10, and
label precision@10 (the share of the 10 neighbours with the query's sentiment, the only relevance SST-2 gives); and
its throughput on the dev sentences at fp32 and bf16 (bf16 where the CPU has it natively; a static table runs fp32
only) with every thread, and at fp32 on one thread, each the median of `--repeats` passes over the dev sentences
taken in turn with the other models' (a slower minute of a shared machine slows them all), all in one run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertkit import Encoder, distill
from bertkit.encoder.precision import fast_bf16_cpu
from bertkit.encoder.threads import set_threads
from bertkit.io.conll import read_tagged
from bertkit.io.readers import read_labelled
from bertkit.tasks.heads import feature_head


def accuracy(x_train: np.ndarray, x_dev: np.ndarray, train, dev) -> float:
    """The model's own sentence vectors → standardised logistic regression (C by CV on train) → dev accuracy."""
    head = feature_head().fit(x_train, train.labels)  # `bertkit train`'s head: scaler, logistic regression, C by CV
    return float((head.predict(x_dev) == np.asarray(dev.labels)).mean())


def top10(queries: np.ndarray, corpus: np.ndarray) -> np.ndarray:
    """(queries, 10) indices of each query's 10 nearest corpus rows by cosine (unit vectors: dot), best first."""
    scores = queries @ corpus.T
    best = np.argpartition(-scores, 10, axis=1)[:, :10]
    return np.take_along_axis(best, np.argsort(-np.take_along_axis(scores, best, 1), axis=1), 1)


def retrieval(found: np.ndarray, teacher: np.ndarray, train_labels: np.ndarray, dev_labels: np.ndarray) -> tuple:
    """(recall@10 of the teacher's top 10, label precision@10) over all queries."""
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, teacher)])
    return float(recall), float((train_labels[found] == dev_labels[:, None]).mean())


def throughputs(models: dict, precision: str, texts: list[str], repeats: int, threads: int | None = None) -> dict:
    """Median texts/s of each model's `embed` over `texts` at `precision` on `threads` (None: all), interleaved.

    Every model is loaded and warmed up first; then each repeat times one pass of every model in turn, so that a
    slower minute of a shared machine slows them all alike and the ratios hold. A static table (no bf16) is left out
    at bf16. Each model embeds with its default batch (32 texts a pass; a static table 256).
    """
    every = torch.get_num_threads()
    set_threads(threads)
    try:
        encoders = {}
        for name, folder in models.items():
            encoder = Encoder.from_pretrained(folder, concurrent_batches=1 if threads == 1 else None)
            if encoder.num_layers or precision == "fp32":
                encoders[name] = encoder.with_options(precision=precision)
                encoders[name].embed(texts)  # warm-up: graphs compiled, int8 calibrated, caches filled
        seconds: dict[str, list[float]] = {name: [] for name in encoders}
        for _ in range(repeats):
            for name, encoder in encoders.items():
                started = time.perf_counter()
                encoder.embed(texts)
                seconds[name].append(time.perf_counter() - started)
    finally:
        set_threads(every)
    return {name: len(texts) / statistics.median(times) for name, times in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2")
    parser.add_argument("--model", default=None)
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 3, 2])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trained", type=int, nargs="*", default=[3])
    parser.add_argument("--conll", type=int, default=2000)
    parser.add_argument("--static", type=int, nargs="*", default=[256, 128])
    args = parser.parse_args()
    train, dev = read_labelled(args.data / "train.tsv"), read_labelled(args.data / "dev.tsv")
    precisions = ["fp32", "bf16"] if fast_bf16_cpu() else ["fp32"]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        models = {"teacher": args.model}
        for k in args.layers:
            models[f"cut to {k}"] = str(distill(args.model, Path(scratch) / f"cut-{k}", layers=k).output)
        if args.trained:
            texts = Path(scratch) / "texts.txt"
            conll = read_tagged(args.data.parent / "conll2003" / "train.txt").words[: args.conll]
            texts.write_text("\n".join([*train.texts, *(" ".join(words) for words in conll)]) + "\n", encoding="utf-8")
        for k in args.trained:
            started = time.perf_counter()
            report = distill(args.model, Path(scratch) / f"trained-{k}", layers=k, texts=texts)
            print(f"trained the {k}-layer cut in {time.perf_counter() - started:.0f}s: {report.reason}", flush=True)
            models[f"cut to {k}, trained"] = str(report.output)
        for dims in args.static:
            report = distill(args.model, Path(scratch) / f"static-{dims}", static=True, dims=dims)
            print(f"distilled a static table in {report.seconds:.0f}s: {report.reason}", flush=True)
            models[f"static, {dims} dims"] = str(report.output)
        labels = np.asarray(train.labels), np.asarray(dev.labels)
        reference = None
        for name, folder in models.items():
            encoder = Encoder.from_pretrained(folder)
            x_train, x_dev = encoder.embed(train.texts, batch_size=128), encoder.embed(dev.texts, batch_size=128)
            found = top10(x_dev, x_train)
            reference = found if reference is None else reference
            row = {"model": name, "layers": encoder.num_layers, "accuracy": accuracy(x_train, x_dev, train, dev)}
            row["recall@10"], row["label p@10"] = retrieval(found, reference, *labels)
            rows.append(row)
            print(row, flush=True)
        for column, precision, threads in [*((p, p, None) for p in precisions), ("1 thread", "fp32", 1)]:
            speeds = throughputs(models, precision, dev.texts, args.repeats, threads)
            for row in rows:
                row.update({column: speeds[row["model"]]} if row["model"] in speeds else {})
            print(column, [round(row.get(column, 0)) for row in rows], flush=True)
    teacher = rows[0]
    print(
        f"\nSST-2 features (train {len(train.texts)}, dev {len(dev.texts)}); texts/s on dev, median of {args.repeats}"
    )
    columns = [*precisions, "1 thread"]
    speeds = " | ".join(f"{p} texts/s (×)" for p in columns)
    print(f"| model | layers | dev accuracy | Δ points | recall@10 | label p@10 | {speeds} |")
    print("|" + "---|" * (6 + len(columns)))
    for row in rows:
        speeds = " | ".join(f"{row[p]:.0f} ({row[p] / teacher[p]:.2f}×)" if p in row else "—" for p in columns)
        delta = 100 * (row["accuracy"] - teacher["accuracy"])
        found = f"{row['recall@10']:.3f} | {row['label p@10']:.3f}"
        print(f"| {row['model']} | {row['layers']} | {100 * row['accuracy']:.2f} | {delta:+.2f} | {found} | {speeds} |")


if __name__ == "__main__":
    main()
