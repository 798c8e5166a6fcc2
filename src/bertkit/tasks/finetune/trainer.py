"""The training loop: the model with its head, AdamW, the epoch loop with dev scoring, Ctrl-C held to step boundaries.

The loop is bertkit's own (benchmarks/finetune_speed.py measures it against transformers' `Trainer`); the machinery
around it is accelerate's: devices, mixed precision and its gradient scaler, several processes (`accelerate launch`,
`torchrun`: DDP, gloo on CPUs) and experiment trackers (`report_to`: TensorBoard, MLflow, W&B).

`batch_size` is the global batch of one optimizer step, whatever the number of processes and accumulation steps:
each step's examples are split into `gradient_accumulation_steps` micro-batches and each micro-batch between the
processes, and every part's loss is scaled by the units (examples, labelled tokens) of the whole step. So the same
command gives the same updates on 1 process or N, with or without accumulation (up to float rounding and dropout).
"""

from __future__ import annotations

import copy
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

from ...encoder.models import quiet_transformers
from ...errors import ModelLoadError
from ..finetuned import FineTunedClassifier, FineTunedTagger
from ..report import classification_metrics, multi_label_metrics, regression_metrics
from ..tagging import entity_scores
from .arguments import FinetuneArguments, TrainingState
from .checkpoint import save_checkpoint
from .examples import IGNORE_INDEX, Example, collate, length_grouped_batches
from .prepare import MULTI_LABEL, REGRESSION, SINGLE_LABEL, TOKENS, Prepared

logger = logging.getLogger(__name__)
METRICS_FILE = "metrics.jsonl"  # one JSON line per logged step and per epoch, in the run's logs/ folder


def build_model(encoder, task: str, labels: list[str], problem: str = SINGLE_LABEL):
    """A `...ForSequence/TokenClassification` model whose encoder weights are the loaded encoder's (head random).

    Its config says what it does (`problem_type`; a regressor has one output), and how sentence-transformers'
    `CrossEncoder` should score with it: a regressor's output as it is, a classifier's logits (softmax for
    probabilities), a multi-label classifier's through a sigmoid.
    """
    config = copy.deepcopy(encoder.model.config)
    config.num_labels = len(labels)
    config.id2label = dict(enumerate(labels))
    config.label2id = {label: i for i, label in enumerate(labels)}
    if task != "token":
        config.problem_type = problem
        activation = (
            "torch.nn.modules.activation.Sigmoid" if problem == MULTI_LABEL else "torch.nn.modules.linear.Identity"
        )
        config.sentence_transformers = {"activation_fn": activation}
    auto = AutoModelForTokenClassification if task == "token" else AutoModelForSequenceClassification
    with quiet_transformers():
        network = auto.from_config(config)
    missing, _unexpected = network.base_model.load_state_dict(encoder.model.state_dict(), strict=False)
    if missing:
        raise ModelLoadError(f"{type(network).__name__} expects weights the base model does not have: {missing[:3]}.")
    return network


def make_optimizer(network, args: FinetuneArguments) -> torch.optim.AdamW:
    """AdamW; biases and LayerNorm weights are not decayed; the fused kernel where torch has it."""
    decay, no_decay = [], []
    for name, parameter in network.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:  # the fused kernel updates the 30k-row embedding table much faster than the per-tensor loop on a CPU
        return torch.optim.AdamW(groups, lr=args.learning_rate, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=args.learning_rate)


def loss_units(example: Example) -> int:
    """What one example adds to the loss's denominator, as transformers' own losses average: one example, its
    labelled tokens (token tasks), or its labels (multi-label: binary cross-entropy over every label)."""
    if isinstance(example.labels, list):
        if example.labels and isinstance(example.labels[0], float):
            return len(example.labels)
        return sum(1 for label in example.labels if label != IGNORE_INDEX)
    return 1


