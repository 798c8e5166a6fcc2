"""Files → per-file Parquet outputs on Ray Data, with a manifest that makes a killed run resume file by file.

One pipeline (one actor pool) covers all pending files: read_parquet / read_json / read_csv → row numbers → embed →
a write stage that writes each block as one Parquet part. Ray's write_parquet reports nothing until the whole
dataset is written, so it cannot say when one file is complete; these parts stream small counts back to the driver,
which moves a file's folder into place and records it (rows, input SHA-256, options) as soon as all its rows are in.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import shutil
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import ray
import ray.data

from ..encoder.defaults import DEFAULT_BATCH_SIZE
from ..encoder.encode import Encoder
from ..errors import BertkitError, InputError
from ..io.readers import file_sha256
from ..io.writers import atomic_path
from .dataset import (
    DEFAULT_ROWS_PER_CALL,
    Resources,
    check_options,
    cluster_resources,
    embed_dataset,
    plan_resources,
)

try:  # Ray's own switch to token mode (what `ray.init(address="auto")` uses); absent in Rays without token auth
    from ray._private.authentication.authentication_token_setup import (
        maybe_enable_token_auth_if_token_available,
    )
except ImportError:
    maybe_enable_token_auth_if_token_available = None

MANIFEST = "manifest.json"
RAY_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".ndjson": "json", ".json": "json", ".csv": "csv",
               ".tsv": "tsv", ".txt": "text"}


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
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def expand_inputs(patterns: str | Path | Sequence[str | Path]) -> list[Path]:
    """Files named by paths or glob patterns (sorted, no duplicates); a pattern that matches nothing is an error."""
    if isinstance(patterns, (str, Path)):
        patterns = [patterns]
    found: list[Path] = []
    for pattern in map(str, patterns):
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        matches = [m for m in matches if not Path(m).is_dir()]
        if not matches or not Path(matches[0]).exists():
            raise InputError(f"{pattern}: no such file" + (" matches" if glob.has_magic(pattern) else "") + ".")
        found += [Path(m) for m in matches if Path(m) not in found]
    for path in found:
        if path.suffix.lower() not in RAY_FORMATS:
            raise InputError(f"{path}: the Ray engine reads {', '.join(RAY_FORMATS)} files (by extension).")
    names = {}
    for path in found:
        other = names.setdefault(path.stem, path)
        if other != path:
            raise InputError(f"{other} and {path} would both be written to {path.stem}/; give files distinct names.")
    return found


def peek_columns(path: Path) -> tuple[list[str], bool]:
    """The column names of one input and whether it has no rows, read from its schema or first lines only."""
    kind = RAY_FORMATS[path.suffix.lower()]
    if kind == "parquet":
        try:
            meta = pq.ParquetFile(path)
        except (OSError, pa.ArrowInvalid) as exc:
            raise InputError(f"{path}: not a readable Parquet file ({exc}).") from None
        return meta.schema_arrow.names, meta.metadata.num_rows == 0
    with open(path, encoding="utf-8-sig", errors="replace") as handle:
        lines = (line for line in handle if line.strip())
        first = next(lines, None)
        if kind == "text":
            return ["text"], first is None
        if first is None:
            return [], True
        if kind == "json":
            try:
                record = json.loads(first)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}, first record: not valid JSON ({exc.msg}).") from None
            if not isinstance(record, dict):
                raise InputError(f"{path}: each line must be a JSON object.")
            return list(record), False
        header = next(csv.reader([first], delimiter="\t" if kind == "tsv" else ","))
        return [name.strip() for name in header], next(lines, None) is None


def check_columns(path: Path, column: str, id_column: str | None) -> bool:
    """Refuse a missing text or id column, naming the file and its columns; True when the file has no rows."""
    names, empty = peek_columns(path)
    for wanted in [column] + ([id_column] if id_column is not None else []):
        if not empty and wanted not in names:
            kind = "field" if path.suffix.lower() in (".jsonl", ".ndjson", ".json") else "column"
            raise InputError(f"{path}: no {kind} named {wanted!r}; it has {names}. Pass --column / --id-column.")
    return empty


def count_rows(path: Path) -> int:
    """Rows of one input counted on the driver, independently of Ray: the figure the written rows must match."""
    kind = RAY_FORMATS[path.suffix.lower()]
    if kind == "parquet":
        return pq.ParquetFile(path).metadata.num_rows
    if kind in ("csv", "tsv"):
        with pa_csv.open_csv(path, parse_options=_csv_options(kind)) as reader:
            return sum(batch.num_rows for batch in reader)
    with open(path, encoding="utf-8", errors="replace") as handle:  # JSON lines; text as read_text drops blank lines
        return sum(1 for line in handle if line.strip())


def _csv_options(kind: str) -> pa_csv.ParseOptions:
    return pa_csv.ParseOptions(delimiter="\t", quote_char=False) if kind == "tsv" else pa_csv.ParseOptions()


def read_files(paths: list[Path], io_cpus: float = 1.0) -> ray.data.Dataset:
    """Input files of one format as a Ray Dataset with a `path` column, read by the Ray Data reader it calls for."""
    kind = RAY_FORMATS[paths[0].suffix.lower()]
    names = [str(path.resolve()) for path in paths]
    common = {"include_paths": True, "num_cpus": io_cpus}
    if kind == "parquet":
        return ray.data.read_parquet(names, **common)
    if kind == "json":
        return ray.data.read_json(names, file_extensions=None, **common)
    if kind == "text":
        return ray.data.read_text(names, drop_empty_lines=True, **common)
    return ray.data.read_csv(names, parse_options=_csv_options(kind), file_extensions=None, **common)


class _RowNumbers:
    """One actor that keeps the columns needed and numbers rows per input file, in file order (order is preserved)."""

    def __init__(self, columns: list[str]):
        self.columns = columns
        self.next: dict[str, int] = {}

    def __call__(self, batch: pa.Table) -> pa.Table:
        numbers = []
        for path in batch.column("path").to_pylist():
            numbers.append(self.next.get(path, 0))
            self.next[path] = numbers[-1] + 1
        return batch.select(self.columns).append_column("row", pa.array(numbers, pa.int64()))


def _write_parts(batch: pa.Table, staging: dict, id_column: str | None) -> pa.Table:
    """Write each input file's rows of this block as `<staging>/part-<first row>.parquet` (atomic); return counts."""
    paths, counts = [], []
    for path in batch.column("path").unique().to_pylist():
        part = batch.filter(pc.equal(batch.column("path"), path))
        ids = part.column("row" if id_column is None else id_column)
        target = Path(staging[path]) / f"part-{part.column('row')[0].as_py():012d}.parquet"
        with atomic_path(target) as temporary:
            pq.write_table(pa.table({"id": ids, "vector": part.column("vector")}), temporary)
        paths.append(path)
        counts.append(part.num_rows)
    return pa.table({"path": pa.array(paths, pa.string()), "rows": pa.array(counts, pa.int64())})


