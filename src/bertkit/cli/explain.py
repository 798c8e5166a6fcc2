"""The explain command: one sentence's path through the model as a self-contained HTML page (opens offline)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..encoder.options import EmbedOptions
from ..errors import InputError
from ..explain.request import ExplainRequest
from .common import app, say, utf8_texts
from .options import Device, Generated, MapTexts, Model, Output, Overwrite, Pair, Runs, from_fields


@app.command()
@from_fields(
    ExplainRequest,
    "request",
    only=("compare", "attributions"),
    build=True,
    defaults={"attributions": True},
)
@from_fields(EmbedOptions, "options", only=("layers", "pooling", "max_length"))
def explain(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(callback=utf8_texts, help="The sentence to explain.")],
    output: Output = Path("explain.html"),
    run: Runs = None,
    pair: Pair = None,
    map_texts: MapTexts = False,
    model: Model = None,
    device: Device = "auto",
    overwrite: Overwrite = False,
    options: Generated = None,
    request: Generated = None,
) -> None:
    """Write the visual guide for TEXT as one HTML file: tokens, layers, attention, vector, map, prediction, probe.

    Which words made each score (the cosine to --compare, each run's prediction) is drawn unless --no-attributions.

    --pair: a second text read with TEXT (a pair run's pair; a QA run's context); --max-length pads the token table.
    """
    from ..io.writers import atomic_path, check_output, check_writable_location

    check_output(check_writable_location(output), overwrite)  # before the heavy imports
    from ..explain.explainer import Explainer
    from ..explain.page import offline_page

    explainer = Explainer.from_paths(model, run or [], device=device)
    explainer.map_texts = map_texts
    # every layer, attention layer and head: the file switches between them with no server
    every = {"layer": "all", "attention_layer": "all", "head": "all"}
    chosen = dict(layers=options.layers, pooling=options.pooling, pad_to=options.max_length)
    settings = request(text=text, pair=pair, **chosen, **every)
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