def summed_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss summed over its units, to be divided by the step's: cross-entropy (classes, tags), mean squared error
    (a score), binary cross-entropy (several labels)."""
    logits = logits.float()
    if logits.dim() == 3:  # token classification: (batch, tokens, classes)
        logits, labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    if labels.is_floating_point() and labels.dim() == 2:  # multi-hot rows
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels, reduction="sum")
    if labels.is_floating_point():  # one score per example
        return torch.nn.functional.mse_loss(logits.squeeze(-1), labels, reduction="sum")
    return torch.nn.functional.cross_entropy(logits, labels, reduction="sum", ignore_index=IGNORE_INDEX)


METRIC_NAMES = {SINGLE_LABEL: "accuracy", MULTI_LABEL: "micro-F1", REGRESSION: "Spearman", TOKENS: "entity F1"}


class Evaluator:
    """Dev-set scoring after each epoch, through the same predict code a saved model uses."""

    def __init__(self, task: str, network, tokenizer, max_length: int, prepared: Prepared):
        self.task = task
        self.prepared = prepared
        self.tokenizer = tokenizer
        self.metric_name = METRIC_NAMES[prepared.problem]
        runner_class = FineTunedTagger if task == "token" else FineTunedClassifier
        self.runner = runner_class(network, tokenizer, max_length)

    def evaluate(self) -> tuple[float, dict]:
        """(the score that picks the best epoch, every metric)."""
        gold, problem = self.prepared.dev_gold, self.prepared.problem
        if problem == TOKENS:
            metrics = entity_scores(gold, self.runner.predict_word_tags(self.prepared.dev_inputs))
            return metrics["f1"], metrics
        if problem == REGRESSION:
            metrics = regression_metrics(gold, self.runner.predict(self.prepared.dev_inputs))
            return metrics["spearman"], metrics
        if problem == MULTI_LABEL:
            probabilities = self.runner.predict_proba(self.prepared.dev_inputs)
            metrics = multi_label_metrics(gold, probabilities, self.prepared.labels)
            self.runner.threshold = metrics["threshold"]  # the one chosen on dev, saved with the best epoch
            return metrics["micro_f1"], metrics
        metrics = classification_metrics(gold, self.runner.predict(self.prepared.dev_inputs), self.prepared.labels)
        return metrics["accuracy"], metrics


@dataclass
class Trainer:
    """The epoch loop: steps, dev scoring, checkpoints; Ctrl-C becomes a checkpoint and a KeyboardInterrupt."""

    accelerator: Any  # accelerate.Accelerator
    network: Any  # prepared by the accelerator (DDP-wrapped with several processes)
    optimizer: Any
    scheduler: Any
    prepared: Prepared
    evaluator: Evaluator
    args: FinetuneArguments
    state: TrainingState
    checkpoint: Path
    run_record: dict
    progress: bool | None
    callbacks: Sequence[Callable[[TrainingState], None]]
    logs: Path | None = None  # the folder of metrics.jsonl (and the trackers' files)

    def train(self) -> None:
        with _deferred_interrupt() as interrupted:
            while self.state.epoch < self.args.epochs and not self.state.finished:
                seen, loss_sum, seconds = self._epoch(interrupted)
                self._end_epoch(seen, loss_sum, seconds)
                if interrupted:
                    logger.warning(
                        "interrupted after epoch %d: checkpoint saved in %s; run the same command with "
                        "--resume to continue.",
                        self.state.epoch,
                        self.checkpoint,
                    )
                    raise KeyboardInterrupt

    def _epoch(self, interrupted: list) -> tuple[int, float, float]:
        """Train one epoch (from the saved step when resuming); batch order depends only on (seed, epoch)."""
        state, args, prepared = self.state, self.args, self.prepared
        lengths = [len(e.input_ids) for e in prepared.train]
        batches = length_grouped_batches(lengths, args.batch_size, np.random.default_rng([args.seed, state.epoch]))
        bar = _bar(
            len(prepared.train), state.epoch, args.epochs, self.progress if self.accelerator.is_main_process else False
        )
        bar.update(sum(len(b) for b in batches[: state.step_in_epoch]))
        started, seen, loss_sum = time.perf_counter(), 0, 0.0
        at_step_boundary = True
        self.network.train()
        try:
            for position in range(state.step_in_epoch, len(batches)):
                rows = batches[position]
                at_step_boundary = False
                loss = self._step([prepared.train[i] for i in rows])
                state.step_in_epoch, state.global_step = position + 1, state.global_step + 1
                at_step_boundary = True
                seen += len(rows)
                loss_sum += loss * len(rows)
                bar.update(len(rows))
                bar.set_postfix(loss=f"{loss_sum / seen:.4f}")
                self._log({"train/loss": loss, "train/learning_rate": self.scheduler.get_last_lr()[0]})
                for callback in self.callbacks:
                    callback(state)
                if interrupted:
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            bar.close()
            if not at_step_boundary:  # a second Ctrl-C inside a step: the weights may hold half an update
                logger.warning(
                    "stopped inside step %d of epoch %d: nothing saved since the last checkpoint in %s; "
                    "--resume continues from there.",
                    state.step_in_epoch + 1,
                    state.epoch + 1,
                    self.checkpoint,
                )
                raise
            state.train_seconds += time.perf_counter() - started
            self._save()
            logger.warning(
                "interrupted in epoch %d after step %d: checkpoint saved in %s; run the same command with "
                "--resume to continue.",
                state.epoch + 1,
                state.step_in_epoch,
                self.checkpoint,
            )
            raise
        bar.close()
        seconds = time.perf_counter() - started
        state.train_seconds += seconds
        return seen, loss_sum, seconds

    def _step(self, examples: list[Example]) -> float:
        """One optimizer step over `examples` (the global batch): micro-batches, each split between the processes.

        Returns the step's mean loss (over all its units, all processes).
        """
        accelerator, args = self.accelerator, self.args
        units = sum(loss_units(e) for e in examples)
        rank, world = accelerator.process_index, accelerator.num_processes
        micro_batches = [
            m for m in np.array_split(np.arange(len(examples)), args.gradient_accumulation_steps) if len(m)
        ]
        total = torch.zeros((), device=accelerator.device)
        for k, micro in enumerate(micro_batches):
            mine = [examples[i] for i in micro[rank::world]]
            syncing = k == len(micro_batches) - 1
            with nullcontext() if syncing else accelerator.no_sync(self.network):
                part = self._summed_loss(mine)
                # DDP averages gradients over processes: × world makes the sum over processes / units the mean
                accelerator.backward(part * world / units)
            total += part.detach()
        if args.max_grad_norm:
            accelerator.clip_grad_norm_(self.network.parameters(), args.max_grad_norm)
        self.optimizer.step()
        if not accelerator.optimizer_step_was_skipped:  # fp16: a step with inf/NaN gradients changes nothing
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(accelerator.reduce(total, reduction="sum")) / units

    def _summed_loss(self, examples: list[Example]) -> torch.Tensor:
        if not examples:  # this process has no share of a small micro-batch: a zero that still reaches every weight
            return sum(parameter.sum() * 0.0 for parameter in self.network.parameters())
        runner = self.evaluator.runner
        batch = collate(examples, runner.tokenizer.pad_token_id, runner.with_type_ids)
        batch = {name: tensor.to(self.accelerator.device) for name, tensor in batch.items()}
        labels = batch.pop("labels")
        with self.accelerator.autocast():
            logits = self.network(**batch).logits
        return summed_loss(logits, labels)

    def _end_epoch(self, seen: int, loss_sum: float, seconds: float) -> None:
        """Score dev (on the main process; the others hear the result), keep the best epoch, stop early, save."""
        state, args = self.state, self.args
        score, metrics = self._evaluate()
        entry = {
            "epoch": state.epoch + 1,
            "train_loss": loss_sum / max(seen, 1),
            "dev_score": score,
            "seconds": round(seconds, 1),
            "examples_per_second": round(seen / max(seconds, 1e-9), 1),
        }
        state.history.append(entry)
        improved = state.best_score is None or score > state.best_score
        if improved:
            state.best_score, state.best_epoch, state.epochs_without_improvement = score, state.epoch + 1, 0
        else:
            state.epochs_without_improvement += 1
        logger.info(
            f"epoch {state.epoch + 1}/{args.epochs}: train loss {entry['train_loss']:.4f}, dev "
            f"{self.evaluator.metric_name} {score:.4f}{' (best)' if improved else ''}, {seconds:.0f}s, "
            f"{entry['examples_per_second']:.1f} examples/s"
        )
        self._log(
            {
                "epoch/train_loss": entry["train_loss"],
                "epoch/dev_score": score,
                "epoch/examples_per_second": entry["examples_per_second"],
            }
        )
        state.epoch, state.step_in_epoch = state.epoch + 1, 0
        if state.epochs_without_improvement >= args.patience and state.epoch < args.epochs:
            logger.info("early stop: no better dev score for %d epochs.", args.patience)
            state.finished = True
        self._save(best_metrics=metrics if improved else None)

    def _evaluate(self) -> tuple[float, dict]:
        from accelerate.utils import broadcast_object_list

        result: list = [None]
        if self.accelerator.is_main_process:
            result = [self.evaluator.evaluate()]
        if self.accelerator.num_processes > 1:
            broadcast_object_list(result)
        self.network.train()
        return result[0]

    def _log(self, values: dict[str, float]) -> None:
        """One line of metrics.jsonl (a record TensorBoard-style trackers also get, through accelerate)."""
        if not self.accelerator.is_main_process:
            return
        step = self.state.global_step
        if self.accelerator.trackers:
            self.accelerator.log(values, step=step)
        if self.logs is not None:
            self.logs.mkdir(parents=True, exist_ok=True)
            with (self.logs / METRICS_FILE).open("a", encoding="utf-8") as handle:
                handle.write(json.dumps({"step": step, "epoch": self.state.epoch, **values}) + "\n")

    def _save(self, best_metrics: dict | None = None) -> None:
        save_checkpoint(
            self.checkpoint,
            self.accelerator,
            self.network,
            self.optimizer,
            self.scheduler,
            self.state,
            self.run_record,
            best_metrics,
        )


@contextmanager
def _deferred_interrupt():
    """The first Ctrl-C is held until the current step (or dev scoring and checkpoint) is done, so a checkpoint
    never catches half an update; a second one stops at once."""
    interrupted: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    def hold(*_):
        if interrupted:
            raise KeyboardInterrupt
        interrupted.append(True)
        logger.warning(
            "interrupt: finishing the current step, then saving a checkpoint (Ctrl-C again to stop at once) ..."
        )

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


def _bar(total: int, epoch: int, epochs: int, progress: bool | None):
    disable = (not sys.stderr.isatty()) if progress is None else not progress
    return tqdm(total=total, unit="ex", desc=f"epoch {epoch + 1}/{epochs}", disable=disable, leave=False)
