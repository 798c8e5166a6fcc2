"""Checkpoints and the finished run: safetensors + JSON (no pickle), swapped into place so a crash never leaves
half of one."""

from __future__ import annotations

import json
import logging
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
from .arguments import CHECKPOINT, LOGS, TrainingState

logger = logging.getLogger(__name__)


def check_output(output: Path, resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise InputError("--resume continues a run and --overwrite starts over: give one of them.")
    recover_interrupted_replace(output)
    if resume:
        if (output / CONFIG_FILE).is_file():
            raise InputError(f"{output}: this run already finished; nothing to resume (--overwrite trains it again).")
        if (
            not (output / CHECKPOINT / "state.json").is_file()
            and not (previous_version(output / CHECKPOINT) / "state.json").is_file()
        ):
            raise InputError(f"{output}: no checkpoint to resume from; start the run without --resume.")
        return
    if output.exists() and not overwrite and (output / CHECKPOINT).exists() and not (output / CONFIG_FILE).exists():
        raise InputError(
            f"{output} holds an unfinished run; pass --resume to continue it or --overwrite to start over."
        )
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


def save_checkpoint(
    directory: Path,
    accelerator,
    network,
    optimizer,
    scheduler,
    state: TrainingState,
    run_record: dict,
    best_metrics: dict | None = None,
) -> None:
    """Write weights, optimizer moments, every process's RNG state and progress to a fresh directory, then swap it
    in (the main process writes; the others hand it their RNG state and wait)."""
    from accelerate.utils import gather_object

    rng_states = gather_object([_rng_state(accelerator.device)])
    if accelerator.is_main_process:
        with staged_directory(directory) as staging:
            _write_checkpoint(
                staging,
                directory,
                accelerator,
                network,
                optimizer,
                scheduler,
                state,
                run_record,
                best_metrics,
                rng_states,
            )
    accelerator.wait_for_everyone()


def _rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _write_checkpoint(
    staging: Path,
    directory: Path,
    accelerator,
    network,
    optimizer,
    scheduler,
    state: TrainingState,
    run_record: dict,
    best_metrics: dict | None,
    rng_states: list,
) -> None:
    model = accelerator.unwrap_model(network)
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(weights, str(staging / "model.safetensors"))
    previous_best = directory / "best.safetensors"
    if best_metrics is not None:
        save_file(weights, str(staging / "best.safetensors"))
        (staging / "best_metrics.json").write_text(json.dumps(best_metrics, indent=2), encoding="utf-8")
    elif previous_best.exists():
        shutil.copy2(previous_best, staging / "best.safetensors")
        shutil.copy2(directory / "best_metrics.json", staging / "best_metrics.json")
    optimizer_state = optimizer.state_dict()
    tensors = {f"rng.{rank}.{kind}": value for rank, states in enumerate(rng_states) for kind, value in states.items()}
    for index, values in optimizer_state["state"].items():
        for name, value in values.items():
            value = value.detach().contiguous().cpu() if torch.is_tensor(value) else torch.tensor(value)
            tensors[f"optimizer.{index}.{name}"] = value
    save_file(tensors, str(staging / "optimizer.safetensors"))
    scaler = accelerator.scaler.state_dict() if accelerator.scaler is not None else None
    record = {
        "state": asdict(state),
        "run": run_record,
        "param_groups": optimizer_state["param_groups"],
        "scheduler": scheduler.state_dict(),
        "grad_scaler": scaler,
        "processes": len(rng_states),
    }
    (staging / "state.json").write_text(json.dumps(record, indent=2), encoding="utf-8")


def load_checkpoint(directory: Path, accelerator, network, optimizer, scheduler) -> None:
    """Put a checkpoint back: weights, optimizer, schedule, gradient scaler and this process's RNG state."""
    record = json.loads((directory / "state.json").read_text(encoding="utf-8"))
    accelerator.unwrap_model(network).load_state_dict(load_file(str(directory / "model.safetensors")))
    tensors = load_file(str(directory / "optimizer.safetensors"))
    moments: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            moments.setdefault(int(index), {})[name] = value.to(accelerator.device)
    optimizer.load_state_dict({"state": moments, "param_groups": record["param_groups"]})
    scheduler.load_state_dict(record["scheduler"])
    if accelerator.scaler is not None and record.get("grad_scaler"):
        accelerator.scaler.load_state_dict(record["grad_scaler"])
    rank = accelerator.process_index
    if record.get("processes", 1) != accelerator.num_processes:
        logger.warning(
            "this run was checkpointed with %s processes and resumes with %d: dropout draws differ from an "
            "uninterrupted run.",
            record.get("processes", 1),
            accelerator.num_processes,
        )
    torch.set_rng_state(tensors.get(f"rng.{rank}.torch", tensors.get("rng.0.torch", tensors.get("rng.torch"))))
    if accelerator.device.type == "cuda" and f"rng.{rank}.cuda" in tensors:
        torch.cuda.set_rng_state(tensors[f"rng.{rank}.cuda"], accelerator.device)


def learned_anything(baseline: dict | None, best: float | None, metric_name: str) -> dict | None:
    """Compare the best dev score with the majority baseline; a run no better than it is saved with a warning."""
    if baseline is None:
        return None
    learned = best is not None and best > baseline["score"] + 1e-9
    if not learned:
        logger.warning(
            f"the best dev {metric_name} ({best or 0:.4f}) is no better than {baseline['what']} "
            f"({baseline['score']:.4f}): the model learned nothing useful. Try more epochs (--epochs), a higher "
            "learning rate (--lr), or more training data."
        )
    return {**baseline, "learned": learned}


def write_final(output: Path, network, tokenizer, metric_name: str, state: TrainingState, run_record: dict):
    """Replace `output` by the best epoch's weights as a transformers model + tokenizer + bertkit.json (checkpoint
    gone)."""
    checkpoint = output / CHECKPOINT
    network.load_state_dict(load_file(str(checkpoint / "best.safetensors")))
    metrics = json.loads((checkpoint / "best_metrics.json").read_text(encoding="utf-8"))
    history = state.history
    seen = sum(h["examples_per_second"] * h["seconds"] for h in history)
    record = {
        "kind": KIND_TOKEN if run_record["task"] == "token" else KIND_TEXT,
        "precision": "fp32",  # trained and evaluated in fp32; loading at another precision warns
        "bertkit_version": package_version("bertkit"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **run_record,
        "training": {
            "epochs_run": state.epoch,
            "best_epoch": state.best_epoch,
            "stopped_early": state.finished,
            "history": history,
            "train_seconds": round(state.train_seconds, 1),
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
        if (output / LOGS).is_dir():  # metrics.jsonl and the trackers' files stay with the run
            shutil.copytree(output / LOGS, staging / LOGS)
    logger.info(f"saved {output}: best epoch {state.best_epoch} (dev {metric_name} {state.best_score:.4f})")
    loader = FineTunedTagger if run_record["task"] == "token" else FineTunedClassifier
    return loader.load(output)
