"""Embedding throughput on SST-2 train: tutorial loop vs sentence-transformers vs bertkit fp32 (and bf16 where the
CPU has native bf16), one run, same sentences, same model. Also prints the thread-count comparison.

    python benchmarks/throughput.py [--data ../shared/data/sst2/train.tsv] [--limit N] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from bench import run_benchmark

from bertkit import Encoder
from bertkit.encoder.defaults import DEFAULT_BATCH_SIZE
from bertkit.io.readers import read_labelled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "train.tsv"
    )
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    texts = read_labelled(args.data).texts
    texts = texts[: args.limit] if args.limit else texts
    encoder = Encoder.from_pretrained(args.model)
    run_benchmark(encoder, texts, repeats=args.repeats, batch_size=args.batch_size)

    print("\nthreads (bertkit fp32, first 1500 texts):")
    default = torch.get_num_threads()
    for threads, concurrent in ((1, 1), (default, 1), (default, default)):
        torch.set_num_threads(threads)
        variant = encoder.with_options(concurrent_batches=concurrent)
        speeds = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            variant.embed(texts[:1500], batch_size=args.batch_size, progress=False, warn=False)
            speeds.append(1500 / (time.perf_counter() - started))
        print(
            f"  {threads} torch thread(s), {concurrent} batch(es) at a time: "
            f"{statistics.median(speeds):.0f} sentences/s (median of {args.repeats})"
        )
    torch.set_num_threads(default)


if __name__ == "__main__":
    main()
