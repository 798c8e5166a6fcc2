"""`bertkit search`: the vectors of a file written by `bertkit embed`, searched for queries embedded the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError
from .common import DeviceOption, ThreadsOption, app, say

# Library imports sit inside the command: `bertkit --help` loads none of them (start-up speed).


@app.command()
def search(
    index: Path = typer.Argument(..., help="A .npz or .parquet file written by `bertkit embed` (vectors, ids)."),
    queries: list[str] = typer.Argument(..., help="One or more queries."),
    top_k: int = typer.Option(10, "--top-k", "-k", help="Results per query."),
    metric: str = typer.Option("cosine", "--metric", help="cosine | dot | euclidean | manhattan"),
    prompt: Optional[str] = typer.Option(None, "--prompt", help="Text put before each query, e.g. 'query: '."),
    prompt_name: Optional[str] = typer.Option(
        None, "--prompt-name", help="One of the model's named prompts for the queries (e.g. query)."
    ),
    threads: Optional[int] = ThreadsOption,
    device: str = DeviceOption,
) -> None:
    """Exact similarity search: each query, embedded with the index's own model and options (layers, pooling,
    dimensions, normalization, int8 ranges), against every vector; a binary index by Hamming distance, then
    rescored. Prints query, rank, id, score."""
    from ..encoder.encode import Encoder
    from ..encoder.options import EmbedOptions
    from ..io.stream import read_vectors
    from ..tasks.search import semantic_search

    vectors, ids, meta = read_vectors(index)
    if not meta.get("model"):
        raise InputError(
            f"{index} does not say how its vectors were made (written before bertkit 0.2); embed the "
            "file again with `bertkit embed ... -o FILE.npz`."
        )
    model = None if meta["model"] == "default" else meta["model"]
    encoder = Encoder.from_pretrained(model, device=device, precision=meta.get("precision", "fp32"))
    if encoder.fingerprint != meta.get("fingerprint"):
        raise InputError(
            f"{index} was embedded by model {meta['model']!r} with other weights (fingerprint "
            f"{meta.get('fingerprint')}, now {encoder.fingerprint}): its vectors and a query's would not "
            "compare. Embed the file again."
        )
    recorded = EmbedOptions.from_record(meta)  # how the index's vectors were made: the queries alike, in float32
    options = recorded.replace(prompt=prompt, prompt_name=prompt_name, output_type="float32", long_text="truncate")
    found = encoder.embed(queries, options, warn=False)
    if meta.get("output") in ("int8", "uint8"):  # the queries in the index's buckets, compared as the index is
        from ..encoder.compact import compact

        found = compact(found, meta["output"], meta["ranges"]).astype("float32")
        found = found - 128 if meta["output"] == "uint8" else found
    results = semantic_search(found, vectors, top_k=top_k, metric=metric)
    say(
        f"{len(vectors)} vectors of {index.name} ({meta.get('output', 'float32')}, {meta.get('layers')} / "
        f"{meta.get('pooling')}); {len(queries)} quer{'ies' if len(queries) != 1 else 'y'}"
    )
    typer.echo("query\trank\tid\tscore")
    for query, hits in zip(queries, results):
        for rank, hit in enumerate(hits, start=1):
            typer.echo(f"{query}\t{rank}\t{ids[hit['corpus_id']]}\t{hit['score']:.4f}")
