"""Which engine runs an encoder's forward passes: torch, or OpenVINO on a CPU when it is installed.

OpenVINO (`pip install "bertkit[openvino]"`) runs the model's own graph, exported from torch once per model (through
`torch.export`, converted by `openvino.convert_model`) and kept in the cache by the model's fingerprint, at the
precision asked for and no other (its CPU default would run bf16 for fp32). It gives every hidden state and the
pooler, so every embedding option works on it; a saved fine-tuned run's graph gives its head's logits. Gradients
(attributions), attentions (the explainer), int8 (bertkit's own) and runs being trained stay on torch. Measured in
docs/benchmarks.md, "CPU engines".
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from ..errors import InputError
from ..io.writers import staged_files
from ..records import check_record, new_record
from .defaults import cache_root
from .precision import fast_bf16_cpu, fastest_faithful
from .runner import call_model
from .threads import total_threads

logger = logging.getLogger(__name__)

ENGINES = ("auto", "torch", "openvino")
ENGINE_VARIABLE = "BERTKIT_ENGINE"  # the engine when the caller names none (the command line's way to force one)
OPENVINO_PRECISIONS = {"fp32": "f32", "bf16": "bf16"}  # bertkit's precision → OpenVINO's INFERENCE_PRECISION_HINT
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def check_engine(engine: str | None, device: torch.device | None = None, precision: str | None = None) -> str:
    """Return the engine asked for: `engine`, else $BERTKIT_ENGINE, else 'auto'; anything else is an `InputError`.

    Given the `device` and `precision`, an engine forced where it cannot run is refused too (`choose_engine`), before
    any work: the model loading, int8's calibration.
    """
    value = engine if engine is not None else os.environ.get(ENGINE_VARIABLE) or "auto"
    if value not in ENGINES:
        raise InputError(f"{engine_named(engine)}: give one of {', '.join(ENGINES)}.")
    if device is not None and precision is not None:
        choose_engine(value, device, precision, engine_named(engine))
    return value


def engine_named(engine: str | None) -> str:
    """Say how the engine was asked for, as the caller wrote it: "engine='openvino'" or 'BERTKIT_ENGINE=openvino'."""
    return f"engine={engine!r}" if engine is not None else f"{ENGINE_VARIABLE}={os.environ.get(ENGINE_VARIABLE)}"


def openvino_version() -> str | None:
    """OpenVINO's version, or None when it is not installed."""
    if importlib.util.find_spec("openvino") is None:
        return None
    from importlib.metadata import version

    return version("openvino")


def choose_engine(
    engine: str, device: torch.device, precision: str, named: str = "engine='openvino'"
) -> tuple[str, str]:
    """Return the engine that will run (`engine` checked by `check_engine`) and why, in words.

    'auto' is OpenVINO where it can run the request (a CPU, fp32 or bf16, installed), else torch; a forced
    'openvino' that cannot is an `InputError` that says how it was forced (`named`).
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
        raise InputError(f"{named}: {reason}.")
    return "torch", reason


def engine_for(
    engine: str,
    device: torch.device,
    precision: str,
    build: Callable[[], OpenVINOForward],
    source: str,
    named: str = "engine='openvino'",
) -> tuple[str, str, OpenVINOForward | None]:
    """Return (engine that runs, why, its OpenVINO forward or None): `choose_engine`, then `build` for OpenVINO.

    A model that does not export runs on torch with a warning, or is an `InputError` when 'openvino' was asked for.
    """
    chosen, reason = choose_engine(engine, device, precision, named)
    if chosen != "openvino":
        return chosen, reason, None
    try:
        return chosen, reason, build()
    except Exception as error:  # noqa: BLE001 (an architecture torch.export or OpenVINO cannot take)
        why = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if engine == "openvino":
            raise InputError(f"{named}: this model does not export to OpenVINO ({why}).") from error
        reason = f"the model does not export to OpenVINO ({why})"
        logger.warning("%s: %s; running on torch", source, reason)
        return "torch", reason, None


class _Outputs(torch.nn.Module):
    """A model's forward pass as the graph returns it: its inputs by name in, a flat tuple of tensors out."""

    def __init__(
        self, model: torch.nn.Module, names: tuple[str, ...], flatten: Callable[[Any], tuple], **options: Any
    ) -> None:
        super().__init__()
        self.model, self.names, self.flatten, self.options = model, names, flatten, options

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        inputs = {name: given[name] for name in self.names}
        return self.flatten(call_model(self.model, inputs, torch.device("cpu"), return_dict=True, **self.options))


