"""int8 frontier: speed against cosine-to-fp32 for each int8 candidate, beside bertkit fp32/bf16 and
sentence-transformers, in one run on the same sentences (SST-2 train, mean of the last layer, length-sorted batches
of 64, the threads torch has).

    python benchmarks/int8_frontier.py [--limit 2000] [--repeats 3] [--threads 2]      # the frontier table
    python benchmarks/int8_frontier.py --fidelity-only --limit 0                         # cosines on all of SST-2 train
    python benchmarks/int8_frontier.py --accuracy [--finetuned runs/sst2-ft]             # SST-2 dev: fp32 vs int8

Candidates, from coarse to fine activation scales:
- torch `quantize_dynamic` (int8 weights, one activation scale per tensor);
- ONNX Runtime `quantize_dynamic` (per-channel weights, per-tensor activations);
- ONNX Runtime `MatMulNBits` (8-bit weights in blocks of 32, activations quantised per block of 32; shipped before);
- bertkit per-token asymmetric activations without smoothing, and with SmoothQuant smoothing (shipped: `int8`).
The ONNX candidates need `pip install 'bertkit[bench]'`; files go to a temporary directory.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from bench import Row, _print_table, _time, cosines, run_benchmark

from bertkit import Encoder, TextClassifier, set_threads
from bertkit.encoder.int8 import Calibration, calibration_for, quantize_model
from bertkit.io.readers import read_labelled
from bertkit.tasks.load import load_run
from bertkit.tasks.vectorizer import BertVectorizer


def with_model(encoder: Encoder, model) -> Encoder:
    """An fp32-path Encoder whose forward runs `model` (a quantised copy keeping the transformers interface)."""
    return Encoder(dataclasses.replace(encoder._loaded, model=model), concurrent_batches=encoder.runner().concurrent)


class OnnxModel:
    """An ONNX Runtime session that answers like a transformers model (hidden_states, last_hidden_state, pooler)."""

    def __init__(self, path: Path, encoder: Encoder, threads: int):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.names = ["input_ids", "attention_mask"] + (["token_type_ids"] if encoder.network.takes_type_ids else [])
        self.with_pooler, self.config = encoder.info()["pooler"], encoder.model.config

    def forward(self, input_ids, attention_mask, token_type_ids=None, **_):
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        outputs = [torch.from_numpy(a) for a in self.session.run(None, {n: given[n].numpy() for n in self.names})]
        pooler = outputs.pop() if self.with_pooler else None
        return SimpleNamespace(hidden_states=tuple(outputs), last_hidden_state=outputs[-1], pooler_output=pooler)

    __call__ = forward


class _Outputs(torch.nn.Module):
    def __init__(self, model, with_pooler: bool):
        super().__init__()
        self.model, self.with_pooler = model, with_pooler

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            output_hidden_states=True,
            return_dict=True,
        )
        return tuple(out.hidden_states) + ((out.pooler_output,) if self.with_pooler else ())


def export_onnx(encoder: Encoder, path: Path) -> None:
    sample = encoder.tokenizer(
        ["a short one", "and a somewhat longer second sentence"], padding=True, return_tensors="pt"
    )
    names = ["input_ids", "attention_mask", "token_type_ids"]
    layers = encoder.num_layers + 1
    outputs = [f"hidden_{i}" for i in range(layers)] + (["pooler_output"] if encoder.info()["pooler"] else [])
    axes = {n: {0: "batch", 1: "sequence"} for n in names + outputs[:layers]}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Outputs(encoder.model, encoder.info()["pooler"]).eval(),
            tuple(sample[n] for n in names),
            str(path),
            input_names=names,
            output_names=outputs,
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


def onnx_candidates(encoder: Encoder, scratch: Path) -> dict:
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer
    except ImportError:
        print("onnxruntime is not installed: the ONNX rows are skipped (pip install 'bertkit[bench]')")
        return {}
    fp32 = scratch / "fp32.onnx"
    export_onnx(encoder, fp32)
    dynamic, nbits = scratch / "dynamic.onnx", scratch / "nbits.onnx"
    quantize_dynamic(
        str(fp32), str(dynamic), per_channel=True, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"]
    )
    config = DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, accuracy_level=4, bits=8)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(nbits), False)
    threads = max(1, torch.get_num_threads() // encoder.runner().concurrent)
    return {
        "ORT quantize_dynamic per-channel (per-tensor act.)": lambda: with_model(
            encoder, OnnxModel(dynamic, encoder, threads)
        ),
        "ORT MatMulNBits 8-bit block 32 (shipped before)": lambda: with_model(
            encoder, OnnxModel(nbits, encoder, threads)
        ),
    }


def candidates(encoder: Encoder, scratch: Path) -> dict:
    def torch_dynamic():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in torch, still the classic way
            model = torch.ao.quantization.quantize_dynamic(
                copy.deepcopy(encoder.model), {torch.nn.Linear}, dtype=torch.qint8
            )
        return with_model(encoder, model)

    def per_token(alpha: float | None):
        """bertkit's int8 with a fixed smoothing strength (None: no smoothing) instead of the calibrated one."""
        calibration = calibration_for(encoder.model, encoder.tokenizer, encoder.max_length, None, encoder.fingerprint)
        if alpha is None:
            calibration = Calibration(calibration.groups, {}, calibration.texts)
        return with_model(encoder, quantize_model(encoder.model, calibration, alpha).eval())

    return {
        "torch quantize_dynamic (per-tensor act., every Linear)": torch_dynamic,
        **onnx_candidates(encoder, scratch),
        "bertkit per-token asym., no smoothing": lambda: per_token(None),
        "bertkit per-token, smoothing fixed at 0.5": lambda: per_token(0.5),
    }


