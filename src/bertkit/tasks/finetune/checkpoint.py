"""The run directory: `Trainer`'s checkpoints while training (the job's record beside it), the finished run after.

A checkpoint is complete once its `trainer_state.json` is written (Trainer writes it last).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import InputError
from ...io import writers
from ...io.writers import end_job, job_path, read_job, replace_folder, save_job
from ...records import new_record, package_version
from ..runs import CONFIG_FILE, write_run
from .settings import LOGS

logger = logging.getLogger(__name__)
CHECKPOINT = re.compile(r"checkpoint-([0-9]+)")
RESUMED_KEYS = ("task", "args", "labels", "max_length", "data", "base_model")  # what makes a run this run


def check_output(output: Path, resume: bool, overwrite: bool, inputs: Sequence[str | Path | None] = ()) -> None:
    """Refuse what would lose work, touch an input or mix two runs, before anything is read or written.

    A run trains in `<output>.partial` (its job's record beside it) and replaces `output` only once complete, so an
    interrupted `--overwrite` leaves the old run loadable and `--resume` continues the new one.
    """
    if resume and overwrite:
        raise InputError("--resume continues a run and --overwrite starts over: give one of them.")
    unfinished = job_path(output).is_file()
    if resume and not unfinished:
        if (output / CONFIG_FILE).is_file():
            raise InputError(f"{output}: this run already finished; nothing to resume (--overwrite trains it again).")
        raise InputError(f"{output}: no checkpoint to resume from; start the run without --resume.")
    if unfinished and not resume and not overwrite:
        raise InputError(
            f"{output} holds an unfinished run; pass --resume to continue it or --overwrite to start over."
        )
    writers.check_job_output(output, overwrite, inputs)


def last_checkpoint(output: Path) -> Path | None:
    """Find the newest complete checkpoint of a run; newer ones a kill cut short are set aside (`.incomplete-*`)."""
    found = sorted(
        (int(match[1]), path)
        for path in output.glob("checkpoint-*")
        if (match := CHECKPOINT.fullmatch(path.name)) and path.is_dir()
    )
    for _, path in reversed(found):
        try:
            json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
            return path
        except (OSError, ValueError):
            logger.info("%s was cut short (no trainer_state.json): set aside", path)
            replace_folder(path, output / f".incomplete-{path.name}")
    return None


def start_run(output: Path, run_record: dict, resume: bool) -> Path:
    """Record a new run's job and make its work folder, or check that a resumed run is the same command (`read_job`).

    Returns the work folder, where the run trains until `write_final` puts it at `output`.
    """
    job = {"command": "finetune", **{key: run_record[key] for key in RESUMED_KEYS}}
    work = writers.work_folder(output)
    if resume:
        read_job(output, job)
        return work
    writers.remove_output(work)  # an unfinished run of this output, started over (`check_output` allowed it)
    save_job(output, job, {})  # first: the work folder is never there without its job's record
    work.mkdir(parents=True)
    return work


def learned_anything(baseline: dict | None, best: float | None, metric_name: str) -> dict | None:
    """Compare the best dev score with the baseline; a run no better (or within `margin`) is saved with a warning."""
    if baseline is None:
        return None
    margin = baseline.get("margin", 0.0)
    learned = best is not None and best > baseline["score"] + margin + 1e-9
    if not learned:
        closeness = "no better than" if not margin else f"within {margin:g} points of"
        advice = baseline.get("advice") or "Try more epochs (--epochs), a higher learning rate (--lr), or more data."
        logger.warning(
            "the best dev %s (%.4f) is %s %s (%.4f): the model learned nothing useful. %s",
            metric_name,
            best or 0,
            closeness,
            baseline["what"],
            baseline["score"],
            advice,
        )
    return {**baseline, "learned": learned}


def write_final(
    output: Path, work: Path, network: Any, runner: Any, run_record: dict, training: dict, metrics: dict
) -> Any:
    """Replace `output` by the trained `network` (the best epoch) + the runner's tokenizer + bertkit.json.

    The work folder's checkpoints go, its logs stay with the run; the run loads back as the runner's class.
    """
    best = training["best_score"]
    record = new_record(
        runner.KIND,
        precision="fp32",  # trained and evaluated in fp32; loading at another precision warns
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
        **{
            **run_record,
            "training": training,
            "metrics": metrics,
            "baseline": learned_anything(run_record.get("baseline"), best, training["metric"]),
            "versions": {name: package_version(name) for name in ("torch", "transformers", "tokenizers")},
        },
    )
    logs = {LOGS: work / LOGS} if (work / LOGS).is_dir() else {}  # metrics.jsonl and the trackers' files stay
    write_run(output, {CONFIG_FILE: record, **logs}, weights=(network, runner.tokenizer), checked=True)
    end_job(output)
    shutil.rmtree(work, ignore_errors=True)
    logger.info("saved %s: best epoch %s (dev %s %.4f)", output, training["best_epoch"], training["metric"], best)
    # on torch, as it was trained: its OpenVINO graph is made when a user first loads it (`load_run`), not here
    return type(runner).from_pretrained(output, engine="torch")