# Two infer requests making their first pass at once can deadlock inside OpenVINO's Python binding (one thread holds
# the GIL in a C++ static initializer that the other, waiting for the GIL, is running: about 1 run in 10 of a bare
# OpenVINO script with two threads behind a barrier; 3 in 58 `bertkit embed` runs froze): every request's first
# pass runs alone, under this process-wide lock, before the request is used.
_FIRST_PASS_LOCK = threading.Lock()
_GRAPHS: dict[str, Any] = {}  # cache key → openvino.Model, for the models of one process
_GRAPHS_LOCK = threading.Lock()


def openvino_graph(module: _Outputs, key: str, width: int) -> Any:
    """Return the OpenVINO graph of `module`: from this process, else the cache, else exported and cached.

    `key` names the model (its weights' digest) and the versions that made the graph; `width` is the longest input.
    """
    import openvino

    with _GRAPHS_LOCK:
        if key in _GRAPHS:
            return _GRAPHS[key]
        folder, names = cache_root() / "openvino", [f"{key}.bin", f"{key}.xml"]
        graph = None
        if (folder / names[1]).is_file() and _verified(folder, names, key):
            try:
                graph = openvino.Core().read_model(folder / names[1])
                os.utime(folder / f"{key}.json")  # used now: the last to go when the cache is over its limit
            except RuntimeError:  # damaged or another version's: exported again
                graph = None
            except OSError:  # a read-only cache: read, not marked
                pass
        if graph is None:
            graph = _export(module, width)
            try:
                with staged_files(folder, [*names, f"{key}.json"]) as scratch:  # the record last: the set is whole
                    openvino.save_model(graph, scratch / names[1], compress_to_fp16=False)
                    record = new_record(GRAPH_KIND, sha256={name: _sha256(scratch / name) for name in names})
                    (scratch / f"{key}.json").write_text(json.dumps(record), encoding="utf-8")
            except OSError as error:  # a read-only home: exported again next time
                logger.info("the OpenVINO graph was not cached (%s)", error)
            else:
                try:
                    evict_graphs(folder, keep=key)
                except (OSError, ValueError) as error:  # a bad limit, another user's file: the graph is made
                    logger.warning("the OpenVINO cache was not trimmed (%s)", error)
        _GRAPHS[key] = graph
        return graph


GRAPH_KIND = "openvino-graph"  # the record beside a cached graph: its files' digests
DEFAULT_GRAPHS_MB = 4096  # $BERTKIT_OPENVINO_CACHE_MB overrides: about 45 graphs of the packaged model, 9 of a base one


def evict_graphs(folder: Path, keep: str) -> list[str]:
    """Remove the least recently used cached graphs while the folder holds more than its limit; return their keys.

    Only whole sets bertkit wrote (a graph's .xml and .bin with the record that names them) are counted and removed;
    `keep` (the graph just made) stays even when it alone is over the limit. A graph's record is touched when it is
    read, so its modification time says when it was last used.
    """
    limit = float(os.environ.get("BERTKIT_OPENVINO_CACHE_MB", DEFAULT_GRAPHS_MB)) * 2**20
    sets = []
    for record in folder.glob("*.json"):
        files = [folder / f"{record.stem}.xml", folder / f"{record.stem}.bin", record]  # the record last
        try:
            check_record(json.loads(record.read_text(encoding="utf-8")), GRAPH_KIND, record)
            size = sum(f.stat().st_size for f in files if f.exists())  # a set half removed still counts, and goes
            sets.append((record.stat().st_mtime, record.stem, files, size))
        except (OSError, ValueError):  # not a set bertkit wrote whole (or another process just removed it)
            continue
    total, evicted = sum(size for *_, size in sets), []
    for _, key, files, size in sorted(sets):
        if total <= limit:
            break
        if key != keep:
            for file in files:
                file.unlink(missing_ok=True)
            total, evicted = total - size, [*evicted, key]
    if evicted:
        logger.info("removed %d least recently used OpenVINO graphs (over %.0f MB)", len(evicted), limit / 2**20)
    return evicted


