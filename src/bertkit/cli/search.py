"""`bertkit search` (queries against a vectors file of `bertkit embed`, or an index) and `bertkit index`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..encoder.options import EmbedOptions
from ..errors import InputError, no_such_path
from .common import app, make_encoder, options_for, say, utf8_texts, verbosity
from .options import Device, Generated, Metric, Model, Output, Overwrite, Threads, TopK, flag_of, from_fields

if TYPE_CHECKING:
    from ..encoder.encode import Encoder

NPY_OPTIONS = ("layers", "pooling", "normalize_embeddings", "truncate_dim")  # what a bare .npy cannot record


@app.command()
@from_fields(EmbedOptions, "options", only=("prompt", "prompt_name", *NPY_OPTIONS))
def search(
    index: Path = typer.Argument(
        ...,
        help="A vectors file written by `bertkit embed` (.npz, .parquet: they record their model and options; .npy: "
        "give --model and the options you embedded with, if not the defaults), or an index of `bertkit index`.",
    ),
    queries: list[str] = typer.Argument(..., callback=utf8_texts, help="One or more queries."),
    top_k: TopK = 10,
    metric: Metric = None,
    rescore_multiplier: int | None = typer.Option(
        None,
        help="int8/binary vectors: rescore top-k × this many candidates with the float query (0: none; default: "
        "the measured best trade-off, 4).",
    ),
    model: Model = None,
    threads: Threads = None,
    device: Device = "auto",
    options: Generated = None,
) -> None:
    """Run a similarity search of each query against a vectors file (exact) or an index (approximate, HNSW).

    Each query is embedded with the vectors' own model and options (layers, pooling, dimensions, normalization). A
    vectors file is searched exactly: int8 by integer products, binary by Hamming distance, then rescored. A .npy
    records nothing: its rows are numbered from 0 and taken as --model and the options given make them. Prints
    query, rank, id, score.
    """
    from ..tasks.engine import rescore_multiplier_for
    from ..tasks.index import load_index, model_named, npy_index, read_index_meta

    if not index.exists():
        raise no_such_path(index)
    bare = index.suffix.lower() == ".npy"
    if read_index_meta(index) is None and index.suffix.lower() not in (".npz", ".parquet", ".npy"):
        raise InputError(
            f"{index} is neither a vectors file of `bertkit embed` (.npz, .parquet, .npy) nor an index of `bertkit "
            "index`; give one of those (build an index with `bertkit index VECTORS -o NAME.index`)."
        )
    defaults = EmbedOptions()
    given = [name for name in NPY_OPTIONS if getattr(options, name) != getattr(defaults, name)]
    if not bare and (given or model):
        fields = {field.name: field for field in dataclasses.fields(EmbedOptions)}
        flags = ", ".join([*(flag_of(fields[name]).split("/")[0] for name in given), *(["--model"] if model else [])])
        raise InputError(
            f"{index} records the model and options its vectors were made with, and queries are embedded with them: "
            f"{flags} {'are' if ', ' in flags else 'is'} for a .npy, which records nothing."
        )
    if bare:
        encoder = make_encoder(model, "fp32", device)
        loaded = npy_index(index, encoder, options.replace(prompt=None, prompt_name=None))
        meta = loaded.meta
        say(
            f"{index.name} records no model or options: taken as made by {model_named(meta['model'])} with layers "
            f"{meta['layers']} and pooling {meta['pooling']} (--model and the embedding options say otherwise)"
        )
    else:
        loaded = load_index(index)
        if not loaded.meta.get("model"):  # an index made in Python from bare vectors: no model to embed queries with
            raise InputError(f"{index} does not say which model made its vectors; search it in Python with that model.")
        named = None if loaded.meta["model"] == "default" else loaded.meta["model"]
        encoder = make_encoder(named, loaded.meta.get("precision", "fp32"), device)
    ids, meta = loaded.ids, loaded.meta
    found = loaded.embed_queries(encoder, queries, prompt=options.prompt, prompt_name=options.prompt_name)
    output = meta.get("output", "float32")
    multiplier = rescore_multiplier_for(output, rescore_multiplier)
    results = loaded.search(found, top_k, metric=metric, rescore_multiplier=rescore_multiplier)
    how = f"exact search ({metric or loaded.metric})" if loaded.exact else f"approximate search (HNSW, {loaded.metric})"
    say(
        f"{len(ids)} vectors of {index.name} ({output}, {meta.get('layers')} / {meta.get('pooling')}); {how}"
        f"{_compact_note(output, multiplier, top_k, meta, encoder)}; {len(queries)} "
        f"quer{'ies' if len(queries) != 1 else 'y'}"
    )
    texts = loaded.texts
    if texts is None:
        say(f"the texts are not shown: {'a .npy keeps no record of them' if bare else _texts_missing(meta)}")
    typer.echo("query\trank\tid\tscore" + ("\ttext" if texts is not None else ""))
    for query, hits in zip(queries, results):
        for rank, hit in enumerate(hits, start=1):
            text = "\t" + " ".join(hit["text"].split()) if texts is not None else ""
            typer.echo(f"{query}\t{rank}\t{hit['id']}\t{hit['score']:.4f}{text}")


def _texts_missing(meta: dict) -> str:
    """Say why a search cannot show its rows' texts."""
    source = meta.get("texts_from")
    if not source:
        return "the vectors' record does not name the file they were embedded from"
    return f"{source['path']}, which the vectors were embedded from, is gone or has changed since"


def _compact_note(output: str, multiplier: int, top_k: int, meta: dict, encoder: Encoder) -> str:
    """Say what a search of compact vectors did: the rescoring, and where int8 ranges came from."""
    if output in ("float32", "float16"):
        return ""
    rescoring = "no rescoring"
    if multiplier:
        rescoring = f"top {top_k * multiplier} rescored with the float query (rescore multiplier {multiplier})"
    if output not in ("int8", "uint8"):
        return f"; binary candidates by Hamming distance, {rescoring}"
    import numpy as np

    from ..encoder.encode import calibration_ranges

    packaged = calibration_ranges(encoder, EmbedOptions.from_record(meta))
    source = "the packaged calibration sentences" if np.allclose(packaged, meta["ranges"]) else "its own calibration"
    return f"; {output} ranges from {source}, {rescoring}"


@app.command("index")
def index_command(
    ctx: typer.Context,
    vectors: Annotated[Path, typer.Argument(help="A .npz or .parquet file written by `bertkit embed`.")],
    output: Output,
    metric: Metric = None,
    m: int = typer.Option(32, "--m", help="HNSW links per vector (more: better recall, more memory)."),
    ef_construction: int = typer.Option(100, "--ef-construction", help="HNSW build breadth."),
    ef_search: int | None = typer.Option(
        None, "--ef-search", help="HNSW search breadth, the default of later searches [default: 64, or the index's]."
    ),
    overwrite: Overwrite = False,
) -> None:
    """Build an approximate index (HNSW, faiss) of a vectors file at -o, for `bertkit search INDEX "query"`.

    An index of the same vectors at -o is extended with the rows it lacks (an interrupted build resumes); anything
    else there is replaced only with --overwrite. Needs `pip install 'bertkit[index]'`.
    """
    from ..tasks.index_build import build_index

    report = build_index(vectors, **options_for(ctx, build_index, progress=False if verbosity() == "quiet" else None))
    resumed = f", after the {report.resumed_from} already there" if report.resumed_from else ""
    say(f"{output}: {report.rows} vectors ({report.added} added{resumed}) in {report.seconds:.1f} s")
