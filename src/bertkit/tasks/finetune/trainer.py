"""Training on transformers' `Trainer`, with bertkit's hooks: batches, dev scoring, held Ctrl-C, metrics.jsonl.

Each step's batch is `batch_size` examples whatever the processes and accumulation steps; every part's summed loss is
divided by the units of the whole step (`num_items_in_batch`), so 1 process or N give the same updates.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import Trainer, TrainerCallback

from ...encoder.models import quiet_transformers
from ...encoder.progress import Progress
from ...errors import ModelLoadError
from ...io.squad import QAExample
from ...io.writers import modes_like_open
from ..finetuned import FineTunedClassifier
from ..qa import FineTunedQA
from ..report import classification_metrics, multi_label_metrics, regression_metrics
from ..squad import squad_scores
from ..tagger import FineTunedTagger
from ..tagging import entity_scores
from .examples import IGNORE_INDEX, Example, length_grouped_batches
from .prepare import MULTI_LABEL, QA, REGRESSION, SINGLE_LABEL, TOKENS, Prepared

logger = logging.getLogger(__name__)
METRICS_FILE = "metrics.jsonl"  # one JSON line per logged step and per epoch, in the run's logs/ folder
EPOCH_KEY = "bertkit_epoch"  # bertkit's record of each epoch in Trainer's log history (saved with each checkpoint)
RUN_CLASSES = {"text": FineTunedClassifier, "pair": FineTunedClassifier, "token": FineTunedTagger, "qa": FineTunedQA}


def build_model(encoder: Any, task: str, labels: list[str], problem: str = SINGLE_LABEL) -> Any:
    """Build a `...ForSequence/TokenClassification` or `...ForQuestionAnswering` model on the encoder.

    The head is new, except a question-answering model's span head for `task="qa"`: it is kept, so fine-tuning a
    SQuAD-trained model on a few hundred questions starts from a model that already answers.
    """
    config = copy.deepcopy(encoder.model.config)
    config.num_labels, config.id2label = len(labels), dict(enumerate(labels))
    config.label2id = {label: i for i, label in enumerate(labels)}
    if task in ("text", "pair"):
        config.problem_type = problem
        activation = "activation.Sigmoid" if problem == MULTI_LABEL else "linear.Identity"
        config.sentence_transformers = {"activation_fn": f"torch.nn.modules.{activation}"}
    auto = getattr(transformers, RUN_CLASSES[task].AUTO_CLASS)
    with quiet_transformers():
        network = auto.from_config(config)
    missing, _unexpected = network.base_model.load_state_dict(encoder.model.state_dict(), strict=False)
    if missing:
        raise ModelLoadError(f"{type(network).__name__} expects weights the base model does not have: {missing[:3]}.")
    if task == "qa" and any(name.endswith("ForQuestionAnswering") for name in config.architectures or ()):
        with quiet_transformers():
            trained = auto.from_pretrained(encoder.source.path, local_files_only=encoder.source.kind != "hub")
        network.load_state_dict(trained.state_dict())
        logger.info("%s answers questions already: its span head is kept and trained on", encoder.source.spec)
    return network


def step_loss(outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
    """`Trainer`'s `compute_loss_func`: this micro-batch's summed loss over the units of the whole step.

    Cross-entropy, mean squared error or binary cross-entropy, summed over the units; IGNORE_INDEX counts nothing.
    """
    units = num_items_in_batch or max(1, int(labels.ne(IGNORE_INDEX).sum()))
    logits = outputs.logits.float()
    if logits.dim() == 3:  # token classification: (batch, tokens, classes)
        logits, labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    if not labels.is_floating_point():
        return torch.nn.functional.cross_entropy(logits, labels, reduction="sum", ignore_index=IGNORE_INDEX) / units
    kept = labels.ne(IGNORE_INDEX)
    if labels.dim() == 2:  # multi-hot rows
        losses = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    else:  # one score per example
        losses = torch.nn.functional.mse_loss(logits.squeeze(-1), labels, reduction="none")
    return (losses * kept).sum() / units


def qa_loss(outputs: Any, labels: torch.Tensor, num_items_in_batch: Any = None) -> torch.Tensor:
    """`Trainer`'s `compute_loss_func`: start + end cross-entropy over the step's labelled positions (two each)."""
    loss = sum(
        torch.nn.functional.cross_entropy(logits.float(), labels[:, k], reduction="sum", ignore_index=IGNORE_INDEX)
        for k, logits in enumerate((outputs.start_logits, outputs.end_logits))
    )
    return loss / (num_items_in_batch or max(1, int(labels.ne(IGNORE_INDEX).sum())))


class Examples(torch.utils.data.Dataset):
    """The training examples; index -1 is a padding example whose labels count nothing (an empty share)."""

    def __init__(self, examples: Sequence[Example]) -> None:
        self.examples = list(examples)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        if index >= 0:
            return self.examples[index]
        return replace(self.examples[0], labels=_ignored(self.examples[0].labels))


def _ignored(labels: Any) -> Any:
    """Return the labels with each one IGNORE_INDEX of its own type (int or float, in a list or an answer's tuple)."""
    if isinstance(labels, (list, tuple)):
        return type(labels)(_ignored(label) for label in labels)
    return type(labels)(IGNORE_INDEX)


class StepBatches(torch.utils.data.Sampler):
    """Micro-batches of this process: each step's length-grouped batch in `accumulation` parts, split by process."""

    def __init__(
        self, lengths: Sequence[int], batch_size: int, accumulation: int, seed: int, rank: int, world: int
    ) -> None:
        self.lengths, self.batch_size, self.accumulation = list(lengths), batch_size, accumulation
        self.seed, self.rank, self.world, self.epoch = seed, rank, world, 0

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds the order."""
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(len(self.lengths) / self.batch_size) * self.accumulation

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        for batch in length_grouped_batches(self.lengths, self.batch_size, rng):
            for micro in np.array_split(np.array(batch), self.accumulation):
                yield micro[self.rank :: self.world].tolist() or [-1]  # an empty share still runs (DDP's hooks)


class StepLoader(torch.utils.data.DataLoader):
    """A DataLoader over `StepBatches` that `Trainer` can tell the epoch."""

    def set_epoch(self, epoch: int) -> None:
        """Tell the batches the epoch (it seeds their order)."""
        self.batch_sampler.set_epoch(epoch)


SCORES = {  # problem: the dev score's name in the epoch lines, and its key in the metrics
    SINGLE_LABEL: ("accuracy", "accuracy"),
    MULTI_LABEL: ("micro-F1", "micro_f1"),
    REGRESSION: ("Spearman", "spearman"),
    TOKENS: ("entity F1", "f1"),
    QA: ("F1", "f1"),
}


class Evaluator:
    """Dev-set scoring after each epoch, through the same predict code a saved model uses."""

    def __init__(self, task: str, network: Any, tokenizer: Any, max_length: int, prepared: Prepared) -> None:
        self.prepared = prepared
        self.metric_name, self.score_key = SCORES[prepared.problem]
        self.runner = RUN_CLASSES[task](network, tokenizer, max_length, {"data": prepared.data_record})

    def evaluate(self) -> tuple[float, dict]:
        """Score the dev set: return (the score that picks the best epoch, every metric)."""
        gold, inputs, problem = self.prepared.dev_gold, self.prepared.dev_inputs, self.prepared.problem
        if problem == QA:
            metrics = self._squad()
        elif problem == TOKENS:
            metrics = entity_scores(gold, self.runner.predict_word_tags(inputs))
        elif problem == REGRESSION:
            metrics = regression_metrics(gold, self.runner.predict(inputs))
        elif problem == MULTI_LABEL:
            metrics = multi_label_metrics(gold, self.runner.predict_proba(inputs), self.prepared.labels)
            self.runner.threshold = metrics["threshold"]  # the one chosen on dev, saved with the best epoch
        else:
            metrics = classification_metrics(gold, self.runner.predict(inputs), self.prepared.labels)
        return metrics[self.score_key], metrics

    def _squad(self) -> dict:
        """Score SQuAD; with unanswerable questions, at the no-answer threshold best on dev (saved)."""
        examples: list[QAExample] = self.prepared.dev_inputs
        _, spans, null_diff = self.runner.predictions(examples)
        gold = {e.id: [text for text, _ in e.answers] for e in examples}
        if not self.runner.negatives:
            return squad_scores(gold, spans)
        finite = {k: min(v, 1e9) for k, v in null_diff.items()}
        threshold = squad_scores(gold, spans, finite)["best_f1_thresh"]
        self.runner.null_threshold = threshold
        return {**squad_scores(gold, spans, finite, threshold), "null_threshold": threshold}


class FinetuneTrainer(Trainer):
    """`Trainer` with bertkit's batches (`StepBatches`) and dev scoring (`Evaluator`)."""

    def __init__(self, *args: Any, evaluator: Evaluator, batch_size: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.evaluator, self.global_batch = evaluator, batch_size

    def get_train_dataloader(self) -> StepLoader:
        """Load this process's micro-batches of each step's global batch."""
        lengths = [len(e.input_ids) for e in self.train_dataset.examples]
        args = self.args
        batches = StepBatches(
            lengths, self.global_batch, args.gradient_accumulation_steps, args.seed, args.process_index, args.world_size
        )
        return StepLoader(self.train_dataset, batch_sampler=batches, collate_fn=self.data_collator)

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Score this epoch on dev (`eval_score`, what picks the best epoch), every metric kept in the log."""
        score, metrics = self.evaluator.evaluate()
        self.model.train()
        result = {"eval_score": float(score)}
        self.state.log_history.append({"step": self.state.global_step, "eval_metrics": metrics})
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, result)
        return result


@dataclass(eq=False)
class RunCallback(TrainerCallback):
    """bertkit's part of the loop: metrics.jsonl, one line per epoch, callbacks, Ctrl-C held to a step boundary."""

    logs: Path
    metric_name: str
    epochs: int
    batch_size: int
    main: bool
    callbacks: Sequence[Callable]
    requested: list  # a Ctrl-C puts True here (`held_interrupt`)
    interrupted: bool = False
    started: float = field(default_factory=time.perf_counter)
    first_step: int = 0
    show: bool = False  # report the steps through bertkit's one reporter
    progress: Progress | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the step reporter (a bar on a terminal, a line every few seconds elsewhere)."""
        self.progress = Progress("finetune", state.max_steps, "steps", show=self.show)
        self.progress.to(state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Close the step reporter."""
        if self.progress is not None:
            self.progress.close()

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the epoch's clock and step count."""
        self.started, self.first_step = time.perf_counter(), state.global_step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Call the user's callbacks; after a Ctrl-C (held or raised by one of them) save and stop at this step."""
        try:
            for callback in self.callbacks:
                callback(state)
        except KeyboardInterrupt:
            self.interrupted = True
        self.interrupted = self.interrupted or bool(self.requested)
        if self.progress is not None:
            seconds = max(time.perf_counter() - self.started, 1e-9)
            speed = (state.global_step - self.first_step) * self.batch_size / seconds
            self.progress.to(state.global_step, **{"examples/s": f"{speed:.1f}"})
        if self.interrupted:  # the step is whole: save here, then stop
            control.should_save, control.should_training_stop = True, True

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Give the checkpoint just written the modes of the caller's umask (safetensors writes files 0600)."""
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if self.main and checkpoint.is_dir():
            modes_like_open(checkpoint)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """After an interrupt inside an epoch, neither score nor save the cut epoch.

        Its step saved it, and a resumed run finishes it; an epoch interrupted at its last step is whole, and scored.
        """
        if self.interrupted and not float(state.epoch or 0).is_integer():
            control.should_evaluate = control.should_save = False

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        """Write a logged step's training loss and learning rate to metrics.jsonl."""
        if logs and "loss" in logs:
            if self.progress is not None:
                self.progress.postfix["loss"] = f"{logs['loss']:.4f}"
            losses = {"train/loss": logs["loss"], "train/learning_rate": logs.get("learning_rate")}
            self._write(step=state.global_step, epoch=math.ceil(state.epoch or 0) - 1, **losses)

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict | None = None, **kwargs: Any) -> None:
        """Record the epoch's line in the run's history, log it, and write it to metrics.jsonl."""
        entry = self._epoch_entry(state, (metrics or {}).get("eval_score", 0.0))
        earlier = [h[EPOCH_KEY]["dev_score"] for h in state.log_history if EPOCH_KEY in h]
        improved = not earlier or entry["dev_score"] > max(earlier)  # a tie keeps the earlier epoch, as Trainer does
        state.log_history.append({"step": state.global_step, EPOCH_KEY: entry})
        resumed = f" (the {entry['steps']} steps run since resuming)" if entry.get("resumed") else ""
        line = (
            f"epoch {entry['epoch']}/{self.epochs}: train loss {entry['train_loss']:.4f}{resumed}, dev "
            f"{self.metric_name} {entry['dev_score']:.4f}{' (best)' if improved else ''}, {entry['seconds']:.0f}s, "
            f"{entry['examples_per_second']:.1f} examples/s"
        )
        logger.info(line)
        kept = {f"epoch/{key}": entry[key] for key in ("train_loss", "dev_score", "examples_per_second")}
        self._write(step=state.global_step, epoch=entry["epoch"] - 1, **kept)

    def _epoch_entry(self, state: Any, score: float) -> dict:
        """Make the epoch's history line: mean loss of all its steps, dev score, speed of the steps run here."""
        epoch = max(1, round(state.epoch or 1))
        steps_per_epoch = max(1, math.ceil(state.max_steps / max(self.epochs, 1)))
        first = (epoch - 1) * steps_per_epoch
        losses = [h["loss"] for h in state.log_history if "loss" in h and first < h["step"] <= state.global_step]
        ran = state.global_step - self.first_step
        seconds = time.perf_counter() - self.started
        entry = {
            "epoch": epoch,
            "train_loss": float(np.mean(losses)) if losses else 0.0,
            "dev_score": float(score),
            "seconds": round(seconds, 1),
            "examples_per_second": round(ran * self.batch_size / max(seconds, 1e-9), 1),
        }
        if self.first_step > first:  # resumed inside this epoch: the speed is of the resumed part
            entry.update(resumed=True, steps=ran)
        return entry

    def _write(self, **line: Any) -> None:
        if not self.main:
            return
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / METRICS_FILE).open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(line) + "\n")