def _verified(folder: Path, names: list[str], key: str) -> bool:
    """Check a cached graph's files against the digests of its record; a mismatch is said and the graph made again."""
    try:
        record = check_record(json.loads((folder / f"{key}.json").read_text(encoding="utf-8")), GRAPH_KIND, key)
        damaged = [name for name in names if record["sha256"].get(name) != _sha256(folder / name)]
    except (OSError, ValueError, KeyError, AttributeError):  # no record (another version's, or cut short)
        logger.info("the cached OpenVINO graph %s has no valid record: exported again", key)
        return False
    if damaged:
        logger.warning(
            "the cached OpenVINO graph %s is damaged (%s differs from its digest): exported again",
            folder / names[0],
            ", ".join(damaged),
        )
    return not damaged


def _sha256(path: Path) -> str:
    """Return the SHA-256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _export(module: _Outputs, width: int) -> Any:
    import openvino

    logger.info("exporting the model to OpenVINO (once per model; cached under %s)", cache_root() / "openvino")
    ids = torch.full((2, 8), 1, dtype=torch.long)
    sample = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    sample["attention_mask"][1, 6:] = 0
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence", max=width)
    args, shapes = tuple(sample[n] for n in module.names), {n: {0: batch, 1: sequence} for n in module.names}
    with torch.no_grad(), warnings.catch_warnings():
        # torch.export's own pytree code warns about its LeafSpec on every export: nothing the user can act on
        warnings.filterwarnings("ignore", message=r".*LeafSpec.*is deprecated")
        program = torch.export.export(module.eval(), args, dynamic_shapes=shapes, strict=False)
        return openvino.convert_model(program)


class OpenVINOForward:
    """Forward passes on OpenVINO: padded CPU tensors in, the graph's outputs out (a tuple, or as `unpack` reads it).

    A pass on all of torch's threads runs one stream on them; concurrent passes, each on its share of the threads
    (`threads.forward_in_parallel`), run one stream each: a compiled model per layout, an infer request per thread.
    """

    def __init__(
        self, graph: Any, names: tuple[str, ...], precision: str, unpack: Callable[[tuple], Any] = tuple
    ) -> None:
        self.graph, self.names, self.unpack = graph, names, unpack
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
            request = self._compiled[streams].create_infer_request()
            with _FIRST_PASS_LOCK:  # a request's first pass alone in the process: see _FIRST_PASS_LOCK
                ids = torch.ones((1, 2), dtype=torch.long)
                self._run(request, {"input_ids": ids, "attention_mask": ids, "token_type_ids": torch.zeros_like(ids)})
            requests[streams] = request
        return requests[streams]

    def _run(self, request: Any, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """Run one pass of `request` on `inputs`; the outputs copied out of the request's buffers."""
        results = request.infer({name: inputs[name].numpy() for name in self.names}, share_inputs=True)
        # copied: the request's output buffers are its next pass's, and the runner may hold this one until then
        return tuple(torch.from_numpy(results[i].copy()) for i in range(len(results)))

    def __call__(self, inputs: dict[str, torch.Tensor]) -> Any:
        """Run one pass on `inputs` (the runner's padded tensors): the outputs, as `unpack` gives them."""
        return self.unpack(self._run(self._request(), inputs))


def _encoder_states(out: Any) -> tuple[torch.Tensor, ...]:
    """Return an encoder's pooler output (where it has one) and every hidden state."""
    pooler = getattr(out, "pooler_output", None)
    return ((pooler,) if pooler is not None else ()) + tuple(out.hidden_states)


def _states_unpacker(has_pooler: bool) -> Callable[[tuple], SimpleNamespace]:
    """Return how an encoder graph's outputs read as transformers' do: hidden_states, last_hidden_state, pooler."""

    def unpack(outputs: tuple) -> SimpleNamespace:
        states = outputs[1:] if has_pooler else outputs
        pooler = outputs[0] if has_pooler else None
        return SimpleNamespace(hidden_states=states, last_hidden_state=states[-1], pooler_output=pooler)

    return unpack