def _result_options(encoder: Encoder, column: str, id_column: str | None, options: dict) -> dict:
    kept = {k: options[k] for k in ("layers", "pooling", "max_length", "long_text", "stride")}
    return {"model": encoder.fingerprint, **encoder.numerics(), "column": column, "id_column": id_column,
            **kept}


def _load_manifest(output: Path, options: dict, overwrite: bool) -> dict:
    path = output / MANIFEST
    if not path.exists():
        if output.exists() and any(output.iterdir()) and not overwrite:
            raise InputError(f"{output} is not empty and has no {MANIFEST}; choose an empty -o directory or pass --overwrite.")
        return {"version": 1, "options": options, "files": {}}
    manifest = json.loads(path.read_text())
    changed = [k for k in options if manifest.get("options", {}).get(k) != options[k]]
    if changed and not overwrite:
        said = "; ".join(f"{k} was {manifest['options'].get(k)!r}, now {options[k]!r}" for k in changed)
        raise InputError(f"{output} was written with other options ({said}). Use the same options, another -o "
                         "directory, or --overwrite to start over.")
    if overwrite:  # start over: the outputs this manifest lists go, then the manifest
        for entry in manifest.get("files", {}).values():
            shutil.rmtree(output / entry["output"], ignore_errors=True)
        path.unlink()
        return {"version": 1, "options": options, "files": {}}
    return manifest


