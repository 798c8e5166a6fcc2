"""Ray Data's map_batches with one Encoder per actor: a vector column on any Dataset, with CPUs planned per actor."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import ray
import ray.data

from ..encoder.encode import Encoder
from ..encoder.options import EmbedOptions, options_from
from ..encoder.threads import set_threads
from ..errors import InputError, quoted

DEFAULT_ROWS_PER_CALL = 1024  # rows handed to an actor at once: the unit of load balancing between actors


@dataclass(frozen=True)
class Resources:
    """How the actors share the cluster's CPUs (and GPUs), with a reserve kept for read and write tasks."""

    actors: int
    cpus_per_actor: float  # logical CPUs each actor claims from Ray's scheduler
    threads: int  # torch threads inside each actor: its share of a node's cores (Ray sets OMP_NUM_THREADS=1)
    io_cpus: float  # logical CPUs each read / write task asks for
    gpus_per_actor: float = 0.0  # GPUs each actor claims (Ray's num_gpus); 0: the actors run on the CPU

    @property
    def device(self) -> str:
        """Where each actor's encoder runs: Ray gives a GPU actor its GPUs as cuda:0.. (CUDA_VISIBLE_DEVICES)."""
        return "cuda" if self.gpus_per_actor else "cpu"


def plan_resources(
    cluster_cpus: float,
    node_cpus: float,
    nodes: int = 1,
    actors: int | None = None,
    cpus_per_actor: float | None = None,
    *,
    cluster_gpus: float = 0.0,
    gpus_per_actor: float | None = None,
) -> Resources:
    """Plan actors so that actors × CPUs per actor leaves at least one whole CPU for Ray Data's own tasks.

    Actors holding every CPU leave the read and write tasks unscheduled and the pipeline hangs. With
    `gpus_per_actor`, actors are as many as the GPUs allow, each with one CPU for its host work (tokenizing).
    """
    reserve = 1.0 if cluster_cpus <= 16 else 2.0
    usable = cluster_cpus - reserve
    if actors is not None and actors < 1:
        raise InputError(f"--actors {actors}: give 1 or more actors.")
    if cpus_per_actor is not None and cpus_per_actor <= 0:
        raise InputError(f"cpus_per_actor={cpus_per_actor}: give a positive number of CPUs.")
    if gpus_per_actor:
        actors = _gpu_actors(cluster_gpus, gpus_per_actor, actors)
        cpus_per_actor = cpus_per_actor or min(1.0, usable / actors)
    if actors is None:
        actors = max(1, int(usable // (cpus_per_actor or 1.0)))
    if cpus_per_actor is None:
        cpus_per_actor = min(usable / actors, node_cpus)
    if cpus_per_actor <= 0 or actors * cpus_per_actor > usable + 1e-9:
        raise InputError(
            f"{actors} actors × {cpus_per_actor:g} CPUs need more than the {cluster_cpus:g} CPUs of the cluster less "
            f"{reserve:g} kept for reading and writing (actors that take every CPU starve those tasks and the job "
            "hangs). Use fewer --actors or add nodes."
        )
    if cpus_per_actor > node_cpus:
        raise InputError(
            f"{cpus_per_actor:g} CPUs per actor: no node has more than {node_cpus:g}; use more, smaller actors."
        )
    per_node = -(-actors // max(1, nodes))  # actors that share one node's cores
    threads = max(1, int(node_cpus // per_node))
    return Resources(actors, round(cpus_per_actor, 4), threads, round(reserve / 2, 4), float(gpus_per_actor or 0.0))


def _gpu_actors(cluster_gpus: float, gpus_per_actor: float, actors: int | None) -> int:
    """Actors that `gpus_per_actor` GPUs each allow (all the GPUs by default), or a refusal that says what is there."""
    if gpus_per_actor < 0:
        raise InputError(f"--gpus-per-actor {gpus_per_actor:g}: give a positive number of GPUs (e.g. 1 or 0.5).")
    if cluster_gpus <= 0:
        raise InputError(
            f"--gpus-per-actor {gpus_per_actor:g}: the Ray cluster has no GPUs; leave it out for CPU actors, or join "
            "a cluster whose nodes have GPUs (--address)."
        )
    fits = int(cluster_gpus // gpus_per_actor + 1e-9)
    if fits < 1 or (actors is not None and actors > fits):
        raise InputError(
            f"{actors or 1} actor(s) × {gpus_per_actor:g} GPUs need more than the cluster's {cluster_gpus:g} GPUs; "
            "use fewer --actors or a smaller --gpus-per-actor."
        )
    return actors or fits


def planned_resources(actors: int | None, cpus_per_actor: float | None, gpus_per_actor: float | None) -> Resources:
    """`plan_resources` for the CPUs (in all, of the largest node, nodes) and GPUs of the connected cluster."""
    alive = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    cpus = [r.get("CPU", 0.0) for r in alive if r.get("CPU", 0.0) > 0]
    gpus = float(sum(r.get("GPU", 0.0) for r in alive))
    cluster = (float(sum(cpus)), float(max(cpus, default=0.0)), len(cpus))
    return plan_resources(*cluster, actors, cpus_per_actor, cluster_gpus=gpus, gpus_per_actor=gpus_per_actor)


class _Embedder:
    """Ray Data actor: loads one Encoder when it starts (never per batch) and adds a vector column to each batch."""

    def __init__(
        self,
        model: str | None,
        precision: str,
        threads: int,
        column: str,
        vector_column: str,
        options: dict,
        device: str = "cpu",
        batch_size: int | None = None,
    ) -> None:
        set_threads(threads)  # this actor's process: its share of the node's cores
        self.encoder = Encoder.from_pretrained(model, precision=precision, device=device)
        self.column, self.vector_column, self.batch_size = column, vector_column, batch_size
        self.options = EmbedOptions.from_record(options)

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = batch.column(self.column).to_pylist()
        for text in texts:
            if not isinstance(text, str):
                raise InputError(
                    f"column {self.column!r} holds a {type(text).__name__} ({quoted(text)}), not a string; "
                    "every text must be a string."
                )
        vectors = self.encoder.embed(texts, self.options, batch_size=self.batch_size, progress=False, warn=False)
        return batch.append_column(self.vector_column, vector_array(vectors))


def vector_array(vectors: np.ndarray) -> pa.FixedSizeListArray:
    """Wrap an (n, dim) float32 matrix as an Arrow FixedSizeList<float32>[dim] column (zero copy)."""
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1), type=pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])


def embed_dataset(
    ds: ray.data.Dataset,
    column: str = "text",
    options: EmbedOptions | None = None,
    *,
    batch_size: int | None = None,
    precision: str = "fp32",
    model: str | None = None,
    actors: int | None = None,
    cpus_per_actor: float | None = None,
    gpus_per_actor: float | None = None,
    rows_per_call: int = DEFAULT_ROWS_PER_CALL,
    vector_column: str = "vector",
    encoder: Encoder | None = None,
    **kwargs: Any,
) -> ray.data.Dataset:
    """Add a `vector` column (FixedSizeList<float32>) to the dataset: the same numbers as `Encoder.embed`.

    Options (`EmbedOptions`, or keywords: layers, pooling, ...) are checked on the driver before any actor starts.
    Every node must reach `model` at the same path. `gpus_per_actor` puts each actor on that many GPUs (Ray's
    `num_gpus`; 0.5 lets two share one); without it the actors run on CPUs.
    """
    schema = ds.schema(fetch_if_missing=False)  # known without running anything, or not checked here
    names = schema.names if schema is not None else [column]
    if column not in names:
        raise InputError(f"no column named {column!r}; the dataset has columns {names}.")
    if vector_column in names:
        raise InputError(f"the dataset already has a column {vector_column!r}; choose another vector_column.")
    driver = encoder or driver_encoder(model, precision, gpus_per_actor)
    resolved = check_options(driver, options_from(options, kwargs))
    if rows_per_call < 1:
        raise InputError(f"rows_per_call={rows_per_call}: give a positive number of rows.")
    if not ray.is_initialized():
        ray.init()  # what Ray Data would do on first use; the CPU plan needs the cluster now
    plan = planned_resources(actors, cpus_per_actor, gpus_per_actor)
    spec = model if model is None or not Path(model).exists() else str(Path(model).resolve())
    actor_args = (spec, precision, plan.threads, column, vector_column, resolved.record(), plan.device, batch_size)
    with warnings.catch_warnings():  # Ray 2.5x warns that actor options as keywords will change, with no other way yet
        warnings.filterwarnings("ignore", module="ray")
        return ds.map_batches(
            _Embedder,
            fn_constructor_args=actor_args,
            batch_size=rows_per_call,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=plan.actors),
            num_cpus=plan.cpus_per_actor,
            num_gpus=plan.gpus_per_actor,
            # A lost actor fails the run, which resumes from its manifest, rather than being restarted by Ray: a
            # restartable actor whose constructor arguments are in the object store is an error line from Ray's core
            # worker on every run (ray-project/ray#53727).
            max_restarts=0,
        )


def driver_encoder(model: str | None, precision: str, gpus_per_actor: float | None) -> Encoder:
    """Load the encoder the driver checks options with, on its CPU: fp32 for GPU actors (fp16/bf16 fail on a CPU)."""
    import torch

    from ..encoder.precision import check_precision

    if gpus_per_actor and precision == "int8":
        check_precision(precision, device=torch.device("cuda"))  # int8 on a GPU: its one-line refusal
    return Encoder.from_pretrained(model, precision="fp32" if gpus_per_actor else precision, device="cpu")


def check_options(encoder: Encoder, options: EmbedOptions) -> EmbedOptions:
    """`options` resolved against `encoder`'s model; token vectors and compact types are refused on Ray."""
    if options.token_vectors:
        raise InputError(
            "pooling='none' (token vectors) is not supported on Ray; choose cls, mean, max or a combination."
        )
    if options.output_type != "float32":
        raise InputError("the Ray engine writes float32 vectors; leave output_type out.")
    return options.resolve(encoder)
