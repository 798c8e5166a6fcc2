"""The service's limits and batching knobs, in one place the CLI, the app and the tests share."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..encoder.defaults import GPU_BATCH_TOKENS, MAX_BATCH_TOKENS, check_fields, option_field
from ..errors import InputError
from .security import check_allow_hosts, check_allow_origins


@dataclass(frozen=True)
class ServeSettings:
    """Limits, batching and access options of one server process: `bertkit serve`'s flags are generated from them."""

    max_batch_tokens: int | None = option_field(
        None,
        f"Padded tokens per forward pass (default: {MAX_BATCH_TOKENS} on a CPU; on a GPU {GPU_BATCH_TOKENS}, or less "
        "when free memory is short).",
        low=1,
    )
    max_queue_tokens: int = option_field(65536, "Tokens allowed to wait; beyond it 429.", low=1)
    max_inputs: int = option_field(128, "Texts per request.", low=1)
    max_body_bytes: int = option_field(2_000_000, "Request body limit in bytes.", low=1)
    max_answer_numbers: int = option_field(  # 2**23 floats are ~90 MB of JSON
        1 << 23, "Numbers one answer may hold (token vectors: tokens × width; ~90 MB of JSON); beyond it 413.", low=1
    )
    concurrent_batches: int | None = option_field(
        None,
        "Forward passes in flight, each on its share of the threads (default: one per core, 2 at most; 1: one pass "
        "at a time on every thread).",
        low=1,
    )
    allow_hosts: tuple[str, ...] = option_field(
        (),
        "Also answer Host: NAME (NAME or NAME:PORT; '*' for any, behind a proxy that checks it; repeatable). Always: "
        "the bound address and localhost names.",
        flag="--allow-host",
        metavar="NAME",
    )
    allow_origins: tuple[str, ...] = option_field(
        (),
        "Admit browser requests from this origin, e.g. http://localhost:3000, with CORS answers ('*': any; "
        "repeatable); others get 403.",
        flag="--allow-origin",
        metavar="ORIGIN",
    )
    map_texts: bool = option_field(
        False,
        "The explainer's map shows training sentences (off: points and labels only).",
        flag="--map-texts/--no-map-texts",
    )
    api_key: str | None = None  # when set, every endpoint but /health and the page needs `Authorization: Bearer <key>`

    def __post_init__(self) -> None:
        """Refuse limits below 1 and malformed `--allow-host` / `--allow-origin` values (kept lower-cased)."""
        check_fields(self)
        object.__setattr__(self, "allow_hosts", check_allow_hosts(self.allow_hosts))
        object.__setattr__(self, "allow_origins", check_allow_origins(self.allow_origins))


@dataclass(frozen=True)
class RayServeSettings:
    """How `bertkit serve --ray` deploys: where, how many replicas, what each holds. Its flags are generated."""

    address: str | None = option_field(
        None, "With --ray: the Ray cluster to join (ray://host:10001, host:6379, auto); default: start a local one."
    )
    replicas: int = option_field(1, "With --ray: model replicas (each its own model, batcher and threads).", low=1)
    autoscale: str | None = option_field(
        None,
        "With --ray: MIN:MAX replicas, scaled by Ray Serve on requests in flight (instead of --replicas).",
        pattern=r"\d+:\d+",
    )
    target_ongoing_requests: int = option_field(
        8, "With --autoscale: requests in flight per replica that Ray Serve scales toward.", low=1
    )
    replica_cpus: float = option_field(1.0, "With --ray: CPUs per replica (its torch threads; fractions allowed).")
    replica_gpus: float = option_field(0.0, "With --ray: GPUs per replica (fractions allowed).")
    print_config: bool = option_field(
        False, "With --ray: print the Ray Serve config (serve deploy, KubeRay) and exit.", flag="--print-config"
    )

    def __post_init__(self) -> None:
        """Refuse, in one line, replicas below 1, an autoscale range upside down and resources below zero."""
        check_fields(self)
        if self.autoscale is not None:
            low, high = self.replica_range
            if not re.fullmatch(r"\d+:\d+", self.autoscale) or not 1 <= low <= high:
                raise InputError(f"--autoscale {self.autoscale}: give MIN:MAX replicas, 1 ≤ MIN ≤ MAX (e.g. 1:4).")
        for flag, value, least in (
            ("--replica-cpus", self.replica_cpus, 0.01),
            ("--replica-gpus", self.replica_gpus, 0),
        ):
            if not math.isfinite(value) or value < least:
                raise InputError(f"{flag} {value:g}: give {'more than 0' if least else '0 or more'} (0.5: half).")

    @property
    def replica_range(self) -> tuple[int, int]:
        """The fewest and most replicas: MIN:MAX with --autoscale, else --replicas both."""
        if self.autoscale is None:
            return self.replicas, self.replicas
        low, _, high = self.autoscale.partition(":")
        return int(low or 0), int(high or 0)

    def deployment_options(self) -> dict:
        """Ray Serve's options of the model deployment: its replicas (or autoscaling) and each one's resources."""
        low, high = self.replica_range
        scaling: dict[str, Any] = {"num_replicas": self.replicas}
        if self.autoscale is not None:
            target = self.target_ongoing_requests
            scaling = {
                "autoscaling_config": {"min_replicas": low, "max_replicas": high, "target_ongoing_requests": target}
            }
        resources = {"num_cpus": self.replica_cpus, "num_gpus": self.replica_gpus}
        return {**scaling, "ray_actor_options": resources, "max_ongoing_requests": 64, "health_check_period_s": 2}

    def check_cluster(self, cluster: dict) -> None:
        """Refuse a replica larger than the cluster's largest node, before anything is deployed."""
        for resource, flag, asked in (
            ("CPU", "--replica-cpus", self.replica_cpus),
            ("GPU", "--replica-gpus", self.replica_gpus),
        ):
            have = max((node.get(resource, 0) for node in cluster.get("nodes", [])), default=0)
            if asked > have:
                raise InputError(
                    f"{flag} {asked:g}: the cluster's largest node has {have:g} {resource}s; a replica must fit on one."
                )


@dataclass(frozen=True)
class ServeSpec:
    """What one server process serves: the model at its precision on its device and threads, runs, indexes, limits.

    `bertkit serve` builds one app of it; with `--ray`, each replica does. The API key is named (`api_key_env`,
    `api_key_file`), not held, so that a spec written into a cluster's config carries no secret.
    """

    model: str | None = None
    precision: str = "fp32"
    device: str = "auto"
    threads: int | None = None
    runs: tuple[str, ...] = ()
    indexes: tuple[str, ...] = ()
    settings: ServeSettings = field(default_factory=ServeSettings)
    api_key_env: str | None = None
    api_key_file: str | None = None

    def to_dict(self) -> dict:
        """Return the spec as plain values (a Ray Serve config's `args`)."""
        values = dataclasses.asdict(self)
        values["settings"] = {k: v for k, v in values["settings"].items() if k != "api_key"}
        return json.loads(json.dumps(values))

    @classmethod
    def from_dict(cls, values: dict) -> ServeSpec:
        """Read a spec back from plain values; unknown names are refused (a config written by another version)."""
        known = {f.name for f in dataclasses.fields(cls)}
        if unknown := sorted(set(values) - known):
            raise InputError(f"bertkit serve spec: unknown fields {unknown}; known: {sorted(known)}.")
        settings = ServeSettings(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in values.get("settings", {}).items()}
        )
        lists = {k: tuple(values.get(k) or ()) for k in ("runs", "indexes")}
        return cls(**{**values, **lists, "settings": settings})
