"""Approximate search at scale: bertkit's index (HNSW, faiss) beside sentence-transformers' `semantic_search_faiss`
and `semantic_search_usearch` and usearch itself, on the same vectors, in one run.

    python benchmarks/index.py [--size 1000000] [--data ../shared/data/sst2] [--ways bertkit,usearch,st] [--json F]

Corpus: synthetic, said plainly. The 6,920 SST-2 training sentences are embedded once (packaged model, mean of the
last layer, unit length) and each of the --size vectors mixes two of them with a little noise, made unit length
again: v = normalize(a e_i + (1 - a) e_j + 0.02 g), a ~ U(0.5, 1), g ~ N(0, I). Embedding a million real sentences
on a 2-core CPU would take about two hours. Queries: the 872 dev sentences. Truth: exact float32 cosine search
(`bertkit.semantic_search`) over all --size vectors.

Per way: build seconds; memory, the resident set the index adds while it is held (MB); queries/s for all queries at
once, top 10; recall@10 against the truth. Ways:
- bertkit: `VectorIndex` float32, int8 (ranges from the corpus) and binary, HNSW m=32, efConstruction 100,
  efSearch 64 (float32 also 256); int8 and binary rescored with the float query (rescore_multiplier 4; binary
  also without).
- usearch: usearch's HNSW at bertkit's settings (connectivity 32, expansion 100 / 64), float32 (ip), int8 (the same
  buckets, cos) and binary (hamming), no rescoring: the engine comparison behind bertkit's choice of faiss.
- st: sentence-transformers' `semantic_search_faiss` (float32, ubinary) and `semantic_search_usearch` (float32,
  int8, binary), exact=False, their own index settings and rescoring (multiplier 2).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "sst2"


def resident_mb() -> float:
    """This process's resident set (Linux /proc; NaN elsewhere)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return float("nan")