def _save_manifest(output: Path, manifest: dict) -> None:
    with atomic_path(output / MANIFEST) as temporary:
        temporary.write_text(json.dumps(manifest, indent=1, sort_keys=True))


def written_rows(directory: Path) -> int:
    """Rows in the Parquet files of one output directory, from their footers."""
    return sum(pq.ParquetFile(part).metadata.num_rows for part in sorted(directory.glob("*.parquet")))


def _is_complete(output: Path, entry: dict) -> bool:
    try:
        return (output / entry["output"]).is_dir() and written_rows(output / entry["output"]) == entry["rows"]
    except (OSError, pa.ArrowInvalid):
        return False


def embed_files(
    inputs: str | Path | Sequence[str | Path],
    output_dir: str | Path,
    *,
    column: str = "text",
    id_column: str | None = None,
    layers: str = "last",
    pooling: str = "mean",
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    long_text: str = "truncate",
    stride: int | None = None,
    precision: str = "fp32",
    model: str | None = None,
    actors: int | None = None,
    cpus_per_actor: float | None = None,
    rows_per_call: int = DEFAULT_ROWS_PER_CALL,
    address: str | None = None,
    overwrite: bool = False,
) -> RunSummary:
    """Embed every row of every input into `<output_dir>/<file stem>/part-*.parquet` (id, vector), resumably.

    One Ray Data pipeline (one actor pool) covers all pending files; each file's folder is moved into place and
    recorded in the manifest as soon as all its rows are written, so a killed run loses only unfinished files.
    """
    started = time.perf_counter()
    paths = expand_inputs(inputs)
    if id_column is not None and id_column == column:
        raise InputError(f"--id-column {id_column!r} is the text column; name another column, or leave it out for row numbers.")
    for path in paths:  # every file's columns, before any work
        check_columns(path, column, id_column)
    output = Path(output_dir)
    if output.exists() and not output.is_dir():
        raise InputError(f"-o {output} is a file; the Ray engine writes a directory (one folder per input file).")
    encoder = Encoder.from_pretrained(model, precision=precision)
    options = check_options(encoder, layers=layers, pooling=pooling, batch_size=batch_size, max_length=max_length,
                             long_text=long_text, stride=stride)
    manifest = _load_manifest(output, _result_options(encoder, column, id_column, options), overwrite)
    summary = RunSummary(output)
    pending: dict[Path, dict] = {}
    for path in paths:
        entry, digest = manifest["files"].get(path.stem), file_sha256(path)
        if entry is not None and entry["sha256"] != digest:
            raise InputError(f"{path} changed since {output / path.stem} was written from it (its SHA-256 differs); "
                             "pass --overwrite to start over.")
        if entry is not None and entry["sha256"] == digest and _is_complete(output, entry):
            summary.skipped.append(path.stem)
        else:
            pending[path] = {"input": str(path.resolve()), "sha256": digest, "rows": count_rows(path), "output": path.stem}
    output.mkdir(parents=True, exist_ok=True)
    _save_manifest(output, manifest)

    def finish(path: Path) -> None:
        entry = pending[path]
        shutil.rmtree(output / path.stem, ignore_errors=True)
        os.replace(output / f".{path.stem}.tmp", output / path.stem)
        manifest["files"][path.stem] = entry
        _save_manifest(output, manifest)
        summary.rows += entry["rows"]
        summary.files.append(path.stem)

    dim = encoder.sentence_dim(layers, pooling)
    for path, entry in pending.items():
        shutil.rmtree(output / f".{path.stem}.tmp", ignore_errors=True)
        (output / f".{path.stem}.tmp").mkdir()
        if entry["rows"] == 0:  # nothing for Ray to read: an empty output with the right schema
            id_type = pa.int64() if id_column is None else pa.string()
            empty = pa.table({"id": pa.array([], id_type), "vector": pa.array([], pa.list_(pa.float32(), dim))})
            pq.write_table(empty, output / f".{path.stem}.tmp" / "part-000000000000.parquet")
            summary.empty.append(path.stem)
            finish(path)
    work = [path for path, entry in pending.items() if entry["rows"]]
    started_ray = bool(work) and connect(address)
    try:
        if work:
            summary.resources = plan_resources(*cluster_resources(), actors, cpus_per_actor)
        for kind in sorted({RAY_FORMATS[p.suffix.lower()] for p in work}):
            group = [p for p in work if RAY_FORMATS[p.suffix.lower()] == kind]
            _run_pipeline(group, output, encoder, column, id_column, options, summary.resources, model, precision,
                          rows_per_call, {str(p.resolve()): p for p in group}, pending, finish)
    finally:
        if started_ray:
            ray.shutdown()
    summary.seconds = time.perf_counter() - started
    return summary


