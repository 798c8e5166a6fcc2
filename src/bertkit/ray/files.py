"""Files → per-file Parquet outputs on Ray Data; the job's record beside the output makes a killed run resume.

One pipeline reads, embeds and writes Parquet parts whose row counts stream back, so the driver records each file
in the job's record as soon as it is complete (Ray's write_parquet says nothing until all are written). The finished
folder holds `manifest.json`: the options and each file's rows.
"""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import ray
import ray.data

from ..encoder.encode import vectors_record
from ..encoder.options import EmbedOptions, options_from
from ..encoder.progress import Progress
from ..encoder.vectors import PROGRESS_MIN_ROWS
from ..errors import BertkitError, InputError, no_such_path
from ..io import writers
from ..io.text_files import file_sha256
from ..records import MANIFEST_FILE, new_record
from .dataset import DEFAULT_ROWS_PER_CALL, Resources, check_options, driver_encoder, embed_dataset, planned_resources
from .rows import RAY_FORMATS, FileRowsDatasource, file_rows

try:  # Ray's own switch to token mode (what `ray.init(address="auto")` uses); absent in Rays without token auth
    from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
except ImportError:
    maybe_enable_token_auth_if_token_available = None


@dataclass
class RunSummary:
    """What `embed_files` did: rows embedded now, files written and skipped, time taken."""

    output: Path
    rows: int = 0
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    seconds: float = 0.0
    resources: Resources | None = None

    @property
    def rows_per_second(self) -> float:
        """Rows embedded per second of the run (0 before it took any time)."""
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def expand_inputs(patterns: str | Path | Sequence[str | Path]) -> list[Path]:
    """Files named by paths, folders (their input files) or glob patterns: sorted, no duplicates.

    A pattern that matches nothing, or a folder with no input files, is an error.
    """
    if isinstance(patterns, (str, Path)):
        patterns = [patterns]
    found = list(dict.fromkeys(path for pattern in map(str, patterns) for path in _expand_one(pattern)))
    for path in found:
        if path.suffix.lower() not in RAY_FORMATS:
            raise InputError(f"{path}: the Ray engine reads {', '.join(RAY_FORMATS)} files (by extension).")
    names: dict[str, Path] = {}
    for path in found:
        other = names.setdefault(path.stem, path)
        if other != path:
            raise InputError(f"{other} and {path} would both be written to {path.stem}/; give files distinct names.")
    return found


def _expand_one(pattern: str) -> list[Path]:
    if Path(pattern).is_dir():
        inside = sorted(
            p
            for p in Path(pattern).iterdir()
            if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in RAY_FORMATS
        )
        if not inside:
            raise InputError(f"{pattern}: the folder has no {', '.join(RAY_FORMATS)} files.")
        return inside
    matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
    matches = [m for m in matches if not Path(m).is_dir()]
    if not matches or not Path(matches[0]).exists():
        if glob.has_magic(pattern):
            raise InputError(f"{pattern}: no file matches; check the pattern.")
        raise no_such_path(pattern)
    return [Path(m) for m in matches]


def check_folder_output(output: Path) -> None:
    """Refuse an `-o` that names a file: the Ray engine writes a folder of per-file Parquet folders."""
    if output.exists() and not output.is_dir():
        raise InputError(f"-o {output} is a file; the Ray engine writes a directory (one folder per input file).")
    if output.suffix.lower() in writers.VECTOR_FORMATS and not output.is_dir():
        raise InputError(
            f"-o {output}: the Ray engine writes a folder (one Parquet folder per input file), not a "
            f"{output.suffix} file; give a folder name such as {output.with_suffix('')}/, or use "
            "--engine local for one file."
        )


def _write_parts(batch: pa.Table, staging: dict) -> pa.Table:
    """Write each input file's rows of this block as `<staging>/part-<first row>.parquet` (atomic); return counts."""
    paths, counts = [], []
    for path in batch.column("path").unique().to_pylist():
        part = batch.filter(pc.equal(batch.column("path"), path))
        target = Path(staging[path]) / f"part-{part.column('row')[0].as_py():012d}.parquet"
        with writers.atomic_path(target) as temporary:
            pq.write_table(pa.table({"id": part.column("id"), "vector": part.column("vector")}), temporary)
        paths.append(path)
        counts.append(part.num_rows)
    return pa.table({"path": pa.array(paths, pa.string()), "rows": pa.array(counts, pa.int64())})


@dataclass
class _Job:
    """One `embed_files` run: what makes it this job, its state (the files done), the files still to write."""

    output: Path
    job: dict
    state: dict
    summary: RunSummary
    pending: dict[Path, dict] = field(default_factory=dict)

    @property
    def work(self) -> Path:
        """The folder the job writes until every file is in it (`writers.work_folder`)."""
        return writers.work_folder(self.output)

    def staging(self, path: Path) -> Path:
        return self.work / f".{path.stem}.tmp"

    def finish(self, path: Path) -> None:
        """Move a complete file's folder into place and record it in the job's record."""
        entry = self.pending[path]
        writers.replace_folder(self.staging(path), self.work / path.stem)
        self.state["files"][path.stem] = entry
        writers.save_job(self.output, self.job, self.state)
        self.summary.rows += entry["rows"]
        self.summary.files.append(path.stem)