def history(state: Any) -> list[dict]:
    """Each epoch's entry (the last one written for it, should an epoch have been scored twice)."""
    entries = {h[EPOCH_KEY]["epoch"]: h[EPOCH_KEY] for h in state.log_history if EPOCH_KEY in h}
    return [entries[k] for k in sorted(entries)]


def best_metrics(state: Any) -> dict:
    """Return the dev metrics of the best epoch (the first of the best scores)."""
    scored = [(h[EPOCH_KEY]["dev_score"], -h["step"], h["step"]) for h in state.log_history if EPOCH_KEY in h]
    best_step = max(scored)[2] if scored else None
    return next(
        (h["eval_metrics"] for h in state.log_history if h.get("step") == best_step and "eval_metrics" in h), {}
    )


@contextmanager
def held_interrupt() -> Iterator[list]:
    """Hold the first Ctrl-C until the current step is done (no half update checkpointed); a second stops at once."""
    requested: list[bool] = []
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return

    def hold(*_: Any) -> None:
        if requested:
            raise KeyboardInterrupt
        requested.append(True)
        logger.warning(
            "interrupt: finishing the current step, then saving a checkpoint (Ctrl-C again to stop at once) ..."
        )

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield requested
    finally:
        signal.signal(signal.SIGINT, previous)
