"""`bertkit search` (queries against a vectors file of `bertkit embed`, or an index) and `bertkit index`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..errors import InputError, no_such_path
from .common import DeviceOption, ThreadsOption, app, options_for, say, utf8_texts

if TYPE_CHECKING:
    from ..encoder.encode import Encoder


@app.command()
def search(
    index: Path = typer.Argument(
        ..., help="A .npz or .parquet file written by `bertkit embed`, or an index written by `bertkit index`."
    ),
    queries: list[str] = typer.Argument(..., callback=utf8_texts, help="One or more queries."),
    top_k: int = typer.Option(10, "--top-k", "-k", help="Results per query."),
    metric: str | None = typer.Option(
        None, "--metric", help="cosine (default) | dot | euclidean | manhattan; an index answers by its own."
    ),
    rescore_multiplier: int | None = typer.Option(
        None,
        "--rescore-multiplier",
        help="int8/binary vectors: rescore top-k × this many candidates with the float query (0: none; default: "
        "the measured best trade-off, 4).",
    ),
    prompt: str | None = typer.Option(
        None, "--prompt", callback=utf8_texts, help="Text put before each query, e.g. 'query: '."
    ),
    prompt_name: str | None = typer.Option(
        None, "--prompt-name", help="One of the model's named prompts for the queries (e.g. query)."
    ),
    threads: int | None = ThreadsOption,
    device: str = DeviceOption,
) -> None:
    """Run a similarity search of each query against a vectors file (exact) or an index (approximate, HNSW).

    Each query is embedded with the vectors' own model and options (layers, pooling, dimensions, normalization). A
    vectors file is searched exactly: int8 by integer products, binary by Hamming distance, then rescored. Prints
    query, rank, id, score.
    """
    from ..encoder.encode import Encoder
    from ..io.stream import read_vectors
    from ..tasks.index import load_index, read_index_meta
    from ..tasks.search import embed_queries, rescore_multiplier_for, semantic_search

    if not index.exists():
        raise no_such_path(index)
    loaded = load_index(index) if read_index_meta(index) is not None else None
    if loaded is not None:
        vectors, ids, meta = None, loaded.ids, loaded.meta
    elif index.suffix.lower() in (".npz", ".parquet"):
        vectors, ids, meta = read_vectors(index)
    else:
        raise InputError(
            f"{index} is neither a vectors file of `bertkit embed` (.npz, .parquet) nor an index of `bertkit index`; "
            "give one of those (build an index with `bertkit index VECTORS -o NAME.index`)."
        )
    if not meta.get("model"):
        raise InputError(
            f"{index} does not say how its vectors were made (written before bertkit 0.2); embed the "
            "file again with `bertkit embed ... -o FILE.npz`."
        )
    model = None if meta["model"] == "default" else meta["model"]
    encoder = Encoder.from_pretrained(model, device=device, precision=meta.get("precision", "fp32"))
    found = embed_queries(encoder, queries, meta, source=str(index), prompt=prompt, prompt_name=prompt_name)
    output = meta.get("output", "float32")
    multiplier = rescore_multiplier_for(output, rescore_multiplier)
    if loaded is not None:
        results = loaded.search(found, top_k, metric=metric, rescore_multiplier=rescore_multiplier)
        how = f"approximate search (HNSW, {loaded.metric})"
    else:
        results = semantic_search(
            found, vectors, top_k, metric, rescore_multiplier=rescore_multiplier, ranges=meta.get("ranges")
        )
        how = f"exact search ({metric or 'cosine'})"
    say(
        f"{len(ids)} vectors of {index.name} ({output}, {meta.get('layers')} / {meta.get('pooling')}); {how}"
        f"{_compact_note(output, multiplier, top_k, meta, encoder)}; {len(queries)} "
        f"quer{'ies' if len(queries) != 1 else 'y'}"
    )
    typer.echo("query\trank\tid\tscore")
    for query, hits in zip(queries, results):
        for rank, hit in enumerate(hits, start=1):
            typer.echo(f"{query}\t{rank}\t{ids[hit['corpus_id']]}\t{hit['score']:.4f}")


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
    from ..encoder.options import EmbedOptions

    packaged = calibration_ranges(encoder, EmbedOptions.from_record(meta))
    source = "the packaged calibration sentences" if np.allclose(packaged, meta["ranges"]) else "its own calibration"
    return f"; {output} ranges from {source}, {rescoring}"


@app.command("index")
def index_command(
    ctx: typer.Context,
    vectors: Path = typer.Argument(..., help="A .npz or .parquet file written by `bertkit embed`."),
    output: Path = typer.Option(..., "--output", "-o", help="The index file to write (or extend)."),
    metric: str = typer.Option("cosine", "--metric", help="cosine | dot | euclidean"),
    m: int = typer.Option(32, "--m", help="HNSW links per vector (more: better recall, more memory)."),
    ef_construction: int = typer.Option(100, "--ef-construction", help="HNSW build breadth."),
    ef_search: int | None = typer.Option(
        None, "--ef-search", help="HNSW search breadth, the default of later searches [default: 64, or the index's]."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace what is at -o (an index is rebuilt from scratch; another file replaced)."
    ),
) -> None:
    """Build an approximate index (HNSW, faiss) of a vectors file, for `bertkit search INDEX "query"`.

    An index of the same vectors at -o is extended with the rows it lacks (an interrupted build resumes); anything
    else there is replaced only with --overwrite. Needs `pip install 'bertkit[index]'`.
    """
    from ..tasks.index_build import build_index

    def progress(done: int, total: int) -> None:
        say(f"{done}/{total} vectors indexed")

    report = build_index(vectors, **options_for(ctx, build_index, on_progress=progress))
    resumed = f", after the {report.resumed_from} already there" if report.resumed_from else ""
    say(f"{output}: {report.rows} vectors ({report.added} added{resumed}) in {report.seconds:.1f} s")
