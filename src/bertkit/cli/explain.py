"""The explain command: one sentence's path through the model as a self-contained HTML page (opens offline)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from .common import DeviceOption, FileOverwriteOption, ModelOption, app, existing_runs, options_for, say, utf8_texts


@app.command()
def explain(
    ctx: typer.Context,
    text: str = typer.Argument(..., callback=utf8_texts, help="The sentence to explain."),
    output: Path = typer.Option(Path("explain.html"), "--output", "-o", help="The HTML file to write."),
    run: list[str] | None = typer.Option(
        None,
        "--run",
        metavar="[NAME=]DIR",
        callback=existing_runs,
        help="A run or probe directory ([NAME=]DIR); repeatable.",
    ),
    layers: str = typer.Option(
        "last", "--layers", "-l", help="Sentence-vector layers: last, -2, last4:sum, all:concat, ..."
    ),
    pooling: str = typer.Option(
        "mean", "--pooling", "-p", help="Sentence-vector pooling: cls, pooler, mean, max, 'cls+mean'."
    ),
    max_length: int | None = typer.Option(
        None, "--max-length", help="Pad (and truncate) the token table to this many tokens."
    ),
    compare: str | None = typer.Option(
        None, "--compare", callback=utf8_texts, help="A second sentence: the page shows the cosine of the two vectors."
    ),
    pair: str | None = typer.Option(
        None,
        "--pair",
        callback=utf8_texts,
        help="A second text read with TEXT as one input (a pair run's pair; a QA run's context).",
    ),
    map_texts: bool = typer.Option(
        False,
        "--map-texts/--no-map-texts",
        help="Put the map's training sentences into the file (hover text); off: points and labels only.",
    ),
    model: str | None = ModelOption,
    device: str = DeviceOption,
    overwrite: bool = FileOverwriteOption,
) -> None:
    """Write the visual guide for TEXT as one HTML file: tokens, layers, attention, vector, map, prediction, probe."""
    from ..explain.explainer import Explainer, Settings
    from ..explain.page import offline_page
    from ..io.writers import atomic_path, check_output, check_writable_location

    check_output(check_writable_location(output), overwrite)  # before the model loads
    explainer = Explainer.from_paths(model, run or [], device=device)
    explainer.map_texts = map_texts
    # every layer, attention layer and head: the file switches between them with no server
    every = {"layer": "all", "attention_layer": "all", "head": "all"}
    settings = Settings.from_json(options_for(ctx, Settings, pad_to=max_length, **every))
    result = explainer.explain(settings, bounded=False)
    option_of = {"tokenization": "--max-length", "model": "--max-length", "sentence": "--layers/--pooling"}
    for name, option in option_of.items():
        if "error" in result[name]:  # an option the user gave is wrong: say so, write nothing
            raise InputError(f"{option}: {result[name]['error']}")
    if explainer.info()["map_runs"] and "error" in result["map"]:
        say(f"note: the map panel says: {result['map']['error']}", warning=True)
    with atomic_path(output) as temporary:
        temporary.write_text(offline_page(explainer.info(), result), encoding="utf-8")
    say(f"wrote {output} ({output.stat().st_size / 1e6:.1f} MB; opens offline in any browser)")
