"""SST-2 with frozen-encoder features + a classifier: reproduce the visual guide, then beat it.

    python benchmarks/sst2_features.py [--data ../shared/data/sst2] [--model DIR]

(a) the guide's protocol: first 2000 training sentences, [CLS] of the last layer, 75/25 split (seed 42),
    LogisticRegression with default C (the guide) and with C chosen by CV (bertkit);
(b) full train → dev for each feature choice, C chosen by 5-fold CV on train only (dev never picks anything).

Every hidden state of every text comes from ONE embed call (layers="all:concat", pooling="cls+mean+max") plus
one for the pooler; each feature choice is then a slice/sum of those vectors, which is exactly what bertkit
computes for that choice (mean pooling is linear, so pooling then summing layers = summing then pooling; the
tests check every layer/pooling combination against plain transformers). Fits run with 1 BLAS thread.
"""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

from bertkit import Encoder
from bertkit.io.readers import read_labelled
from bertkit.tasks.heads import chosen_C, feature_head

POOLS = ("cls", "mean", "max")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2")
    parser.add_argument("--model", default=None)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()

    train = read_labelled(args.data / "train.tsv")
    dev = read_labelled(args.data / "dev.tsv")
    encoder = Encoder.from_pretrained(args.model)
    states, dim = encoder.num_layers + 1, encoder.hidden_size

    started = time.perf_counter()
    feats = {}
    for name, data in (("train", train), ("dev", dev)):
        everything = encoder.embed(data.texts, layers="all:concat", pooling="cls+mean+max", batch_size=args.batch_size)
        with_pooler = encoder.info()["pooler"]
        pooler = encoder.embed(data.texts, pooling="pooler", batch_size=args.batch_size) if with_pooler else None
        feats[name] = (everything, pooler)
    embed_seconds = time.perf_counter() - started
    n_texts = len(train.texts) + len(dev.texts)
    print(
        f"model {encoder.source.spec}: {states - 1} layers, hidden {dim}; embedded {n_texts} texts (all layers, "
        f"3 poolings, "
        f"+ pooler) in {embed_seconds:.0f}s = {n_texts / embed_seconds:.0f} texts/s\n"
    )

    def block(which: str, pool: str, layer: int) -> np.ndarray:
        everything = feats[which][0]
        start = (POOLS.index(pool) * states + layer) * dim
        return everything[:, start : start + dim]

    def choice(which: str, pool: str, layers: list[int], combine: str = "concat") -> np.ndarray:
        blocks = [block(which, p, layer) for p in pool.split("+") for layer in layers]
        return np.sum(blocks, axis=0) if combine == "sum" else np.hstack(blocks)

    # (a) the guide's protocol
    labels = train.labels[:2000]
    cls_2000 = block("train", "cls", states - 1)[:2000]
    x_tr, x_te, y_tr, y_te = train_test_split(cls_2000, labels, test_size=0.25, random_state=42)
    print("(a) the guide's protocol: first 2000 train sentences, [CLS] of last layer, 75/25 split (seed 42)")
    print(f"{'classifier':<52} {'test acc':>8} {'fit s':>6}")
    for title, head in (
        ("LogisticRegression(C=1), unscaled (the guide)", feature_head(LogisticRegression(C=1.0), scale=False)),
        ("LogisticRegression, C by 5-fold CV, standardised", feature_head()),
    ):
        started = time.perf_counter()
        head.fit(x_tr, y_tr)
        accuracy = np.mean(head.predict(x_te) == np.array(y_te))
        print(f"{title:<52} {accuracy * 100:8.1f} {time.perf_counter() - started:6.1f}")

    # (b) full train → dev
    last = states - 1
    last4 = list(range(last - 3, last + 1))
    rows = [("cls", "last", lambda w: block(w, "cls", last)), ("mean", "last", lambda w: block(w, "mean", last))]
    if encoder.info()["pooler"]:
        rows.insert(1, ("pooler", "last", lambda w: feats[w][1]))
    rows += [("mean", f"{i}", functools.partial(lambda w, i: block(w, "mean", i), i=i)) for i in range(states)]
    rows += [
        ("mean", "last4:sum", lambda w: choice(w, "mean", last4, "sum")),
        ("mean", "last4:concat", lambda w: choice(w, "mean", last4)),
        ("max", "last4:concat", lambda w: choice(w, "max", last4)),
        ("cls+mean", "last4:concat", lambda w: choice(w, "cls+mean", last4)),
        ("mean", "all:sum", lambda w: choice(w, "mean", list(range(states)), "sum")),
        ("mean", "all:concat", lambda w: choice(w, "mean", list(range(states)))),
        ("mean+max", "all:concat", lambda w: choice(w, "mean+max", list(range(states)))),
    ]
    print(
        f"\n(b) full train ({len(train.texts)}) → dev ({len(dev.texts)}); LogisticRegression, C by 5-fold CV on train"
    )
    print(f"{'pooling':<10} {'layers':<13} {'dim':>5} {'scaled':>6} {'C':>7} {'CV acc':>7} {'dev acc':>7} {'fit s':>6}")
    best = None
    for pooling, layers, build in rows:
        x_train, x_dev = build("train"), build("dev")
        for scale in (False, True):
            started = time.perf_counter()
            head = feature_head(scale=scale).fit(x_train, train.labels)
            seconds = time.perf_counter() - started
            accuracy = float(np.mean(head.predict(x_dev) == np.array(dev.labels)))
            C, cv_scores, _ = chosen_C(head)
            cv_accuracy = max(cv_scores.values())
            print(
                f"{pooling:<10} {layers:<13} {x_train.shape[1]:5d} {'yes' if scale else 'no':>6} {C:7g} "
                f"{cv_accuracy * 100:7.1f} {accuracy * 100:7.1f} {seconds:6.1f}",
                flush=True,
            )
            if best is None or cv_accuracy > best[0]:
                best = (cv_accuracy, accuracy, pooling, layers, scale)
    print(
        f"\nbest by CV accuracy (chosen without looking at dev): pooling={best[2]} layers={best[3]} "
        f"scaled={'yes' if best[4] else 'no'} → dev {best[1] * 100:.1f}%  (bertkit train's default: mean / "
        "all:concat / scaled)"
    )


if __name__ == "__main__":
    main()
