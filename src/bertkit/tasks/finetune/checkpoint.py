"""Checkpoints and the finished run: safetensors + JSON (no pickle), swapped into place so a crash never leaves half of one."""

from __future__ import annotations

import logging
import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ...encoder.models import quiet_transformers
from ...errors import InputError
from ...io.writers import check_new_directory, previous_version, recover_interrupted_replace, staged_directory
from ..finetuned import KIND_TEXT, KIND_TOKEN, FineTunedClassifier, FineTunedTagger
from ..runs import CONFIG_FILE, package_version
from .arguments import CHECKPOINT, TrainingState

logger = logging.getLogger(__name__)


def check_output(output: Path, resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise InputError("--resume continues a run and --overwrite starts over: give one of them.")
    recover_interrupted_replace(output)
    if resume:
        if (output / CONFIG_FILE).is_file():
            raise InputError(f"{output}: this run already finished; nothing to resume (--overwrite trains it again).")
        if not (output / CHECKPOINT / "state.json").is_file() and not (previous_version(output / CHECKPOINT) / "state.json").is_file():
            raise InputError(f"{output}: no checkpoint to resume from; start the run without --resume.")
        return
    if output.exists() and not overwrite and (output / CHECKPOINT).exists() and not (output / CONFIG_FILE).exists():
        raise InputError(f"{output} holds an unfinished run; pass --resume to continue it or --overwrite to start over.")
    check_new_directory(output, overwrite)


def check_resumable(output: Path, run_record: dict) -> TrainingState:
    directory = output / CHECKPOINT
    if not (directory / "state.json").is_file():
        previous_version(directory).rename(directory)  # a crash between the two renames of save_checkpoint
    saved = json.loads((directory / "state.json").read_text(encoding="utf-8"))
    for key in ("task", "args", "labels", "max_length", "data", "base_model"):
        if saved["run"][key] != run_record[key]:
            raise InputError(
                f"{output}: the run was started with different {key} ({_diff(saved['run'][key], run_record[key])}); "
                "resume with the same command, or pass --overwrite to start over."
            )
    return TrainingState(**saved["state"])


def _diff(saved, now) -> str:
    if isinstance(saved, dict) and isinstance(now, dict):
        keys = [k for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)]
        return ", ".join(f"{k}: {saved.get(k)!r} then, {now.get(k)!r} now" for k in keys[:3])
    return f"{saved!r} then, {now!r} now"


def save_checkpoint(directory: Path, network, optimizer, scheduler, state: TrainingState, run_record: dict,
                     best_metrics: dict | None = None) -> None:
    """Write weights, optimizer moments, RNG state and progress to a fresh directory, then swap it in."""
    with staged_directory(directory) as staging:
        _write_checkpoint(staging, directory, network, optimizer, scheduler, state, run_record, best_metrics)


def _write_checkpoint(staging: Path, directory: Path, network, optimizer, scheduler, state: TrainingState,
                      run_record: dict, best_metrics: dict | None) -> None:
    weights = {k: v.detach().contiguous() for k, v in network.state_dict().items()}
    save_file(weights, str(staging / "model.safetensors"))
    previous_best = directory / "best.safetensors"
    if best_metrics is not None:
        save_file(weights, str(staging / "best.safetensors"))
        (staging / "best_metrics.json").write_text(json.dumps(best_metrics, indent=2), encoding="utf-8")
    elif previous_best.exists():
        shutil.copy2(previous_best, staging / "best.safetensors")
        shutil.copy2(directory / "best_metrics.json", staging / "best_metrics.json")
    optimizer_state = optimizer.state_dict()
    tensors = {"rng.torch": torch.get_rng_state()}
    for index, values in optimizer_state["state"].items():
        for name, value in values.items():
            tensors[f"optimizer.{index}.{name}"] = value.detach().contiguous() if torch.is_tensor(value) else torch.tensor(value)
    save_file(tensors, str(staging / "optimizer.safetensors"))
    record = {"state": asdict(state), "run": run_record, "param_groups": optimizer_state["param_groups"],
              "scheduler": scheduler.state_dict()}
    (staging / "state.json").write_text(json.dumps(record, indent=2), encoding="utf-8")


def load_checkpoint(directory: Path, network, optimizer, scheduler) -> None:
    record = json.loads((directory / "state.json").read_text(encoding="utf-8"))
    network.load_state_dict(load_file(str(directory / "model.safetensors")))
    tensors = load_file(str(directory / "optimizer.safetensors"))
    moments: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            moments.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": moments, "param_groups": record["param_groups"]})
    scheduler.load_state_dict(record["scheduler"])
    torch.set_rng_state(tensors["rng.torch"])


def learned_anything(baseline: dict | None, best: float | None, metric_name: str) -> dict | None:
    """Compare the best dev score with the majority baseline; a run no better than it is saved with a warning."""
    if baseline is None:
        return None
    learned = best is not None and best > baseline["score"] + 1e-9
    if not learned:
        logger.warning(f"the best dev {metric_name} ({best or 0:.4f}) is no better than {baseline['what']} "
            f"({baseline['score']:.4f}): the model learned nothing useful. Try more epochs (--epochs), a higher "
            "learning rate (--lr), or more training data.")
    return {**baseline, "learned": learned}


def write_final(output: Path, network, tokenizer, metric_name: str, state: TrainingState, run_record: dict):
    """Replace `output` by the best epoch's weights as a transformers model + tokenizer + bertkit.json (checkpoint gone)."""
    checkpoint = output / CHECKPOINT
    network.load_state_dict(load_file(str(checkpoint / "best.safetensors")))
    metrics = json.loads((checkpoint / "best_metrics.json").read_text(encoding="utf-8"))
    history = state.history
    seen = sum(h["examples_per_second"] * h["seconds"] for h in history)
    record = {
        "kind": KIND_TEXT if run_record["task"] == "text" else KIND_TOKEN,
        "precision": "fp32",  # trained and evaluated in fp32; loading at another precision warns
        "bertkit_version": package_version("bertkit"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **run_record,
        "training": {
            "epochs_run": state.epoch, "best_epoch": state.best_epoch, "stopped_early": state.finished,
            "history": history, "train_seconds": round(state.train_seconds, 1),
            "examples_per_second": round(seen / max(sum(h["seconds"] for h in history), 1e-9), 1),
        },
        "metrics": metrics,
        "baseline": learned_anything(run_record.get("baseline"), state.best_score, metric_name),
        "versions": {name: package_version(name) for name in ("torch", "transformers", "tokenizers")},
    }
    with staged_directory(output) as staging:
        with quiet_transformers():
            network.save_pretrained(str(staging), safe_serialization=True)
            tokenizer.save_pretrained(str(staging))
        (staging / CONFIG_FILE).write_text(json.dumps(record, indent=2), encoding="utf-8")
    logger.info(f"saved {output}: best epoch {state.best_epoch} (dev {metric_name} {state.best_score:.4f})")
    loader = FineTunedClassifier if run_record["task"] == "text" else FineTunedTagger
    return loader.load(output)