def _head_outputs(out: Any) -> tuple[torch.Tensor, ...]:
    """Return a fine-tuned head's outputs: its logits, or a span head's start and end logits."""
    return tuple(out[name] for name in HEAD_OUTPUTS if name in out)


HEAD_OUTPUTS = ("logits", "start_logits", "end_logits")


PATH_DEPENDENT_CONFIG = {"_name_or_path", "transformers_version", "_commit_hash", "name_or_path"}


def digest(*parts: Any, length: int = 32) -> str:
    """Hash `parts` in order (hex, `length` digits): bertkit's one hash of weights, tokenizers and calibrations.

    A tensor gives its bytes, a {name: tensor} mapping (a state dict) each name and bytes in name order, any other
    part its JSON with sorted keys.
    """
    hasher = hashlib.sha256()
    for part in parts:
        named = isinstance(part, dict) and part and all(isinstance(v, torch.Tensor) for v in part.values())
        for name, tensor in sorted(part.items()) if named else [(None, part)]:
            if name is not None:
                hasher.update(name.encode())
            if isinstance(tensor, torch.Tensor):
                hasher.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
            else:
                hasher.update(json.dumps(tensor, sort_keys=True, default=str).encode())
    return hasher.hexdigest()[:length]


def model_config(model: torch.nn.Module) -> dict:
    """Return a model's config as a dict, without where it was read from (a moved model is the same model)."""
    return {k: v for k, v in model.config.to_dict().items() if k not in PATH_DEPENDENT_CONFIG}


def weights_digest(model: torch.nn.Module) -> str:
    """Hash a model's config and weights: equal digests, equal outputs (a run's graph and int8 calibration key)."""
    return digest(model_config(model), model.state_dict())


def encoder_digest(encoder: Any) -> str:
    """Hash an `Encoder`'s config, tokenizer, weights and Dense layers: equal digests mean equal embeddings.

    Saved runs, vector files and indexes record it and refuse another model's vectors: its bytes never change.
    """
    tokenizer = json.loads(encoder.tokenizer.backend_tokenizer.to_str())
    tokenizer.pop("truncation", None)  # set per call: not part of what the tokenizer is
    tokenizer.pop("padding", None)
    dense = [layer.weight for layer in encoder.sentence_config.dense]
    return digest(model_config(encoder.model), tokenizer, encoder.model.state_dict(), *dense)


def openvino_forward(model: torch.nn.Module, takes_type_ids: bool, width: int, precision: str, digest: str) -> Any:
    """Return the OpenVINO forward pass of a transformers model at `precision`; `digest` names its weights.

    An encoder (`AutoModel`) gives its pooler output and every hidden state, a fine-tuned head its logits.
    """
    import transformers

    names = INPUT_NAMES if takes_type_ids else INPUT_NAMES[:2]
    kind, flatten, options = ("head", _head_outputs, {})  # a head on an encoder; else an `AutoModel` itself
    if model.base_model is model:
        kind, flatten, options = ("encoder", _encoder_states, {"output_hidden_states": True})
    key = f"{digest}-ov{openvino_version()}-tf{transformers.__version__}-{kind}"
    graph = openvino_graph(_Outputs(model, names, flatten, **options), key, width)
    if kind == "head":
        return OpenVINOForward(graph, names, precision)
    has_pooler = len(graph.outputs) > model.config.num_hidden_layers + 1  # the pooler's output comes first
    return OpenVINOForward(graph, names, precision, _states_unpacker(has_pooler))


def engine_facts() -> dict[str, str]:
    """Say which precision is fastest and faithful here, which engine runs each CPU precision, and why (`bertkit env`).

    A bad $BERTKIT_ENGINE says so.
    """
    facts = {
        "fastest faithful precision": "{} on the cpu ({}); precision='auto' chooses it".format(*fastest_faithful())
    }
    for precision in ("fp32", "bf16", "int8") if fast_bf16_cpu() else ("fp32", "int8"):
        try:
            engine, reason = choose_engine(check_engine(None), torch.device("cpu"), precision)
            facts[f"engine, {precision} on the cpu"] = f"{engine} ({reason})"
        except InputError as error:
            facts[f"engine, {precision} on the cpu"] = f"refused: {error}"
    facts["engine, other passes"] = "torch (GPUs, runs being trained, attributions, attentions)"
    return facts
