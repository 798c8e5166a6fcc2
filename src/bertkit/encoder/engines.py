"""Which engine runs an encoder's forward passes: torch, or OpenVINO on a CPU when it is installed.

OpenVINO (`pip install "bertkit[openvino]"`) runs the model's own graph, exported from torch once per model (through
`torch.export`, converted by `openvino.convert_model`) and kept in the cache by the model's fingerprint, at the
precision asked for and no other (its CPU default would run bf16 for fp32). It gives every hidden state and the
pooler, so every embedding option works on it; gradients (attributions), attentions (the explainer), int8 (bertkit's
own) and fine-tuned runs' heads stay on torch. Measured in docs/benchmarks.md, "CPU engines".
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from typing import Any

import torch

from ..errors import InputError
from .cache_files import cache_files
from .defaults import cache_root
from .precision import fast_bf16_cpu
from .runner import call_model
from .threads import total_threads

logger = logging.getLogger(__name__)

ENGINES = ("auto", "torch", "openvino")
ENGINE_VARIABLE = "BERTKIT_ENGINE"  # the engine when the caller names none (the command line's way to force one)
OPENVINO_PRECISIONS = {"fp32": "f32", "bf16": "bf16"}  # bertkit's precision → OpenVINO's INFERENCE_PRECISION_HINT
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def check_engine(engine: str | None) -> str:
    """Return the engine asked for: `engine`, else $BERTKIT_ENGINE, else 'auto'; anything else is an `InputError`."""
    value = engine if engine is not None else os.environ.get(ENGINE_VARIABLE) or "auto"
    if value not in ENGINES:
        where = f"engine={value!r}" if engine is not None else f"{ENGINE_VARIABLE}={value}"
        raise InputError(f"{where}: give one of {', '.join(ENGINES)}.")
    return value


def openvino_version() -> str | None:
    """OpenVINO's version, or None when it is not installed."""
    if importlib.util.find_spec("openvino") is None:
        return None
    from importlib.metadata import version

    return version("openvino")


def choose_engine(engine: str, device: torch.device, precision: str) -> tuple[str, str]:
    """Return the engine that will run (`engine` checked by `check_engine`) and why, in words.

    'auto' is OpenVINO where it can run the request (a CPU, fp32 or bf16, installed), else torch; a forced
    'openvino' that cannot is an `InputError`.
    """
    if engine == "torch":
        return "torch", "asked for"
    installed = openvino_version()
    if device.type != "cpu":
        reason = f"OpenVINO runs on the CPU only; {device.type} runs on torch"
    elif precision not in OPENVINO_PRECISIONS:
        reason = f"{precision} is bertkit's own int8, on torch; OpenVINO runs fp32 and bf16"
    elif installed is None:
        reason = 'OpenVINO is not installed (pip install "bertkit[openvino]")'
    else:
        return "openvino", f"OpenVINO {installed}, {precision} pinned"
    if engine == "openvino":
        raise InputError(f"engine='openvino': {reason}.")
    return "torch", reason


class _AllStates(torch.nn.Module):
    """The model's pooler output (when it has one) and every hidden state, as one tuple: what the graph returns."""

    def __init__(self, model: torch.nn.Module, names: tuple[str, ...], pooler: bool) -> None:
        super().__init__()
        self.model, self.names, self.pooler = model, names, pooler

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        inputs = {name: given[name] for name in self.names}
        out = call_model(self.model, inputs, torch.device("cpu"), output_hidden_states=True, return_dict=True)
        return ((out.pooler_output,) if self.pooler else ()) + tuple(out.hidden_states)


_GRAPHS: dict[str, Any] = {}  # cache key → openvino.Model, for the encoders of one process
_GRAPHS_LOCK = threading.Lock()


def openvino_graph(model: torch.nn.Module, names: tuple[str, ...], pooler: bool, key: str, width: int) -> Any:
    """Return the OpenVINO graph of `model`: from this process, else the cache, else exported and cached.

    `key` names the model (its fingerprint) and the versions that made the graph; `width` is the longest input.
    """
    import openvino

    with _GRAPHS_LOCK:
        if key in _GRAPHS:
            return _GRAPHS[key]
        folder, xml = cache_root() / "openvino", f"{key}.xml"
        core = openvino.Core()
        graph = None
        if (folder / xml).is_file():
            try:
                graph = core.read_model(folder / xml)
            except RuntimeError:  # damaged or another version's: exported again
                graph = None
        if graph is None:
            graph = _export(model, names, pooler, width)
            try:
                with cache_files(folder, [f"{key}.bin", xml]) as scratch:
                    openvino.save_model(graph, scratch / xml, compress_to_fp16=False)
            except OSError as error:  # a read-only home: exported again next time
                logger.info("the OpenVINO graph was not cached (%s)", error)
        _GRAPHS[key] = graph
        return graph


