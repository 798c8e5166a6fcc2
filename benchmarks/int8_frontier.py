"""int8 frontier: speed against cosine-to-fp32 for each int8 candidate, beside bertkit fp32/bf16 and
sentence-transformers, in one run on the same sentences (first 2000 SST-2 train sentences, mean of the last layer,
length-sorted batches of 64, the threads torch has).

    python benchmarks/int8_frontier.py [--data ../shared/data/sst2] [--limit 2000] [--repeats 3] [--threads 2]
    python benchmarks/int8_frontier.py --accuracy [--train 10000]   # features + LR: SST-2 dev, fp32 vs int8

Candidates: torch `quantize_dynamic` (per-tensor activations), torchao int8 dynamic-activation/int8-weight
(per-token activations), ONNX Runtime `quantize_dynamic` (per-channel weights, per-tensor activations) and
`MatMulNBits` with 8-bit weights in blocks of 128 and of 32 (int8 activations per block; the shipped one is 32).
ONNX files go to a temporary directory; nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

from bertkit import Encoder, TextClassifier
from bertkit.encoder.int8 import Int8Model, export_onnx, quantize_onnx
from bertkit.io.readers import read_labelled
from bertkit.tasks.bench import Row, _print_table, _time, run_benchmark
from bertkit.tasks.vectorizer import BertVectorizer


def torch_variant(encoder: Encoder, quantize) -> Encoder:
    """An fp32 Encoder whose model is a quantised copy (torch / torchao modules keep the transformers interface)."""
    model = quantize(copy.deepcopy(encoder.model))
    return Encoder(dataclasses.replace(encoder.loaded, model=model), concurrent_batches=encoder.concurrent_batches)


def onnx_variant(encoder: Encoder, path: Path) -> Encoder:
    """An int8 Encoder whose ONNX Runtime session runs `path` instead of the shipped file."""
    variant = Encoder(encoder.loaded, precision="int8", concurrent_batches=encoder.concurrent_batches)
    threads = variant._int8.session.get_session_options().intra_op_num_threads
    variant._int8 = Int8Model(path, variant._accepts_type_ids, variant.has_pooler, threads)
    return variant


def candidates(encoder: Encoder, scratch: Path) -> dict:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    def torch_dynamic(model):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in torch, still the classic way
            return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)

    def torchao(model):
        quantize_(model, Int8DynamicActivationInt8WeightConfig())
        return model

    fp32 = scratch / "fp32.onnx"
    export_onnx(encoder.model, encoder.tokenizer, fp32, encoder._accepts_type_ids, encoder.has_pooler)
    per_channel = scratch / "dynamic.onnx"
    quantize_dynamic(str(fp32), str(per_channel), per_channel=True, weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"])
    block128 = scratch / "nbits128.onnx"
    quantize_onnx(fp32, block128, block_size=128)
    return {
        "torch quantize_dynamic (per-tensor act., all Linear)": lambda: torch_variant(encoder, torch_dynamic),
        "torchao int8 dyn act./int8 weight (per-token act.)": lambda: torch_variant(encoder, torchao),
        "ORT quantize_dynamic per-channel (per-tensor act.)": lambda: onnx_variant(encoder, per_channel),
        "ORT MatMulNBits 8-bit, block 128": lambda: onnx_variant(encoder, block128),
    }


def frontier(args) -> None:
    texts = read_labelled(args.data / "train.tsv").texts[: args.limit]
    encoder = Encoder.from_pretrained(args.model, threads=args.threads)
    Encoder(encoder.loaded, precision="int8")  # build the cached int8 file before any timing
    rows = run_benchmark(encoder, texts, repeats=args.repeats, batch_size=64, precisions="fp32,bf16,int8")
    with tempfile.TemporaryDirectory() as scratch:
        for name, make in candidates(encoder, Path(scratch)).items():
            variant = make()
            row = Row(name)
            _time(lambda variant=variant: variant.embed(texts, batch_size=64, progress=False, warn=False), args.repeats, row)
            rows.append(row)
    n_tokens = sum(len(ids) for ids in encoder.tokenizer(texts)["input_ids"])
    reference = next(r for r in rows if r.name.startswith("bertkit fp32")).vectors
    print(f"\nthe frontier (same run, {len(texts)} texts, {n_tokens} tokens):")
    _print_table(rows, len(texts), float("inf"), reference, print)


def accuracy(args) -> None:
    """Features + LogisticRegression (C by CV) on the first --train SST-2 train sentences, scored on dev."""
    train, dev = read_labelled(args.data / "train.tsv"), read_labelled(args.data / "dev.tsv")
    x_texts, y = train.texts[: args.train], train.labels[: args.train]
    for precision in ("fp32", "int8"):
        vectorizer = BertVectorizer(args.model, precision=precision, threads=args.threads, cache=None)
        model = TextClassifier(vectorizer).fit(x_texts, y)
        score = np.mean(model.predict(dev.texts) == np.array(dev.labels))
        print(f"{precision}: SST-2 dev accuracy {score * 100:.2f} (LR on mean of last layer, {len(x_texts)} train)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2")
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--train", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--accuracy", action="store_true")
    args = parser.parse_args()
    accuracy(args) if args.accuracy else frontier(args)


if __name__ == "__main__":
    main()