def frontier(args) -> None:
    texts = read_labelled(args.data / "train.tsv").texts
    texts = texts[: args.limit] if args.limit else texts
    if args.threads:
        set_threads(args.threads)
    encoder = Encoder.from_pretrained(args.model)
    encoder.with_options(precision="int8")  # calibrate (and cache) before any timing
    if args.fidelity_only:
        reference = encoder.embed(texts, batch_size=64, warn=False)
        found = cosines(reference, encoder.with_options(precision="int8").embed(texts, batch_size=64, warn=False))
        print(
            f"int8 vs fp32 on {len(texts)} SST-2 train sentences: cosine min {found.min():.5f}, "
            f"1st pct {np.percentile(found, 1):.5f}, median {np.median(found):.5f}"
        )
        return
    rows = run_benchmark(encoder, texts, repeats=args.repeats, batch_size=64, precisions="fp32,bf16,int8")
    with tempfile.TemporaryDirectory() as scratch:
        for name, make in candidates(encoder, Path(scratch)).items():
            variant = make()
            row = Row(name)
            _time(
                lambda variant=variant: variant.embed(texts, batch_size=64, progress=False, warn=False),
                args.repeats,
                row,
            )
            rows.append(row)
    n_tokens = sum(len(ids) for ids in encoder.tokenizer(texts)["input_ids"])
    reference = next(r for r in rows if r.name.startswith("bertkit fp32")).vectors
    print(f"\nthe frontier (same run, {len(texts)} texts, {n_tokens} tokens):")
    _print_table(rows, len(texts), {}, reference, print)  # no peak measured: the bound column shows "-"


def accuracy(args) -> None:
    """SST-2 dev accuracy at fp32 and int8: `bertkit train`'s default features + LR on all of train, and a
    fine-tuned run."""
    train, dev = read_labelled(args.data / "train.tsv"), read_labelled(args.data / "dev.tsv")
    labels = np.array(dev.labels)
    for precision in ("fp32", "int8"):
        vectorizer = BertVectorizer(
            args.model, layers="all:concat", pooling="mean", cache=None, precision=precision
        )  # TextClassifier's default features, at this precision
        model = TextClassifier(vectorizer).fit(train.texts, train.labels)
        score = np.mean(model.predict(dev.texts) == labels)
        print(
            f"features + LR ({model.vectorizer_.layers}, {model.vectorizer_.pooling}, C={model.C_:g}) at {precision}: "
            f"SST-2 dev accuracy {score * 100:.2f}",
            flush=True,
        )
    if args.finetuned:
        for precision in ("fp32", "int8"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the int8 load warns that the run was evaluated at fp32
                run = load_run(args.finetuned, precision=precision)
            score = np.mean(np.asarray(run.predict(dev.texts)).astype(str) == labels.astype(str))
            print(f"fine-tuned {args.finetuned} at {precision}: SST-2 dev accuracy {score * 100:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2")
    parser.add_argument("--limit", type=int, default=2000, help="first N train sentences (0 = all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--fidelity-only", action="store_true")
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--finetuned", type=Path, help="a `bertkit finetune --task text` run on SST-2, for --accuracy")
    args = parser.parse_args()
    accuracy(args) if args.accuracy else frontier(args)


if __name__ == "__main__":
    main()