def embed_files(
    inputs: str | Path | Sequence[str | Path],
    output_dir: str | Path,
    options: EmbedOptions | None = None,
    *,
    column: str | int | None = None,
    id_column: str | int | None = None,
    header: bool | None = None,
    batch_size: int | None = None,
    precision: str = "fp32",
    model: str | None = None,
    actors: int | None = None,
    cpus_per_actor: float | None = None,
    gpus_per_actor: float | None = None,
    rows_per_call: int = DEFAULT_ROWS_PER_CALL,
    address: str | None = None,
    ray_logs: bool = True,
    overwrite: bool = False,
    progress: bool | None = None,
    **kwargs: Any,
) -> RunSummary:
    """Embed every row of every input into `<output_dir>/<file stem>/part-*.parquet` (id, vector), resumably.

    Inputs are files, folders (their .parquet/.jsonl/.csv/.tsv/.txt files) or glob patterns. `column`, `header`
    and `id_column` mean what they mean to `bertkit embed` (ids of an id column are written as strings). Each file is
    recorded in the job's record as soon as all its rows are written, so a killed run loses only unfinished files
    and the same call resumes it; an existing `output_dir` is otherwise replaced only with `overwrite`.
    `gpus_per_actor` runs the actors on GPUs (see `embed_dataset`); `options` (or keywords) are `EmbedOptions`.
    `progress` reports the rows written as `embed` does (None: from 256 rows).
    """
    started = time.perf_counter()
    paths = expand_inputs(inputs)
    output = Path(output_dir)
    check_folder_output(output)
    unfinished = writers.check_job_output(output, overwrite, [*paths, model])  # an unfinished job resumes
    if id_column is not None and id_column == column:
        raise InputError(
            f"--id-column {id_column!r} is the text column; name another column, or leave it out for row numbers."
        )
    requested = options_from(options, kwargs)
    reading = {"column": column, "id_column": id_column, "header": header}
    for path in paths:  # refuses a missing text or id column of any file before any work, reading up to its first row
        next(file_rows(path, **reading), None)
    if precision == "auto":  # resolved once, here: every actor runs, and the record names, the same precision
        from ..encoder.precision import fastest_faithful

        precision = "fp16" if gpus_per_actor else fastest_faithful()[0]
    encoder = driver_encoder(model, precision, gpus_per_actor)
    resolved = check_options(encoder, requested)
    recorded = {**vectors_record(encoder, resolved), **reading, "precision": precision}
    identity = {"command": "embed --engine ray", "options": recorded}
    identity["inputs"] = {str(path.resolve()): file_sha256(path) for path in paths}
    state = writers.read_job(output, identity, overwrite) if unfinished else None  # another job's is refused
    if state is None or not writers.work_folder(output).is_dir():  # the record speaks of its work folder's files
        state = None
        writers.remove_output(writers.work_folder(output))  # this job's own, started over
    job = _Job(output, identity, state or {"files": {}}, RunSummary(output))
    for path in paths:
        _plan_file(job, path, reading)
    writers.save_job(output, job.job, job.state)  # first: a work folder is never there without its job's record
    job.work.mkdir(parents=True, exist_ok=True)
    _write_empty(job, encoder.output_dim(resolved), id_column)
    work = {str(path.resolve()): path for path, entry in job.pending.items() if entry["rows"]}
    started_ray = bool(work) and connect(address, ray_logs)
    try:
        if work:
            job.summary.resources = planned_resources(actors, cpus_per_actor, gpus_per_actor)
            embedding = dict(options=resolved, model=model, precision=precision, encoder=encoder, batch_size=batch_size)
            _stream_files(job, work, {**reading, "rows_per_block": rows_per_call}, embedding, progress)
    finally:
        if started_ray:
            ray.shutdown()
    writers.write_json(job.work / MANIFEST_FILE, new_record("ray manifest", options=recorded, files=job.state["files"]))
    writers.replace_folder(job.work, output)  # a previous output stays whole until this one is complete
    writers.end_job(output)
    job.summary.seconds = time.perf_counter() - started
    return job.summary


def _plan_file(job: _Job, path: Path, reading: dict) -> None:
    """Skip a file the job's record holds as complete; otherwise queue it with its row count."""
    if path.stem in job.state["files"]:  # recorded once its folder was in place, whole
        job.summary.skipped.append(path.stem)
    else:
        job.pending[path] = {
            "input": str(path.resolve()),
            "sha256": job.job["inputs"][str(path.resolve())],
            "rows": sum(1 for _ in file_rows(path, **reading)),  # all checked: the written rows must match it
            "output": path.stem,
        }


