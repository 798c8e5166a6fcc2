"""Compact vectors for retrieval: memory and recall@10 of each output type against float32 exact search, on SST-2.

    python benchmarks/retrieval.py [--data ../shared/data/sst2] [--json retrieval.json]

Corpus: the 6,920 SST-2 training sentences; queries: the 872 dev sentences. Vectors: the packaged model, mean of the
last layer, unit length (as sentence-transformers gives them). The reference is float32 exact cosine search
(`bertkit.semantic_search`); each compact type (`bertkit embed --output-type`) is searched as bertkit searches it:
float16 and int8/uint8 by cosine on their values (int8 ranges from bertkit's calibration sentences), binary by
Hamming distance and then rescored with the float query (top 40 candidates for 10 results), and binary without
rescoring. recall@10: the share of float32's top 10 found in the type's top 10, over all queries. Also: bytes per
vector and search time for all queries (median of 3).
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


def timed(work, repeats: int = 3):
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - started)
    return result, statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    if not (options.data / "train.tsv").is_file():
        sys.exit(f"{options.data / 'train.tsv'} is missing: give --data or set BERTKIT_DATA.")
    from bertkit import Encoder
    from bertkit.encoder.compact import compact
    from bertkit.encoder.devices import machine_facts
    from bertkit.io.readers import read_labelled
    from bertkit.tasks.search import semantic_search

    corpus_texts = read_labelled(options.data / "train.tsv").texts
    query_texts = read_labelled(options.data / "dev.tsv").texts
    encoder = Encoder.from_pretrained()
    corpus = encoder.embed(corpus_texts, normalize_embeddings=True, batch_size=64, progress=False, warn=False)
    queries = encoder.embed(query_texts, normalize_embeddings=True, batch_size=64, progress=False, warn=False)
    reference, reference_seconds = timed(lambda: semantic_search(queries, corpus, top_k=10))
    truth = [{h["corpus_id"] for h in hits} for hits in reference]
    ranges = encoder.calibration_ranges(layers="last", pooling="mean", normalize_embeddings=True)
    rows = [{"type": "float32", "bytes": corpus[0].nbytes, "recall@10": 1.0, "seconds": reference_seconds}]
    for output, multiplier in (("float16", 1), ("int8", 1), ("uint8", 1), ("binary", 4), ("binary", 1)):
        stored = compact(corpus, output, ranges if output in ("int8", "uint8") else None)
        asked = queries
        if output in ("int8", "uint8"):
            asked = compact(queries, output, ranges).astype(np.float32) - (128 if output == "uint8" else 0)
        found, seconds = timed(
            lambda s=stored, q=asked, m=multiplier: semantic_search(q, s, top_k=10, rescore_multiplier=m)
        )
        recall = float(np.mean([len(t & {h["corpus_id"] for h in hits}) / 10 for t, hits in zip(truth, found)]))
        name = output + ("" if output != "binary" else (" + float rescoring" if multiplier > 1 else ", no rescoring"))
        rows.append({"type": name, "bytes": stored[0].nbytes, "recall@10": recall, "seconds": seconds})
    facts = machine_facts()
    print(
        f"SST-2: {len(corpus)} training sentences searched by {len(queries)} dev sentences; packaged model, "
        f"last layer mean, unit length; {facts['cpu']} ({facts['cpu features']})"
    )
    print(f"{'output type':<32} {'bytes/vector':>12} {'× smaller':>9} {'recall@10':>9} {'search s':>9}")
    for row in rows:
        print(
            f"{row['type']:<32} {row['bytes']:>12} {rows[0]['bytes'] / row['bytes']:>9.1f} {row['recall@10']:>9.4f} "
            f"{row['seconds']:>9.2f}"
        )
    if options.json:
        options.json.write_text(json.dumps({"rows": rows, "machine": facts}, indent=2))


if __name__ == "__main__":
    main()
