"""Which engine should run bertkit's passes on a CPU? The candidates side by side (issue 47's first step).

    python benchmarks/cpu_engines.py [--data ../shared/data/sst2/train.tsv] [--limit 2000] [--repeats 3] [--json F]

Needs `pip install "optimum-intel[openvino]" onnxruntime` beside bertkit's test extra. One process, the packaged
model, the first --limit SST-2 train sentences, every way warmed up once, then --repeats rounds with the ways
interleaved (texts/s: the median; × sentence-transformers torch). Each way's vectors are compared with plain
`transformers` (max abs difference, fp32 ways) and with sentence-transformers torch (min cosine).

The ways:
- sentence-transformers at batch 32 and 128 with its torch backend and `backend="openvino"` with
  `INFERENCE_PRECISION_HINT: f32` and with its default hint (bf16 where the CPU has native bf16); its
  `backend="onnx"` needs optimum-onnx, which pins transformers 4 and so cannot sit beside optimum-intel 2.2;
- bertkit at fp32 and (native bf16 only) bf16 on each of its engines (`engine="torch"`, `engine="openvino"`);
- bertkit's tokenization, batch plan and pooling with ONNX Runtime (fp32, `torch.onnx.export` of the model) behind
  its one forward pass (a prototype here: the last hidden state only).
With --int8: bertkit's own int8; OpenVINO's post-training static int8 through sentence-transformers and behind
bertkit's plan; OpenVINO with int8 weights and int8 activations quantised per token as each pass runs (NNCF's weight
compression of bertkit's exported graph, the CPU plugin's dynamic quantisation); ONNX Runtime's dynamic int8.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bertkit import Encoder
from bertkit.encoder.encode import ForwardOutput
from bertkit.encoder.models import default_model_dir
from bertkit.io.readers import read_labelled

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "train.tsv"


def cpu() -> str:
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"Model name:\s*(.+)", text)
    flags = re.search(r"Flags:\s*(.+)", text)
    wanted = [f for f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16") if flags and f in flags.group(1)]
    return f"{model.group(1).strip() if model else 'unknown'} ({', '.join(wanted)}), {torch.get_num_threads()} threads"


def native_bf16() -> bool:
    return "avx512_bf16" in subprocess.run(["lscpu"], capture_output=True, text=True).stdout


def reference_vectors(folder: Path, texts: list[str]) -> np.ndarray:
    """Mean-pooled, normalised last hidden states from plain transformers (fp32), 32 texts a batch."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    rows = []
    with torch.inference_mode():
        for start in range(0, len(texts), 32):
            batch = tokenizer(
                texts[start : start + 32], padding=True, truncation=True, max_length=256, return_tensors="pt"
            )
            states = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            rows.append(torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=-1).numpy())
    return np.concatenate(rows)


def with_engine(encoder: Encoder, engine) -> Encoder:
    """`encoder` whose forward pass calls `engine(inputs) -> last hidden state` instead of torch."""

    def forward(inputs: dict[str, torch.Tensor]) -> ForwardOutput:
        states = engine(inputs)
        return ForwardOutput(
            last_hidden_state=states, pooler_output=None, hidden_states=(states,) * (encoder.num_layers + 1)
        )

    encoder.network.forward_inputs = forward  # the runner takes the bound method when it is built, per call
    return encoder