def _write_empty(job: _Job, dim: int, id_column: str | int | None) -> None:
    """Clear the staging folders; a file with no rows gets an empty output with the right schema, without Ray."""
    for path, entry in list(job.pending.items()):
        writers.remove_output(job.staging(path))
        job.staging(path).mkdir()
        if entry["rows"] == 0:
            id_type = pa.int64() if id_column is None else pa.string()
            empty = pa.table({"id": pa.array([], id_type), "vector": pa.array([], pa.list_(pa.float32(), dim))})
            pq.write_table(empty, job.staging(path) / "part-000000000000.parquet")
            job.summary.empty.append(path.stem)
            job.finish(path)


def connect(address: str | None = None, ray_logs: bool = True) -> bool:
    """Join the Ray cluster at `address` (default: RAY_ADDRESS, else a new local Ray); True when this call started it.

    ray_logs=False keeps Ray's own messages off the terminal (they stay in /tmp/ray/session_latest/logs). A head on
    this machine gets this machine's token (~/.ray/auth_token); any other needs RAY_AUTH_MODE=token.
    """
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or "local"  # never a stale `ray start` address by surprise
    if not ray_logs:
        quiet_ray()
    host = address.split("://")[-1].rsplit(":", 1)[0]
    if maybe_enable_token_auth_if_token_available is not None and host in _local_hosts():
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    try:
        ray.init(address=address, include_dashboard=False, configure_logging=False, log_to_driver=ray_logs)
    except ConnectionError as exc:
        raise InputError(
            f"cannot join the Ray cluster at {address} ({exc}). Check the address (`ray status` on the "
            "head); a cluster with token auth needs RAY_AUTH_MODE=token and its token "
            "(RAY_AUTH_TOKEN or ~/.ray/auth_token)."
        ) from None
    return True


def _local_hosts() -> set[str]:
    hosts = {"127.0.0.1", "localhost", socket.gethostname(), ray.util.get_node_ip_address()}  # Ray's own: its route out
    with contextlib.suppress(OSError):
        hosts |= {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)}
    return hosts


def _stream_files(job: _Job, work: dict[str, Path], reader: dict, embedding: dict, progress: bool | None) -> None:
    """Stream the files (read → embed → write parts), closing each as soon as its rows are all written.

    `embedding`: `embed_dataset`'s options, model, precision, encoder and batch_size.
    """
    plan = job.summary.resources
    for path in work.values():
        job.pending[path]["device"] = plan.device
    counts = {name: job.pending[path]["rows"] for name, path in work.items()}
    ds = ray.data.read_datasource(FileRowsDatasource(counts, **reader), num_cpus=plan.io_cpus)
    ds = embed_dataset(
        ds,
        "text",
        **embedding,
        actors=plan.actors,
        cpus_per_actor=plan.cpus_per_actor,
        gpus_per_actor=plan.gpus_per_actor,
        rows_per_call=reader["rows_per_block"],
    )
    staging = {name: str(job.staging(path)) for name, path in work.items()}
    ds = ds.map_batches(
        _write_parts, fn_kwargs={"staging": staging}, batch_format="pyarrow", batch_size=None, num_cpus=plan.io_cpus
    )
    done = dict.fromkeys(work, 0)
    reporter = Progress("embed", sum(counts.values()), "rows", show=progress, min_total=PROGRESS_MIN_ROWS)
    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            for name, rows in zip(batch.column("path").to_pylist(), batch.column("rows").to_pylist()):
                done[name] += rows
                reporter.update(rows)
                if done[name] > counts[name]:
                    raise BertkitError(f"{work[name]}: more rows written ({done[name]}) than it has ({counts[name]}).")
                if done[name] == counts[name]:
                    job.finish(work[name])
    except Exception as exc:  # a user error inside an actor comes back wrapped in Ray's exceptions: unwrap it
        cause = _bertkit_cause(exc)
        if cause is not None and cause is not exc:
            raise cause from None
        raise
    finally:
        reporter.close()
    short = [f"{work[n]} ({done[n]} of {counts[n]} rows)" for n in done if done[n] != counts[n]]
    if short:
        raise BertkitError(f"rows were lost on the way: {', '.join(short)}; those outputs were not kept. Run again.")


def _bertkit_cause(exc: BaseException) -> BertkitError | None:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, BertkitError):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
    return None


def quiet_ray() -> None:
    """Ray's Python loggers to errors only, Ray Data's console to warnings (its log file keeps everything)."""
    import logging

    logging.getLogger("ray").setLevel(logging.ERROR)
    for handler in logging.getLogger("ray.data").handlers:
        if not isinstance(handler, logging.FileHandler) and "File" not in type(handler).__name__:
            handler.setLevel(logging.WARNING)