def connect(address: str | None = None) -> bool:
    """Join the Ray cluster at `address` (default: RAY_ADDRESS, else a new local Ray); True when this call started it.

    Ray (2.5x+) sends its token (~/.ray/auth_token) only in token mode, and never switches that on by itself for
    an explicit address. A head on this machine gets this machine's token; any other needs RAY_AUTH_MODE=token.
    """
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or "local"  # never a stale `ray start` address by surprise
    host = address.split("://")[-1].rsplit(":", 1)[0]
    if host in ("127.0.0.1", "localhost", socket.gethostname()) or host in _own_addresses():
        _use_local_token()
    try:
        ray.init(address=address, include_dashboard=False, configure_logging=False)
    except ConnectionError as exc:
        raise InputError(f"cannot join the Ray cluster at {address} ({exc}). Check the address (`ray status` on the "
                         "head); a cluster with token auth needs RAY_AUTH_MODE=token and its token "
                         "(RAY_AUTH_TOKEN or ~/.ray/auth_token).") from None
    return True


def _own_addresses() -> set[str]:
    try:
        return {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        return set()


def _use_local_token() -> None:
    if maybe_enable_token_auth_if_token_available is not None:
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)


def _run_pipeline(group, output, encoder, column, id_column, options, plan, model, precision, rows_per_call,
                  by_name, pending, finish) -> None:
    """read → number rows → embed (actor pool) → write parts; the driver closes each file once its rows are in."""
    context = ray.data.DataContext.get_current()
    kept_order, context.execution_options.preserve_order = context.execution_options.preserve_order, True
    try:
        _stream_files(group, output, encoder, column, id_column, options, plan, model, precision, rows_per_call,
                      by_name, pending, finish)
    finally:
        context.execution_options.preserve_order = kept_order


def _stream_files(group, output, encoder, column, id_column, options, plan, model, precision, rows_per_call,
                  by_name, pending, finish) -> None:
    """The pipeline itself, with order preserved so that row numbers follow each file's order."""
    ds = read_files(group, plan.io_cpus)
    ds = ds.map_batches(_RowNumbers, fn_constructor_args=(["path", column] + ([id_column] if id_column else []),),
                        batch_format="pyarrow", batch_size=None, compute=ray.data.ActorPoolStrategy(size=1), num_cpus=0)
    ds = ds.repartition(target_num_rows_per_block=rows_per_call)  # streaming: blocks small enough to share out
    ds = embed_dataset(ds, column, model=model, precision=precision, encoder=encoder, actors=plan.actors,
                       cpus_per_actor=plan.cpus_per_actor, rows_per_call=rows_per_call, **options)
    staging = {name: str(output / f".{path.stem}.tmp") for name, path in by_name.items()}
    ds = ds.map_batches(_write_parts, fn_kwargs={"staging": staging, "id_column": id_column}, batch_format="pyarrow",
                        batch_size=None, num_cpus=plan.io_cpus)
    done = {name: 0 for name in by_name}
    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            for name, rows in zip(batch.column("path").to_pylist(), batch.column("rows").to_pylist()):
                path = by_name[name]
                done[name] += rows
                if done[name] > pending[path]["rows"]:
                    raise BertkitError(f"{path}: more rows written ({done[name]}) than it has ({pending[path]['rows']}).")
                if done[name] == pending[path]["rows"]:
                    finish(path)
    except Exception as exc:  # a user error inside an actor comes back wrapped in Ray's exceptions: unwrap it
        cause = _bertkit_cause(exc)
        if cause is not None and cause is not exc:
            raise cause from None
        raise
    short = [f"{by_name[n]} ({done[n]} of {pending[by_name[n]]['rows']} rows)" for n in done if done[n] != pending[by_name[n]]["rows"]]
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