def optimum_engine(model) -> callable:
    """Call an optimum model (OpenVINO or ONNX Runtime) on the runner's padded tensors."""

    def run(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        out = model(**inputs)
        states = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return torch.as_tensor(states)

    return run


def onnx_engine(encoder: Encoder, path: Path, export: bool = True) -> callable:
    """Export `encoder`'s model to ONNX (its last hidden state) and run it in an ONNX Runtime session."""
    import onnxruntime as ort

    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if encoder.network.takes_type_ids else [])
    sample = encoder.tokenizer(["a short one", "and a longer second sentence"], padding=True, return_tensors="pt")

    class LastHiddenState(torch.nn.Module):
        def __init__(self, model: torch.nn.Module):
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids=None) -> torch.Tensor:
            given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
            return self.model(**{n: given[n] for n in names}).last_hidden_state

    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    if export:
        torch.onnx.export(  # torch.export (dynamo): the TorchScript exporter fails on transformers 5's masks
            LastHiddenState(encoder.model).eval(),
            tuple(sample[n] for n in names),
            str(path),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_shapes={n: {0: batch, 1: sequence} for n in names},
            opset_version=18,
            dynamo=True,
        )
    settings = ort.SessionOptions()
    settings.intra_op_num_threads, settings.inter_op_num_threads = torch.get_num_threads(), 1
    session = ort.InferenceSession(str(path), settings, providers=["CPUExecutionProvider"])

    def run(inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.from_numpy(session.run(["last_hidden_state"], {n: inputs[n].numpy() for n in names})[0])

    return run


def int8_ways(folder: Path, texts: list[str], export: Path, fp32: Encoder) -> dict:
    """int8 three ways, each calibrated on bertkit's packaged calibration sentences where it calibrates at all.

    bertkit's own (`precision="int8"`); OpenVINO's post-training static int8 (NNCF through optimum-intel's
    OVQuantizer, what sentence-transformers' `export_static_quantized_openvino_model` runs, here with a local
    calibration set), read back by sentence-transformers and behind bertkit's plan; ONNX Runtime's dynamic int8 of
    the fp32 export (what sentence-transformers' `export_dynamic_quantized_onnx_model` runs), behind bertkit's plan.
    """
    import shutil

    from datasets import Dataset
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from optimum.intel import OVConfig, OVModelForFeatureExtraction, OVQuantizationConfig, OVQuantizer
    from sentence_transformers import SentenceTransformer

    from bertkit.encoder.int8 import packaged_texts

    ways: dict[str, callable] = {}
    own = Encoder.from_pretrained(device="cpu", precision="int8", engine="torch")
    ways["bertkit torch int8 (its own calibration)"] = lambda t: own.embed(t, progress=False, warn=False)

    calibration = packaged_texts()
    tokenized = fp32.tokenizer(calibration, padding="max_length", max_length=128, truncation=True)
    model_copy = Path(shutil.copytree(folder, export / "st-model"))
    ov = OVModelForFeatureExtraction.from_pretrained(folder, export=True)
    config = OVQuantizationConfig(num_samples=len(calibration))
    OVQuantizer.from_pretrained(ov).quantize(
        calibration_dataset=Dataset.from_dict(dict(tokenized)),
        save_directory=export / "ov-int8",
        ov_config=OVConfig(quantization_config=config),
    )
    (model_copy / "openvino").mkdir()
    for name in ("openvino_model.xml", "openvino_model.bin"):
        target = name.replace("openvino_model", "openvino_model_qint8_quantized")
        shutil.copy(export / "ov-int8" / name, model_copy / "openvino" / target)
    st_int8 = SentenceTransformer(
        str(model_copy),
        device="cpu",
        backend="openvino",
        model_kwargs={"file_name": "openvino/openvino_model_qint8_quantized.xml"},
    )
    for batch in (32, 128):
        ways[f"sentence-transformers openvino static int8, batch {batch}"] = lambda t, b=batch: st_int8.encode(
            t, batch_size=b
        )
    ov_int8 = OVModelForFeatureExtraction.from_pretrained(export / "ov-int8", compile=True)
    ov_encoder = with_engine(
        Encoder.from_pretrained(device="cpu", concurrent_batches=1, engine="torch"), optimum_engine(ov_int8)
    )
    ways["bertkit plan + OpenVINO static int8"] = lambda t: ov_encoder.embed(t, progress=False, warn=False)
    import nncf
    import openvino

    graph = Encoder.from_pretrained(device="cpu", engine="openvino").network.openvino.graph
    compressed = nncf.compress_weights(graph.clone(), mode=nncf.CompressWeightsMode.INT8_ASYM)
    dynamic = openvino.Core().compile_model(
        compressed, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "32"}
    )
    dynamic_encoder = with_engine(
        Encoder.from_pretrained(device="cpu", concurrent_batches=1, engine="torch"),
        lambda inputs: torch.from_numpy(dynamic({k: v.numpy() for k, v in inputs.items()})[len(dynamic.outputs) - 1]),
    )
    ways["bertkit plan + OpenVINO int8 weights, dynamic int8 activations"] = lambda t: dynamic_encoder.embed(
        t, progress=False, warn=False
    )
    quantize_dynamic(str(export / "model.onnx"), str(export / "dynamic.onnx"), weight_type=QuantType.QInt8)
    ort_int8 = with_engine(
        Encoder.from_pretrained(device="cpu", concurrent_batches=1, engine="torch"),
        onnx_engine(fp32, export / "dynamic.onnx", False),
    )
    ways["bertkit plan + ONNX Runtime dynamic int8"] = lambda t: ort_int8.embed(t, progress=False, warn=False)
    return ways


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, help="run only the ways whose name contains one of these")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--int8", action="store_true", help="add the int8 ways (and each way's classifier accuracy)")
    options = parser.parse_args()
    train = read_labelled(options.data)
    texts, labels = train.texts[: options.limit], train.labels[: options.limit]
    dev = read_labelled(options.data.with_name("dev.tsv"))
    folder = default_model_dir()
    from sentence_transformers import SentenceTransformer

    export = Path(tempfile.mkdtemp(prefix="engines-"))
    ways: dict[str, callable] = {}
    st = SentenceTransformer(str(folder), device="cpu")
    ways["sentence-transformers torch fp32, batch 32"] = lambda t: st.encode(t, batch_size=32)
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}
    st_ov = SentenceTransformer(str(folder), device="cpu", backend="openvino", model_kwargs={"ov_config": f32})
    st_ov_default = SentenceTransformer(str(folder), device="cpu", backend="openvino")
    for batch in (32, 128):
        ways[f"sentence-transformers openvino, hint f32, batch {batch}"] = lambda t, b=batch: st_ov.encode(
            t, batch_size=b
        )
        ways[f"sentence-transformers openvino, default hint, batch {batch}"] = lambda t, b=batch: st_ov_default.encode(
            t, batch_size=b
        )

    fp32 = Encoder.from_pretrained(device="cpu", engine="torch")
    for precision in ("fp32", "bf16") if native_bf16() else ("fp32",):
        for engine in ("torch", "openvino"):
            encoder = (
                fp32
                if (precision, engine) == ("fp32", "torch")
                else Encoder.from_pretrained(device="cpu", precision=precision, engine=engine)
            )
            ways[f"bertkit {engine} {precision}"] = lambda t, e=encoder: e.embed(t, progress=False, warn=False)
    ort_encoder = with_engine(
        Encoder.from_pretrained(device="cpu", concurrent_batches=1, engine="torch"),
        onnx_engine(fp32, export / "model.onnx"),
    )
    ways["bertkit plan + ONNX Runtime fp32"] = lambda t: ort_encoder.embed(t, progress=False, warn=False)
    if options.int8:
        ways |= int8_ways(folder, texts, export, fp32)
    if options.only:
        ways = {
            k: v
            for k, v in ways.items()
            if any(o in k for o in options.only) or k.startswith("sentence-transformers torch")
        }

    reference = reference_vectors(folder, texts)
    results: dict[str, dict] = {}
    for name, way in ways.items():  # warm-up, and the vectors
        vectors = np.asarray(way(texts), dtype=np.float32)
        vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        cosines = (vectors * reference).sum(1)
        results[name] = {
            "max_abs_to_transformers": float(np.abs(vectors - reference).max()),
            "min_cosine_to_transformers": float(cosines.min()),
            "median_cosine_to_transformers": float(np.median(cosines)),
            "speeds": [],
        }
        if options.int8:  # the feature classifier: logistic regression on these vectors, scored on SST-2 dev
            from sklearn.linear_model import LogisticRegression

            fitted = LogisticRegression(max_iter=2000).fit(vectors, labels)
            dev_vectors = np.asarray(way(dev.texts), dtype=np.float32)
            dev_vectors /= np.linalg.norm(dev_vectors, axis=1, keepdims=True)
            results[name]["accuracy"] = float(fitted.score(dev_vectors, dev.labels))
        print(f"warm: {name}: max abs {results[name]['max_abs_to_transformers']:.2e}", flush=True)
    for _ in range(options.repeats):
        for name, way in ways.items():
            started = time.perf_counter()
            way(texts)
            results[name]["speeds"].append(len(texts) / (time.perf_counter() - started))
    base = statistics.median(results["sentence-transformers torch fp32, batch 32"]["speeds"])
    print(f"\n{len(texts)} SST-2 sentences, {cpu()}; median of {options.repeats}")
    print("| way | texts/s (range) | × ST torch | max abs to transformers | min / median cosine | accuracy |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        median = statistics.median(r["speeds"])
        r["median"] = median
        print(
            f"| {name} | {median:.0f} ({min(r['speeds']):.0f}–{max(r['speeds']):.0f}) | {median / base:.2f} | "
            f"{r['max_abs_to_transformers']:.1e} | {r['min_cosine_to_transformers']:.5f} / "
            f"{r['median_cosine_to_transformers']:.5f} | {r.get('accuracy', float('nan')):.4f} |"
        )
    if options.json:
        options.json.write_text(json.dumps({"cpu": cpu(), "texts": len(texts), "ways": results}, indent=1))
    del export
    sys.stdout.flush()


if __name__ == "__main__":
    main()
