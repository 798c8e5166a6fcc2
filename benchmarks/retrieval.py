"""Compact vectors for retrieval: bytes, recall@10 and search time of each output type, rescoring and int8 ranges.

    python benchmarks/retrieval.py [--data ../shared/data/sst2] [--queries 872] [--repeats 3] [--json retrieval.json]

Corpus: the 6,920 SST-2 training sentences; queries: the 872 dev sentences (or the first --queries). Vectors: the
packaged model, mean of the last layer, unit length. The reference is float32 exact cosine search
(`bertkit.semantic_search`); recall@10 is the share of its top 10 that each way finds in its own top 10, over all
queries; search time is for all queries at once, median of --repeats, results as lists of dicts included.

One table per type. int8: ranges from bertkit's packaged calibration sentences (`bertkit embed --output-type int8`)
or from the corpus itself (`--calibration corpus.txt`), each with no rescoring (0) and with the best
top_k * rescore_multiplier candidates rescored by the float query against their dequantized vectors. binary: Hamming
distance by popcount (faiss's kernel where faiss is installed, numpy's otherwise), with and without rescoring.
Beside them, sentence-transformers on the same vectors: `util.semantic_search` (float32) and
`semantic_search_faiss` / `semantic_search_usearch` (exact, rescoring on) where faiss / usearch are installed.
The retention that sentence-transformers publishes (NDCG@10 on MTEB retrieval, 1024-dim models, not recall@10
against exact search) is printed as the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "sst2"
MULTIPLIERS = (0, 1, 2, 4, 10)
PUBLISHED = (
    "sentence-transformers' published retention (huggingface.co/blog/embedding-quantization; NDCG@10 on MTEB "
    "retrieval, 1024-dim models): binary ~92.5% without rescoring, ~96% with it; int8 ~97% without, ~99% with."
)


def timed(work, repeats: int):
    """(result, median seconds of `repeats` calls), after one call that warms caches and thread pools."""
    times, result = [], work()
    for _ in range(repeats):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return result, statistics.median(times)


def recall(truth: list[set], found) -> float:
    return float(np.mean([len(t & {h["corpus_id"] for h in hits}) / len(t) for t, hits in zip(truth, found)]))


def measure(rows: list, table: str, way: str, nbytes: int, work, truth, repeats: int) -> dict:
    found, seconds = timed(work, repeats)
    row = {"table": table, "way": way, "bytes": int(nbytes), "recall@10": recall(truth, found), "seconds": seconds}
    rows.append(row)
    print(f"  {table:<7} {way:<64} {row['bytes']:>6} {row['recall@10']:>9.3f} {seconds:>8.3f}", flush=True)
    return row


def bertkit_rows(rows, corpus, queries, packaged, truth, repeats) -> None:
    import bertkit.tasks.engine as engine
    import bertkit.tasks.search as search
    from bertkit.encoder.compact import compact, int8_ranges

    dim = corpus.shape[1]
    measure(rows, "float", "float32", dim * 4, lambda: search.semantic_search(queries, corpus, 10), truth, repeats)
    half = corpus.astype(np.float16)
    measure(rows, "float", "float16", dim * 2, lambda: search.semantic_search(queries, half, 10), truth, repeats)
    for name, ranges in (("packaged calibration ranges", packaged), ("corpus ranges", int8_ranges(corpus))):
        stored = compact(corpus, "int8", ranges)
        for m in MULTIPLIERS:
            work = lambda s=stored, r=ranges, m=m: search.semantic_search(
                queries, s, 10, ranges=r, rescore_multiplier=m
            )
            measure(rows, "int8", f"{name}, rescore_multiplier {m}", dim, work, truth, repeats)
    uint8 = compact(corpus, "uint8", packaged)
    work = lambda: search.semantic_search(queries, uint8, 10, ranges=packaged)
    measure(rows, "int8", "uint8, packaged calibration ranges, default rescoring", dim, work, truth, repeats)
    bits = compact(corpus, "binary")
    kernels = ["faiss", "numpy"] if engine.require_faiss(optional=True) is not None else ["numpy"]
    for kernel in kernels:
        original = engine.require_faiss
        if kernel == "numpy":
            engine.require_faiss = lambda optional=False: None
        try:
            for m in MULTIPLIERS:
                work = lambda m=m: search.semantic_search(queries, bits, 10, rescore_multiplier=m)
                measure(
                    rows, "binary", f"{kernel} popcount, rescore_multiplier {m}", bits.shape[1], work, truth, repeats
                )
        finally:
            engine.require_faiss = original


def peer_rows(rows, corpus, queries, packaged, truth, repeats) -> None:
    """sentence-transformers on the same vectors (its exact searches; rescoring on, its default multiplier 2)."""
    import torch
    from sentence_transformers import util
    from sentence_transformers.util import quantization, quantize_embeddings

    dim = corpus.shape[1]
    tensors = torch.from_numpy(queries), torch.from_numpy(corpus)
    work = lambda: util.semantic_search(*tensors, top_k=10)
    measure(rows, "float", "sentence-transformers util.semantic_search", dim * 4, work, truth, repeats)
    packed = quantize_embeddings(corpus, "ubinary")
    int8 = quantize_embeddings(corpus, "int8", ranges=packaged)
    for library, function, precision, stored, table in (
        ("faiss", "semantic_search_faiss", "ubinary", packed, "binary"),
        ("usearch", "semantic_search_usearch", "ubinary", packed, "binary"),
        ("usearch", "semantic_search_usearch", "int8", int8, "int8"),
    ):
        try:
            __import__(library)
        except ImportError:
            print(f"  ({function} skipped: {library} is not installed)")
            continue
        search = getattr(quantization, function)
        work = lambda s=search, c=stored, p=precision: s(
            queries,
            corpus_embeddings=c,
            corpus_precision=p,
            top_k=10,
            ranges=packaged if p == "int8" else None,
            exact=True,
        )[0]
        measure(
            rows, table, f"sentence-transformers {function} ({precision}, exact)", stored.shape[1], work, truth, repeats
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--queries", type=int, default=None, help="Only the first N dev sentences (a quick run).")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-peers", action="store_true", help="Leave sentence-transformers out.")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    if not (options.data / "train.tsv").is_file():
        sys.exit(f"{options.data / 'train.tsv'} is missing: give --data or set BERTKIT_DATA.")
    from bertkit import Encoder, semantic_search
    from bertkit.encoder.devices import machine_facts
    from bertkit.encoder.encode import calibration_ranges
    from bertkit.io.readers import read_labelled

    encoder = Encoder.from_pretrained()
    embed = lambda texts: encoder.embed(texts, normalize_embeddings=True, batch_size=64, progress=False, warn=False)
    corpus = embed(read_labelled(options.data / "train.tsv").texts)
    queries = embed(read_labelled(options.data / "dev.tsv").texts[: options.queries])
    packaged = calibration_ranges(encoder, layers="last", pooling="mean", normalize_embeddings=True)
    truth = [{h["corpus_id"] for h in hits} for hits in semantic_search(queries, corpus, top_k=10)]
    facts = machine_facts()
    print(
        f"SST-2: {len(corpus)} training sentences searched by {len(queries)} dev sentences; packaged model, last layer "
        f"mean, unit length; {facts['cpu']} ({facts['cpu features']}); median of {options.repeats}"
    )
    print(f"  {'table':<7} {'way':<64} {'bytes':>6} {'recall@10':>9} {'search s':>8}")
    rows: list[dict] = []
    bertkit_rows(rows, corpus, queries, packaged, truth, options.repeats)
    if not options.no_peers:
        peer_rows(rows, corpus, queries, packaged, truth, options.repeats)
    float32 = rows[0]["seconds"]
    for table in ("float", "int8", "binary"):
        print(f"\n{table}\n\n| way | bytes/vector | × smaller | recall@10 | search s | × float32 speed |")
        print("|---|---|---|---|---|---|")
        for row in (r for r in rows if r["table"] == table):
            print(
                f"| {row['way']} | {row['bytes']} | {rows[0]['bytes'] / row['bytes']:.0f} | {row['recall@10']:.3f} | "
                f"{row['seconds']:.3f} | {float32 / row['seconds']:.1f} |"
            )
    print(f"\n{PUBLISHED}")
    if options.json:
        options.json.write_text(json.dumps({"rows": rows, "machine": facts, "published": PUBLISHED}, indent=2))


if __name__ == "__main__":
    main()