def _export(model: torch.nn.Module, names: tuple[str, ...], pooler: bool, width: int) -> Any:
    import openvino

    logger.info("exporting the model to OpenVINO (once per model; cached under %s)", cache_root() / "openvino")
    ids = torch.full((2, 8), 1, dtype=torch.long)
    sample = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    sample["attention_mask"][1, 6:] = 0
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence", max=width)
    with torch.no_grad():
        program = torch.export.export(
            _AllStates(model, names, pooler).eval(),
            tuple(sample[name] for name in names),
            dynamic_shapes={name: {0: batch, 1: sequence} for name in names},
            strict=False,
        )
        return openvino.convert_model(program)


class OpenVINOForward:
    """Forward passes on OpenVINO: padded CPU tensors in, (pooler output or None, every hidden state) out.

    A pass on all of torch's threads runs one stream on them; concurrent passes, each on its share of the threads
    (`threads.forward_in_parallel`), run one stream each: a compiled model per layout, an infer request per thread.
    """

    def __init__(self, graph: Any, names: tuple[str, ...], pooler: bool, precision: str) -> None:
        self.graph, self.names, self.pooler = graph, names, pooler
        self.hint = OPENVINO_PRECISIONS[precision]
        self._compiled: dict[int, Any] = {}
        self._requests = threading.local()
        self._lock = threading.Lock()

    def _request(self) -> Any:
        streams = max(1, total_threads() // max(1, torch.get_num_threads()))
        requests = self._requests.__dict__.setdefault("by_streams", {})
        if streams not in requests:
            with self._lock:
                if streams not in self._compiled:
                    import openvino

                    settings = {
                        "INFERENCE_PRECISION_HINT": self.hint,
                        "NUM_STREAMS": str(streams),
                        "INFERENCE_NUM_THREADS": str(total_threads()),
                    }
                    self._compiled[streams] = openvino.Core().compile_model(self.graph, "CPU", settings)
            requests[streams] = self._compiled[streams].create_infer_request()
        return requests[streams]

    def __call__(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...]]:
        """Run one pass on `inputs` (the runner's padded tensors)."""
        request = self._request()
        results = request.infer({name: inputs[name].numpy() for name in self.names}, share_inputs=True)
        # copied: the request's output buffers are its next pass's, and the runner may hold this one until then
        outputs = [torch.from_numpy(results[i].copy()) for i in range(len(results))]
        pooler = outputs.pop(0) if self.pooler else None
        return pooler, tuple(outputs)


def openvino_forward(encoder: Any, precision: str) -> OpenVINOForward:
    """Return the OpenVINO forward pass of an `Encoder`'s model at `precision` (whose module imports this one)."""
    import transformers

    names = INPUT_NAMES if encoder._takes_type_ids else INPUT_NAMES[:2]
    pooler = encoder._has_pooler
    key = f"{encoder.fingerprint}-ov{openvino_version()}-tf{transformers.__version__}-{int(pooler)}"
    graph = openvino_graph(encoder.model, names, pooler, key, encoder._position_limit)
    return OpenVINOForward(graph, names, pooler, precision)


def engine_facts() -> dict[str, str]:
    """Say which engine runs each CPU precision here, and why (`bertkit env`); a bad $BERTKIT_ENGINE says so."""
    facts = {}
    for precision in ("fp32", "bf16", "int8") if fast_bf16_cpu() else ("fp32", "int8"):
        try:
            engine, reason = choose_engine(check_engine(None), torch.device("cpu"), precision)
            facts[f"engine, {precision} on the cpu"] = f"{engine} ({reason})"
        except InputError as error:
            facts[f"engine, {precision} on the cpu"] = f"refused: {error}"
    facts["engine, other passes"] = "torch (GPUs, fine-tuned runs' heads, attributions, attentions)"
    return facts