def synthetic(sentences: np.ndarray, size: int, seed: int = 0, chunk: int = 100_000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    corpus = np.empty((size, sentences.shape[1]), dtype=np.float32)
    for start in range(0, size, chunk):
        n = min(chunk, size - start)
        mix = rng.uniform(0.5, 1.0, (n, 1)).astype(np.float32)
        rows = (
            mix * sentences[rng.integers(0, len(sentences), n)]
            + (1 - mix) * sentences[rng.integers(0, len(sentences), n)]
        )
        rows += rng.normal(0, 0.02, rows.shape).astype(np.float32)
        corpus[start : start + n] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return corpus


class Recorder:
    def __init__(self, truth: list[set], queries: int) -> None:
        self.truth, self.queries, self.rows = truth, queries, []

    def add(self, way: str, build_s: float, memory_mb: float, search_s: float, ids) -> None:
        found = [set(int(i) for i in row if i >= 0) for row in ids]
        recall = float(np.mean([len(t & f) / len(t) for t, f in zip(self.truth, found)]))
        row = {"way": way, "build s": build_s, "memory MB": memory_mb, "queries/s": self.queries / search_s}
        self.rows.append({**row, "recall@10": recall})
        print(f"{way:<58} {build_s:>8.1f} {memory_mb:>9.0f} {row['queries/s']:>9.0f} {recall:>9.3f}", flush=True)


def ids_of(results) -> list[list[int]]:
    return [[hit["corpus_id"] for hit in hits] for hits in results]


def bertkit_ways(record: Recorder, corpus, queries, ranges) -> None:
    from bertkit.encoder.compact import compact
    from bertkit.tasks.index import VectorIndex

    for output in ("float32", "int8", "binary"):
        gc.collect()
        before, started = resident_mb(), time.perf_counter()
        meta = {"dim": corpus.shape[1], "output": output, "ranges": ranges.tolist()}
        index = VectorIndex.create(meta)
        index.add(compact(corpus, output, ranges if output == "int8" else None), np.arange(len(corpus)))
        build, memory = time.perf_counter() - started, resident_mb() - before
        settings = {"float32": [(None, 64), (None, 256)], "int8": [(None, 64)], "binary": [(0, 64), (4, 64)]}
        for multiplier, breadth in settings[output]:
            started = time.perf_counter()
            _, rows = index.search_arrays(queries, 10, rescore_multiplier=multiplier, ef_search=breadth)
            label = ("" if multiplier is None else f", rescore_multiplier {multiplier}") + f", efSearch {breadth}"
            record.add(f"bertkit index {output}{label}", build, memory, time.perf_counter() - started, rows)
        with tempfile.TemporaryDirectory() as folder:
            size = index.save(Path(folder) / "corpus.index").stat().st_size / 2**20
        print(f"{'':<58} (file {size:.0f} MB)")
        del index


def usearch_ways(record: Recorder, corpus, queries, ranges) -> None:
    from usearch.index import Index

    from bertkit.encoder.compact import compact

    for output, metric, dtype in (("float32", "ip", "f32"), ("int8", "cos", "i8"), ("binary", "hamming", "b1")):
        gc.collect()
        stored = compact(corpus, "ubinary" if output == "binary" else output, ranges if output == "int8" else None)
        asked = compact(queries, "ubinary" if output == "binary" else output, ranges if output == "int8" else None)
        ndim = corpus.shape[1]
        before, started = resident_mb(), time.perf_counter()
        index = Index(ndim=ndim, metric=metric, dtype=dtype, connectivity=32, expansion_add=100, expansion_search=64)
        index.add(np.arange(len(corpus)), stored)
        build, memory = time.perf_counter() - started, resident_mb() - before
        started = time.perf_counter()
        matches = index.search(asked, 10)
        record.add(
            f"usearch {output} (bertkit's settings, no rescoring)",
            build,
            memory,
            time.perf_counter() - started,
            matches.keys,
        )
        del index


def st_ways(record: Recorder, corpus, queries, ranges) -> None:
    from sentence_transformers.util import quantization

    cases = [("faiss", "float32"), ("faiss", "ubinary"), ("usearch", "float32"), ("usearch", "int8")]
    for library, precision in cases + [("usearch", "binary")]:
        gc.collect()
        stored = (
            corpus if precision == "float32" else quantization.quantize_embeddings(corpus, precision, ranges=ranges)
        )
        function = getattr(quantization, f"semantic_search_{library}")
        before, started = resident_mb(), time.perf_counter()
        results, search, index = function(
            queries,
            corpus_embeddings=stored,
            corpus_precision=precision,
            top_k=10,
            ranges=ranges if precision == "int8" else None,
            rescore=precision != "float32",
            exact=False,
            output_index=True,
        )
        total, memory = time.perf_counter() - started, resident_mb() - before
        record.add(
            f"sentence-transformers semantic_search_{library} {precision}",
            total - search,
            memory,
            search,
            ids_of(results),
        )
        del index, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--ways", default="bertkit,usearch,st", help="Which to measure: bertkit, usearch, st.")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    if not (options.data / "train.tsv").is_file():
        sys.exit(f"{options.data / 'train.tsv'} is missing: give --data or set BERTKIT_DATA.")
    from bertkit import Encoder, semantic_search
    from bertkit.encoder.compact import int8_ranges
    from bertkit.encoder.devices import machine_facts
    from bertkit.io.readers import read_labelled

    encoder = Encoder.from_pretrained()
    embed = lambda texts: encoder.embed(texts, normalize_embeddings=True, batch_size=64, progress=False, warn=False)
    sentences = embed(read_labelled(options.data / "train.tsv").texts)
    queries = embed(read_labelled(options.data / "dev.tsv").texts)
    corpus = synthetic(sentences, options.size)
    ranges = int8_ranges(corpus[:100_000])
    facts = machine_facts()
    print(
        f"{len(corpus):,} synthetic vectors (mixes of two SST-2 training sentences' vectors, see the docstring), "
        f"{len(queries)} SST-2 dev queries; {facts['cpu']} ({facts['cpu features']})"
    )
    started = time.perf_counter()
    exact = semantic_search(queries, corpus, top_k=10)
    exact_s = time.perf_counter() - started
    record = Recorder([set(row) for row in ids_of(exact)], len(queries))
    print(f"{'way':<58} {'build s':>8} {'memory MB':>9} {'queries/s':>9} {'recall@10':>9}")
    record.add("bertkit exact search float32 (the truth)", 0.0, 0.0, exact_s, ids_of(exact))
    ways = {"bertkit": bertkit_ways, "usearch": usearch_ways, "st": st_ways}
    for name in options.ways.split(","):
        ways[name.strip()](record, corpus, queries, ranges)
    print("\n| way | build s | memory MB | queries/s | recall@10 |\n|---|---|---|---|---|")
    for row in record.rows:
        print(
            f"| {row['way']} | {row['build s']:.1f} | {row['memory MB']:.0f} | {row['queries/s']:.0f} | "
            f"{row['recall@10']:.3f} |"
        )
    if options.json:
        payload = {"size": len(corpus), "queries": len(queries), "rows": record.rows, "machine": facts}
        options.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
