"""`bertkit quantize`: int8 calibrated on your own texts, written as a copy of the model or fine-tuned run."""

from __future__ import annotations

from pathlib import Path

import typer

from ..io.readers import column_spec
from .common import HeaderOption, OverwriteOption, ThreadsOption, app, existing_text_file, say


@app.command()
def quantize(
    model: str | None = typer.Argument(
        None,
        help="A model directory or hub name (omit for the packaged default), or a `bertkit finetune` run directory.",
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="New directory: a copy of MODEL with its int8 calibration."
    ),
    calibration: Path | None = typer.Option(
        None,
        "--calibration",
        callback=existing_text_file,
        help="Texts to calibrate on (TSV/CSV/JSONL/text), "
        "like the ones you will embed; default: bertkit's packaged sentences.",
    ),
    column: str | None = typer.Option(None, "--column", "-c", help="Text column of --calibration."),
    header: bool | None = HeaderOption,
    limit: int = typer.Option(512, "--limit", help="Calibrate on the first N texts (0 = all)."),
    overwrite: bool = OverwriteOption,
    threads: int | None = ThreadsOption,
    device: str | None = typer.Option(
        None, "--device", help="Refused unless cpu: int8 is a CPU precision, calibrated and run on the CPU."
    ),
) -> None:
    """Calibrate precision='int8' on your texts.

    Then `--model DIR --precision int8` (or the run) uses that calibration.
    """
    from ..encoder.int8 import packaged_texts
    from ..errors import InputError
    from ..io.readers import read_texts
    from ..tasks.quantize import quantize as quantize_model

    if device not in (None, "cpu"):
        raise InputError(
            f"--device {device}: quantize calibrates precision='int8', which runs on the CPU only (oneDNN's VNNI/AMX "
            "int8 kernels; torch has no int8 path for these layers on GPUs). Leave --device out; on a GPU use "
            "--precision fp16 or bf16 instead."
        )

    texts = packaged_texts() if calibration is None else read_texts(calibration, column_spec(column), header=header)[0]
    texts = texts[:limit] if limit else texts
    report = quantize_model(model, output, texts, overwrite=overwrite)
    say(
        f"calibrated on {report.texts} texts ({report.smoothed} groups of linear layers smoothed, strength "
        f"{report.alpha:g}); {report.fidelity}"
    )
    how = f"--model {report.output}" if report.kind == "encoder" else f"bertkit predict/evaluate {report.output}"
    typer.echo(f"wrote {report.output}: use it with --precision int8 ({how}).")
