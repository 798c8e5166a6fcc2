"""The training loop: the model with its head, AdamW, the epoch loop with dev scoring, Ctrl-C held to step boundaries."""

from __future__ import annotations

import logging
import copy
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import (
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from ...encoder.models import quiet_transformers
from ...errors import ModelLoadError
from ..finetuned import FineTunedClassifier, FineTunedTagger
from ..report import classification_metrics
from ..tagging import entity_scores
from .arguments import FinetuneArguments, TrainingState
from .checkpoint import save_checkpoint
from .examples import collate, length_grouped_batches
from .prepare import Prepared

logger = logging.getLogger(__name__)


def build_model(encoder, task: str, labels: list[str]):
    """A `...ForSequence/TokenClassification` model whose encoder weights are the loaded encoder's (head random)."""
    config = copy.deepcopy(encoder.model.config)
    config.num_labels = len(labels)
    config.id2label = dict(enumerate(labels))
    config.label2id = {label: i for i, label in enumerate(labels)}
    auto = AutoModelForSequenceClassification if task == "text" else AutoModelForTokenClassification
    with quiet_transformers():
        network = auto.from_config(config)
    missing, _unexpected = network.base_model.load_state_dict(encoder.model.state_dict(), strict=False)
    if missing:
        raise ModelLoadError(f"{type(network).__name__} expects weights the base model does not have: {missing[:3]}.")
    return network


def make_optimizer(network, args: FinetuneArguments) -> torch.optim.AdamW:
    """AdamW; biases and LayerNorm weights are not decayed."""
    decay, no_decay = [], []
    for name, parameter in network.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:  # the fused kernel updates the 30k-row embedding table ~4× faster than the per-tensor loop on CPU
        return torch.optim.AdamW(groups, lr=args.learning_rate, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=args.learning_rate)


class Evaluator:
    """Dev-set scoring after each epoch, through the same predict code a saved model uses."""

    def __init__(self, task: str, network, tokenizer, max_length: int, prepared: Prepared):
        self.task = task
        self.prepared = prepared
        self.tokenizer = tokenizer
        self.metric_name = "accuracy" if task == "text" else "entity F1"
        runner_class = FineTunedClassifier if task == "text" else FineTunedTagger
        self.runner = runner_class(network, tokenizer, max_length)

    def evaluate(self) -> tuple[float, dict]:
        if self.task == "text":
            predicted = self.runner.predict(self.prepared.dev_inputs)
            metrics = classification_metrics(self.prepared.dev_gold, predicted, self.prepared.labels)
            return metrics["accuracy"], metrics
        metrics = entity_scores(self.prepared.dev_gold, self.runner.predict_word_tags(self.prepared.dev_inputs))
        return metrics["f1"], metrics


@dataclass
class Trainer:
    """The epoch loop: steps, dev scoring, checkpoints; Ctrl-C becomes a checkpoint and a KeyboardInterrupt."""

    network: object
    optimizer: torch.optim.Optimizer
    scheduler: object
    prepared: Prepared
    evaluator: "Evaluator"
    args: FinetuneArguments
    state: TrainingState
    checkpoint: Path
    run_record: dict
    progress: bool | None
    callbacks: Sequence[Callable[[TrainingState], None]]

    def train(self) -> None:
        with _deferred_interrupt() as interrupted:
            while self.state.epoch < self.args.epochs and not self.state.finished:
                seen, loss_sum, seconds = self._epoch(interrupted)
                self._end_epoch(seen, loss_sum, seconds)
                if interrupted:
                    logger.warning("interrupted after epoch %d: checkpoint saved in %s; run the same command with --resume to "
                                   "continue.", self.state.epoch, self.checkpoint)
                    raise KeyboardInterrupt

    def _epoch(self, interrupted: list) -> tuple[int, float, float]:
        """Train one epoch (from the saved step when resuming); batch order depends only on (seed, epoch)."""
        state, args, prepared = self.state, self.args, self.prepared
        lengths = [len(e.input_ids) for e in prepared.train]
        batches = length_grouped_batches(lengths, args.batch_size, np.random.default_rng([args.seed, state.epoch]))
        pad_id, with_type_ids = self.evaluator.runner.tokenizer.pad_token_id, self.evaluator.runner.with_type_ids
        bar = _bar(len(prepared.train), state.epoch, args.epochs, self.progress)
        bar.update(sum(len(b) for b in batches[: state.step_in_epoch]))
        started, seen, loss_sum = time.perf_counter(), 0, 0.0
        at_step_boundary = True
        self.network.train()
        try:
            for position in range(state.step_in_epoch, len(batches)):
                rows = batches[position]
                at_step_boundary = False
                loss = self.network(**collate([prepared.train[i] for i in rows], pad_id, with_type_ids)).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.network.parameters(), args.max_grad_norm)
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                state.step_in_epoch, state.global_step = position + 1, state.global_step + 1
                at_step_boundary = True
                seen += len(rows)
                loss_sum += loss.item() * len(rows)
                bar.update(len(rows))
                bar.set_postfix(loss=f"{loss_sum / seen:.4f}")
                for callback in self.callbacks:
                    callback(state)
                if interrupted:
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            bar.close()
            if not at_step_boundary:  # a second Ctrl-C inside a step: the weights may hold half an update
                logger.warning("stopped inside step %d of epoch %d: nothing saved since the last checkpoint in %s; "
                               "--resume continues from there.", state.step_in_epoch + 1, state.epoch + 1, self.checkpoint)
                raise
            state.train_seconds += time.perf_counter() - started
            self._save()
            logger.warning("interrupted in epoch %d after step %d: checkpoint saved in %s; run the same command with "
                           "--resume to continue.", state.epoch + 1, state.step_in_epoch, self.checkpoint)
            raise
        bar.close()
        seconds = time.perf_counter() - started
        state.train_seconds += seconds
        return seen, loss_sum, seconds

    def _end_epoch(self, seen: int, loss_sum: float, seconds: float) -> None:
        """Score dev, remember the best epoch, decide on early stopping, checkpoint."""
        state, args = self.state, self.args
        score, metrics = self.evaluator.evaluate()
        entry = {"epoch": state.epoch + 1, "train_loss": loss_sum / max(seen, 1), "dev_score": score,
                 "seconds": round(seconds, 1), "examples_per_second": round(seen / max(seconds, 1e-9), 1)}
        state.history.append(entry)
        improved = state.best_score is None or score > state.best_score
        if improved:
            state.best_score, state.best_epoch, state.epochs_without_improvement = score, state.epoch + 1, 0
        else:
            state.epochs_without_improvement += 1
        logger.info(f"epoch {state.epoch + 1}/{args.epochs}: train loss {entry['train_loss']:.4f}, dev "
                 f"{self.evaluator.metric_name} {score:.4f}{' (best)' if improved else ''}, {seconds:.0f}s, "
                 f"{entry['examples_per_second']:.1f} examples/s")
        state.epoch, state.step_in_epoch = state.epoch + 1, 0
        if state.epochs_without_improvement >= args.patience and state.epoch < args.epochs:
            logger.info("early stop: no better dev score for %d epochs.", args.patience)
            state.finished = True
        self._save(best_metrics=metrics if improved else None)

    def _save(self, best_metrics: dict | None = None) -> None:
        save_checkpoint(self.checkpoint, self.network, self.optimizer, self.scheduler, self.state, self.run_record,
                         best_metrics)


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
        logger.warning("interrupt: finishing the current step, then saving a checkpoint (Ctrl-C again to stop at once) ...")

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)



def _bar(total: int, epoch: int, epochs: int, progress: bool | None):
    disable = (not sys.stderr.isatty()) if progress is None else not progress
    return tqdm(total=total, unit="ex", desc=f"epoch {epoch + 1}/{epochs}", disable=disable, leave=False)
