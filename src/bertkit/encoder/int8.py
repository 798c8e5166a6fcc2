"""int8 forward passes: an ONNX export of the encoder with 8-bit block-quantised weights, run by ONNX Runtime.

Measured (benchmarks/int8_frontier.py): per-tensor activation scales (torch `quantize_dynamic`, ONNX Runtime
`quantize_dynamic`) lose the vectors (min cosine 0.96 on SST-2); ONNX Runtime's `MatMulNBits` with 8-bit weights in
blocks of 32 along the input axis and accuracy_level=4 (activations quantised to int8 per block of 32 on the fly,
VNNI int8 dot products) keeps them (min cosine 0.998). No calibration: the quantised file is built from the weights
alone, once per model, and cached under ~/.cache/bertkit/int8/<fingerprint>/.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace

import torch

from ..errors import InputError
from .threads import total_threads

INT8_BITS = 8
INT8_BLOCK = 32  # block along the input axis: 128 loses the median cosine target (0.9990), 32 keeps it (0.9996)
INT8_ACCURACY_LEVEL = 4  # int8 activations and int8 dot products (VNNI / AVX2 kernels in ONNX Runtime's MLAS)
ONNX_OPSET = 17


def _onnxruntime():
    try:
        import onnxruntime
    except ImportError as exc:
        raise InputError(
            "precision='int8' runs on ONNX Runtime, which is not installed: pip install 'bertkit[int8]' "
            "(onnxruntime and onnx), or use precision='fp32'."
        ) from exc
    return onnxruntime


def cache_dir() -> Path:
    """Where quantised models are kept: $BERTKIT_CACHE/int8 or ~/.cache/bertkit/int8."""
    root = os.environ.get("BERTKIT_CACHE") or Path.home() / ".cache" / "bertkit"
    return Path(root) / "int8"


class _Outputs(torch.nn.Module):
    """The encoder as a function of tensors only: every hidden state, then the pooler output where there is one."""

    def __init__(self, model, with_type_ids: bool, with_pooler: bool):
        super().__init__()
        self.model, self.with_type_ids, self.with_pooler = model, with_type_ids, with_pooler

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        extra = {"token_type_ids": token_type_ids} if self.with_type_ids else {}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                         return_dict=True, **extra)
        states = tuple(out.hidden_states)
        return states + (out.pooler_output,) if self.with_pooler else states


def input_names(with_type_ids: bool) -> list[str]:
    return ["input_ids", "attention_mask"] + (["token_type_ids"] if with_type_ids else [])


def export_onnx(model, tokenizer, path: Path, with_type_ids: bool, with_pooler: bool) -> None:
    """fp32 ONNX export of `model` with dynamic batch and sequence axes."""
    sample = tokenizer(["a short one", "and a somewhat longer second sentence"], padding=True, return_tensors="pt")
    names = input_names(with_type_ids)
    args = tuple(sample[name] if name in sample else torch.zeros_like(sample["input_ids"]) for name in names)
    layers = int(model.config.num_hidden_layers) + 1
    outputs = [f"hidden_{i}" for i in range(layers)] + (["pooler_output"] if with_pooler else [])
    axes = {name: {0: "batch", 1: "sequence"} for name in names + outputs[:layers]}
    if with_pooler:
        axes["pooler_output"] = {0: "batch"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes on shape checks: the axes above are declared dynamic
        torch.onnx.export(_Outputs(model, with_type_ids, with_pooler).eval(), args, str(path), input_names=names,
                          output_names=outputs, dynamic_axes=axes, opset_version=ONNX_OPSET, dynamo=False)


def quantize_onnx(source: Path, target: Path, block_size: int = INT8_BLOCK) -> None:
    """Replace every MatMul with constant weights by an 8-bit block-quantised `MatMulNBits` (int8 compute)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True,
                                          accuracy_level=INT8_ACCURACY_LEVEL, bits=INT8_BITS)
    quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), algo_config=config)
    quantizer.process()
    quantizer.model.save_model_to_file(str(target), False)


def build_int8(model, tokenizer, directory: Path, with_type_ids: bool, with_pooler: bool) -> Path:
    """Export + quantise into `directory`/model.onnx (written whole or not at all); returns the file."""
    _onnxruntime()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "model.onnx"
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        fp32 = Path(scratch) / "fp32.onnx"
        export_onnx(model, tokenizer, fp32, with_type_ids, with_pooler)
        partial = Path(scratch) / "int8.onnx"
        quantize_onnx(fp32, partial)
        os.replace(partial, target)
    return target


class Int8Model:
    """An ONNX Runtime session that answers like a transformers model: hidden_states, last_hidden_state, pooler."""

    def __init__(self, path: Path, with_type_ids: bool, with_pooler: bool, threads: int):
        ort = _onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, threads)
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.names = input_names(with_type_ids)
        self.with_pooler = with_pooler
        self.path = path

    def __call__(self, input_ids, attention_mask, token_type_ids=None, **_) -> SimpleNamespace:
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        feeds = {name: given[name].numpy() for name in self.names}
        outputs = [torch.from_numpy(array) for array in self.session.run(None, feeds)]
        pooler = outputs.pop() if self.with_pooler else None
        return SimpleNamespace(hidden_states=tuple(outputs), last_hidden_state=outputs[-1], pooler_output=pooler)


def load_int8(model, tokenizer, fingerprint: str, with_type_ids: bool, with_pooler: bool, threads: int) -> Int8Model:
    """The cached int8 model for these weights, built on first use (about a minute for a 6-layer BERT)."""
    directory = cache_dir() / fingerprint
    path = directory / "model.onnx"
    if not path.exists():
        build_int8(model, tokenizer, directory, with_type_ids, with_pooler)
    return Int8Model(path, with_type_ids, with_pooler, threads)


def int8_model_for(encoder) -> Int8Model:
    """The int8 runner for an `Encoder`: its weights' cached file, one share of the threads per concurrent batch."""
    threads = max(1, total_threads() // max(1, encoder.concurrent_batches))
    return load_int8(encoder.model, encoder.tokenizer, encoder.fingerprint, encoder._accepts_type_ids,
                     encoder.has_pooler, threads)
