"""Sentence-pair tasks built from CoNLL-2003's news documents: a fine-tuned cross-encoder against the packaged
model's bi-encoder cosine and BM25, and rerank throughput against sentence-transformers' CrossEncoder.

    python benchmarks/pairs.py [--data ../shared/data/conll2003] [--epochs 2] [--json pairs.json]

There is no pair data set in ../shared/data, so two are built from the CoNLL-2003 documents (`-DOCSTART-` separates
them; the first sentence of each is its headline, the second usually a dateline such as "LONDON 1996-08-30"). Body
sentences are those after the dateline with at least 5 words.

1. Next sentence. Pairs (A, B) of body sentences: B follows A in A's document (label 1), or B is a random body
   sentence of another document (label 0), half and half, seeded. Train: 8,000 pairs from train.txt; test: 1,000
   from dev.txt. Measured by accuracy. The bi-encoder and BM25 baselines score each pair (cosine of mean-pooled
   unit vectors; BM25 score of B for the query A over all sentences of the split) and take the threshold that is
   best on the training pairs. The cross-encoder's best epoch is chosen on 10% of the training pairs.
2. Reranking. Queries are the headlines of the dev documents with at least 4 body sentences; the relevant sentences
   of a query are its own document's body sentences. Each query's candidates are the top 30 body sentences of the
   whole dev split by BM25 (a first-stage retriever), which every method then orders: BM25 (the first stage as it
   is), the bi-encoder's cosine, the cross-encoder. Measured by nDCG@10 and MRR@10 over the queries. The
   cross-encoder is trained the same way on train.txt: each headline with its top 30 BM25 body sentences of the
   train split, 1.0 for its own document's and 0.0 for the others', as a regressor (`--task pair --regression`);
   the best epoch is chosen on the pairs of the last 100 train documents, which it does not train on.

Rerank throughput: the same (query, candidate) pairs scored by `FineTunedClassifier.scores` and by
`sentence_transformers.CrossEncoder(run).predict` (batch 64, the same fine-tuned run), median of 3.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "conll2003"
MIN_WORDS, MIN_BODY, CANDIDATES, TRAIN_POOL, NSP_PAIRS, LR = 5, 4, 30, 30, 8000, 1e-4


def documents(path: Path) -> list[dict]:
    """[{headline, body: [sentences]}] from a CoNLL file (sentences joined by spaces)."""
    docs, sentences, words = [], [], []
    for line in path.read_text(encoding="utf-8").splitlines() + ["-DOCSTART-"]:
        if line.startswith("-DOCSTART-") or not line.strip():
            if words:
                sentences.append(" ".join(words))
                words = []
            if line.startswith("-DOCSTART-") and sentences:
                body = [s for s in sentences[2:] if len(s.split()) >= MIN_WORDS]
                docs.append({"headline": sentences[0], "body": body})
                sentences = []
            continue
        words.append(line.split()[0])
    return docs


def next_sentence_pairs(docs: list[dict], n: int, seed: int) -> list[tuple[str, str, int]]:
    rng = random.Random(seed)
    follows = [(d, i) for d, doc in enumerate(docs) for i in range(len(doc["body"]) - 1)]
    pairs = []
    for d, i in rng.sample(follows, n):
        a = docs[d]["body"][i]
        if len(pairs) % 2 == 0:
            pairs.append((a, docs[d]["body"][i + 1], 1))
        else:
            other = rng.choice([k for k in range(len(docs)) if k != d and docs[k]["body"]])
            pairs.append((a, rng.choice(docs[other]["body"]), 0))
    return pairs


class Lexical:
    """BM25 (bm25s, English stopwords) over a list of sentences: scores of all of them for a query."""

    def __init__(self, sentences: list[str]):
        import bm25s

        self.bm25s = bm25s
        self.sentences = sentences
        self.index = {s: i for i, s in enumerate(sentences)}
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25s.tokenize(sentences, stopwords="en", show_progress=False), show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        tokens = self.bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        if not tokens:  # nothing but stopwords: BM25 ranks nothing above anything
            return np.zeros(len(self.sentences))
        return self.retriever.get_scores(tokens)

    def top(self, query: str, k: int, exclude: set[int] = frozenset()) -> list[int]:
        scores = self.scores(query)
        order = [int(i) for i in np.argsort(-scores, kind="stable") if int(i) not in exclude]
        return order[:k]


def best_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
    candidates = np.unique(scores)
    accuracies = [np.mean((scores >= t) == labels) for t in candidates]
    return float(candidates[int(np.argmax(accuracies))])


def cosine_pairs(encoder, pairs) -> np.ndarray:
    a = encoder.embed([p[0] for p in pairs], batch_size=64, progress=False, warn=False)
    b = encoder.embed([p[1] for p in pairs], batch_size=64, progress=False, warn=False)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def write_pairs(path: Path, pairs) -> Path:
    path.write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in pairs), encoding="utf-8")
    return path


def next_sentence(train_docs, dev_docs, folder: Path, epochs: int, encoder) -> dict:
    from bertkit.tasks.finetune import finetune

    train, test = next_sentence_pairs(train_docs, NSP_PAIRS, 0), next_sentence_pairs(dev_docs, 1000, 1)
    y_train, y_test = np.array([y for *_, y in train]), np.array([y for *_, y in test])
    results = {}
    cos_train, cos_test = cosine_pairs(encoder, train), cosine_pairs(encoder, test)
    results["bi-encoder cosine"] = float(np.mean((cos_test >= best_threshold(cos_train, y_train)) == y_test))
    scores = {}
    for name, docs, pairs in (("train", train_docs, train), ("test", dev_docs, test)):
        lexical = Lexical([s for doc in docs for s in doc["body"]])
        scores[name] = np.array([lexical.scores(a)[lexical.index[b]] for a, b, _ in pairs])
    results["BM25"] = float(np.mean((scores["test"] >= best_threshold(scores["train"], y_train)) == y_test))
    started = time.perf_counter()
    model = finetune(
        write_pairs(folder / "nsp-train.tsv", train),
        task="pair",
        output_dir=folder / "nsp",
        num_train_epochs=epochs,
        lr=LR,
        max_length=128,
        progress=False,
        dev_share=0.1,
    )  # best epoch: 10% of train
    results["cross-encoder (bertkit finetune --task pair)"] = float(
        np.mean(model.predict([(a, b) for a, b, _ in test]).astype(int) == y_test)
    )
    results["train_seconds"] = round(time.perf_counter() - started, 1)
    results["history"] = model.record_["training"]["history"]
    return results


def rerank_sets(docs: list[dict]) -> tuple[list[str], list[str], list[list[int]], list[set[int]]]:
    """(queries, sentences, candidates per query, relevant sentence indices per query) for one split."""
    sentences = [s for doc in docs for s in doc["body"]]
    owner = [d for d, doc in enumerate(docs) for _ in doc["body"]]
    lexical = Lexical(sentences)
    queries, candidates, relevant = [], [], []
    for d, doc in enumerate(docs):
        if len(doc["body"]) < MIN_BODY:
            continue
        queries.append(doc["headline"])
        candidates.append(lexical.top(doc["headline"], CANDIDATES))
        relevant.append({i for i, o in enumerate(owner) if o == d})
    return queries, sentences, candidates, relevant


def reranker_training_pairs(docs: list[dict], seed: int, pool: int) -> list[tuple[str, str, float]]:
    """Training pairs drawn as the test's are: each headline's top `pool` BM25 body sentences of its own split,
    1.0 for its own document's and 0.0 for the others' (what the first stage hands a reranker)."""
    rng = random.Random(seed)
    queries, sentences, candidates, relevant = rerank_sets(docs)
    pairs = [
        (query, sentences[i], 1.0 if i in rel else 0.0)
        for query, pool_rows, rel in zip(queries, candidates, relevant)
        for i in pool_rows[:pool]
    ]
    rng.shuffle(pairs)
    return pairs


def ndcg_mrr(order: list[int], relevant: set[int], k: int = 10) -> tuple[float, float]:
    gains = [1.0 if i in relevant else 0.0 for i in order[:k]]
    dcg = sum(g / np.log2(r + 2) for r, g in enumerate(gains))
    ideal = sum(1.0 / np.log2(r + 2) for r in range(min(k, len(relevant))))
    first = next((r for r, g in enumerate(gains) if g), None)
    return (dcg / ideal if ideal else 0.0), (1.0 / (first + 1) if first is not None else 0.0)


def reranking(train_docs, dev_docs, folder: Path, epochs: int, encoder) -> tuple[dict, object, list]:
    """Each method's nDCG@10 and MRR@10 over the dev headlines' candidates; the trained reranker; all pairs."""
    from bertkit.tasks.finetune import finetune

    queries, sentences, candidates, relevant = rerank_sets(dev_docs)
    vectors = encoder.embed(sentences, batch_size=64, progress=False, warn=False)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query_vectors = encoder.embed(queries, batch_size=64, progress=False, warn=False)
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    train = reranker_training_pairs(train_docs[:-100], 0, TRAIN_POOL)
    held_out = reranker_training_pairs(train_docs[-100:], 1, TRAIN_POOL)  # best-epoch choice: never the test queries
    started = time.perf_counter()
    model = finetune(
        write_pairs(folder / "rr-train.tsv", train),
        write_pairs(folder / "rr-dev.tsv", held_out),
        task="pair",
        output_dir=folder / "rr",
        num_train_epochs=epochs,
        lr=LR,
        max_length=128,
        regression=True,
        progress=False,
    )
    train_seconds = time.perf_counter() - started
    orders = {"BM25": [], "bi-encoder cosine": [], "cross-encoder (bertkit finetune --task pair --regression)": []}
    all_pairs = []
    for q, query in enumerate(queries):
        pool = candidates[q]
        orders["BM25"].append(pool)
        cosine = vectors[pool] @ query_vectors[q]
        orders["bi-encoder cosine"].append([pool[i] for i in np.argsort(-cosine, kind="stable")])
        ranked = model.rank(query, [sentences[i] for i in pool])
        orders["cross-encoder (bertkit finetune --task pair --regression)"].append([pool[i] for i, _ in ranked])
        all_pairs += [(query, sentences[i]) for i in pool]
    results = {}
    for name, per_query in orders.items():
        scores = [ndcg_mrr(order, rel) for order, rel in zip(per_query, relevant)]
        results[name] = {
            "ndcg@10": float(np.mean([s[0] for s in scores])),
            "mrr@10": float(np.mean([s[1] for s in scores])),
        }
    results.update(
        queries=len(queries),
        train_pairs=len(train),
        train_seconds=round(train_seconds, 1),
        history=model.record_["training"]["history"],
    )
    return results, model, all_pairs


def throughput(model, run: Path, pairs: list, repeats: int = 3) -> dict:
    from sentence_transformers import CrossEncoder

    cross = CrossEncoder(str(run), device="cpu", max_length=model.max_length)
    ways = {
        "bertkit FineTunedClassifier.scores": lambda: model.scores(pairs),
        "sentence-transformers CrossEncoder.predict (batch 64)": lambda: cross.predict(pairs, batch_size=64),
    }
    for way in ways.values():  # warm-up, not timed
        way()
    rates = {name: [] for name in ways}
    for _ in range(repeats):
        for name, way in ways.items():
            started = time.perf_counter()
            way()
            rates[name].append(len(pairs) / (time.perf_counter() - started))
    return {name: {"pairs_per_second": statistics.median(r), "range": [min(r), max(r)]} for name, r in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--epochs", type=int, default=3, help="next-sentence fine-tuning epochs")
    parser.add_argument("--rerank-epochs", type=int, default=4, help="reranker fine-tuning epochs")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    if not (options.data / "train.txt").is_file():
        sys.exit(f"{options.data / 'train.txt'} is missing: give --data or set BERTKIT_DATA.")
    from bertkit import Encoder
    from bertkit.encoder.devices import machine_facts

    train_docs, dev_docs = documents(options.data / "train.txt"), documents(options.data / "dev.txt")
    encoder = Encoder.from_pretrained()
    with tempfile.TemporaryDirectory() as folder:
        nsp = next_sentence(train_docs, dev_docs, Path(folder), options.epochs, encoder)
        rerank, model, pairs = reranking(train_docs, dev_docs, Path(folder), options.rerank_epochs, encoder)
        speed = throughput(model, Path(folder) / "rr", pairs)
    facts = machine_facts()
    print(
        f"\nCoNLL-2003 pair tasks; packaged model; {facts['cpu']} ({facts['cpu features']}); torch threads "
        f"{facts['torch threads']}"
    )
    print("\n1. next sentence (test: 1,000 pairs from dev.txt), accuracy")
    for name in ("BM25", "bi-encoder cosine", "cross-encoder (bertkit finetune --task pair)"):
        print(f"   {name:<58} {nsp[name]:.4f}")
    print(f"\n2. reranking ({rerank['queries']} dev headlines, top {CANDIDATES} BM25 candidates each)")
    print(f"   {'method':<58} {'nDCG@10':>8} {'MRR@10':>8}")
    for name, value in rerank.items():
        if isinstance(value, dict):
            print(f"   {name:<58} {value['ndcg@10']:8.4f} {value['mrr@10']:8.4f}")
    print(f"\n3. rerank throughput ({len(pairs)} (headline, candidate) pairs, median of 3)")
    base = speed["sentence-transformers CrossEncoder.predict (batch 64)"]["pairs_per_second"]
    for name, value in speed.items():
        print(f"   {name:<58} {value['pairs_per_second']:8.1f} pairs/s  ×{value['pairs_per_second'] / base:.2f}")
    if options.json:
        options.json.write_text(
            json.dumps({"next_sentence": nsp, "reranking": rerank, "throughput": speed, "machine": facts}, indent=2)
        )


if __name__ == "__main__":
    main()
