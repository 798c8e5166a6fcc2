"""Fine-tuning: a classification head on the encoder, the whole model updated, checkpointed every epoch, resumable.

The saved directory is a plain transformers model (`AutoModelFor{Sequence,Token}Classification.from_pretrained`)
plus `bertkit.json` with the arguments, data fingerprints, per-epoch history and dev metrics.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from .classify import CONFIG_FILE, check_class_counts, check_labels
from .errors import InputError, ModelLoadError
from .finetune_data import (
    Example,
    collate,
    length_grouped_batches,
    text_examples,
    token_examples,
    word_pieces,
)
from .finetuned import KIND_TEXT, KIND_TOKEN, FineTunedClassifier, FineTunedTagger
from .models import quiet_transformers
from .outputs import check_new_directory
from .tagging import TaggedData, entity_scores

TASKS = ("text", "token")
CHECKPOINT = "checkpoint"
TEXT_MAX_LENGTH = 128


@dataclass
class FinetuneArguments:
    """Training settings; the defaults are the ones measured in benchmarks/finetune.py."""

    task: str = "text"
    epochs: int = 3
    learning_rate: float = 1e-4
    batch_size: int = 32
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    patience: int = 2  # stop after this many epochs without a better dev score
    seed: int = 0
    max_length: int | None = None  # text: 128; token: the model's maximum

    def check(self) -> None:
        if self.task not in TASKS:
            raise InputError(f"task {self.task!r}: valid tasks are {', '.join(TASKS)}.")
        for name in ("epochs", "batch_size", "patience"):
            if getattr(self, name) < 1:
                raise InputError(f"{name}={getattr(self, name)}: give 1 or more.")
        if not self.learning_rate > 0:
            raise InputError(f"learning_rate={self.learning_rate}: give a positive number such as 5e-5.")
        if self.max_length is not None and self.max_length < 8:
            raise InputError(f"max_length={self.max_length}: give at least 8 tokens (special tokens included).")
        if not 0 <= self.warmup_ratio < 1:
            raise InputError(f"warmup_ratio={self.warmup_ratio}: give a share between 0 and 1.")


@dataclass
class TrainingState:
    """Where training stands: saved with every checkpoint so a resumed run continues exactly."""

    epoch: int = 0  # epochs fully done
    step_in_epoch: int = 0  # batches done in the current epoch (non-zero only after an interruption)
    global_step: int = 0
    best_score: float | None = None
    best_epoch: int | None = None
    epochs_without_improvement: int = 0
    history: list[dict] = field(default_factory=list)
    train_seconds: float = 0.0
    finished: bool = False


@dataclass
class Prepared:
    """The training and dev data turned into model inputs, with what the run directory must record about them."""

    labels: list[str]
    train: list[Example]
    dev_inputs: list  # text: strings; token: word lists
    dev_gold: list  # text: labels; token: tag sequences
    data_record: dict
    notes: list[str]


def finetune(
    train: str | Path,
    dev: str | Path | None = None,
    *,
    output_dir: str | Path,
    task: str = "text",
    model: str | None = None,
    args: FinetuneArguments | None = None,
    text_column: str | int | None = None,
    label_column: str | int | None = None,
    header: bool | None = None,
    dev_share: float = 0.1,
    limit: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    threads: int | None = None,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
    callbacks: Sequence[Callable[[TrainingState], None]] = (),
):
    """Fine-tune the encoder on a labelled file and save it to `output_dir`; returns the loaded best model.

    task='text': TSV/CSV/JSONL with text and label columns. task='token': CoNLL (word … tag) or two-column files.
    Without `dev`, a seeded `dev_share` of the training data is held out. `resume=True` continues an interrupted
    run from its last checkpoint; `callbacks` are called after every optimizer step (KeyboardInterrupt there
    interrupts like Ctrl-C does).
    """
    args = copy.deepcopy(args) if args is not None else FinetuneArguments()
    args.task = task
    args.check()
    log = log or (lambda message: print(message, file=sys.stderr))
    output = Path(output_dir)
    _check_output(output, resume, overwrite)
    if threads is not None:
        if threads < 1:
            raise InputError(f"threads={threads}: give a positive number of threads.")
        torch.set_num_threads(threads)

    from .encode import Encoder

    encoder = Encoder.from_pretrained(model)
    max_length = min(args.max_length or (TEXT_MAX_LENGTH if task == "text" else encoder.max_length), encoder.max_length)
    tokenizer = encoder.tokenizer if task == "text" else _word_tokenizer(encoder)
    prepared = _prepare(task, tokenizer, train, dev, max_length, args.seed, dev_share, limit,
                        text_column, label_column, header)
    run_record = {
        "task": task,
        "base_model": {"spec": encoder.name, "path": str(encoder.loaded.source.path), "fingerprint": encoder.fingerprint},
        "args": asdict(args),
        "labels": prepared.labels,
        "max_length": max_length,
        "data": prepared.data_record,
    }
    state = TrainingState()
    checkpoint = output / CHECKPOINT
    if resume:
        state = _check_resumable(output, run_record)
    elif output.exists():
        shutil.rmtree(output)  # --overwrite, checked above; only after the data has been read and validated
    for note in prepared.notes:
        log(note)

    torch.manual_seed(args.seed)
    network = _build_model(encoder, task, prepared.labels)
    evaluator = _Evaluator(task, network, tokenizer, max_length, prepared)
    del encoder
    optimizer = _optimizer(network, args)
    batches_per_epoch = -(-len(prepared.train) // args.batch_size)
    total_steps = batches_per_epoch * args.epochs
    from transformers import get_linear_schedule_with_warmup

    scheduler = get_linear_schedule_with_warmup(optimizer, int(args.warmup_ratio * total_steps), total_steps)
    if resume:
        _load_checkpoint(checkpoint, network, optimizer, scheduler)
        log(f"resuming {output} after epoch {state.epoch}" + (f", step {state.step_in_epoch}" if state.step_in_epoch else ""))
    log(f"fine-tuning {task} model on {len(prepared.train)} examples ({len(prepared.labels)} labels), "
        f"dev {len(prepared.dev_inputs)}; {args.epochs} epochs × {batches_per_epoch} batches of {args.batch_size}, "
        f"lr {args.learning_rate:g}, {torch.get_num_threads()} threads")
    _Trainer(network, optimizer, scheduler, prepared, evaluator, args, state, checkpoint, run_record, log, progress,
             callbacks).train()
    return _write_final(output, evaluator, state, run_record, log)


# ---- data -----------------------------------------------------------------------------------------------------------
def _prepare(task, tokenizer, train, dev, max_length, seed, dev_share, limit, text_column, label_column, header) -> Prepared:
    if task == "text":
        return _prepare_text(tokenizer, train, dev, max_length, seed, dev_share, limit, text_column, label_column, header)
    return _prepare_token(tokenizer, train, dev, max_length, seed, dev_share, limit)


def _prepare_text(tokenizer, train, dev, max_length, seed, dev_share, limit, text_column, label_column, header) -> Prepared:
    data = read_labelled_text(train, text_column, label_column, header)
    texts, labels = data.texts[:limit], [str(v) for v in check_labels(data.labels[:limit], str(train), data.lines)]
    classes, codes = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
    check_class_counts(np.array(classes.tolist()), codes, 0)
    if dev is not None:
        dev_data = read_labelled_text(dev, text_column, label_column, header)
        dev_texts, dev_labels = dev_data.texts, [str(v) for v in dev_data.labels]
        unseen = sorted(set(dev_labels) - set(labels))
        if unseen:
            raise InputError(f"{dev}: labels {unseen} never occur in {train} (known: {sorted(set(labels))}).")
    else:
        texts, dev_texts, labels, dev_labels = _split(texts, labels, dev_share, seed, stratify=True)
    names = sorted(set(labels))
    index = {name: i for i, name in enumerate(names)}
    train_examples, cut = text_examples(tokenizer, texts, [index[v] for v in labels], max_length)
    _, dev_cut = text_examples(tokenizer, dev_texts, None, max_length)
    notes = [f"{n} {where} texts were longer than {max_length} tokens and were truncated (--max-length)."
             for n, where in ((cut, "training"), (dev_cut, "dev")) if n]
    record = _data_record(train, dev, len(texts), len(dev_texts), dev_share, seed, limit)
    record.update(text_column=text_column, label_column=label_column, header=header)
    return Prepared(names, train_examples, dev_texts, dev_labels, record, notes)


def _prepare_token(tokenizer, train, dev, max_length, seed, dev_share, limit) -> Prepared:
    from .tagging import read_tagged

    data = read_tagged(train)
    words, tags = data.words[:limit], data.tags[:limit]
    if dev is not None:
        dev_data = read_tagged(dev)
        dev_words, dev_tags = dev_data.words, dev_data.tags
    else:
        words, dev_words, tags, dev_tags = _split(words, tags, dev_share, seed, stratify=False)
    names = TaggedData(Path(train), words, tags, []).labels
    if names == ["O"]:
        raise InputError(f"{train}: every tag is 'O'; a tagger needs some entity tags (B-TYPE / I-TYPE) to learn.")
    unseen = sorted({t for s in dev_tags for t in s} - set(names))
    if unseen:
        raise InputError(f"{dev}: tags {unseen} never occur in {train} (known: {names}); the model cannot predict them.")
    index = {name: i for i, name in enumerate(names)}
    pieces, split_count = word_pieces(tokenizer, words, max_length)
    train_examples = token_examples(pieces, [[index[t] for t in s] for s in tags])
    _, dev_split = word_pieces(tokenizer, dev_words, max_length)
    notes = [f"{n} {where} sentences were longer than {max_length} tokens and were split into pieces at word "
             "boundaries (every word keeps its label)." for n, where in ((split_count, "training"), (dev_split, "dev")) if n]
    if data.converted_from_iob1:
        notes.append(f"{train}: IOB1 tags (entities starting with I-) were converted to IOB2.")
    record = _data_record(train, dev, len(words), len(dev_words), dev_share, seed, limit)
    record["columns"] = data.columns
    return Prepared(names, train_examples, dev_words, dev_tags, record, notes)


def read_labelled_text(path, text_column, label_column, header):
    """read_labelled, but a CoNLL-style word/tag file gets told to use the token task."""
    from .data import read_labelled
    from .tagging import looks_like_token_file

    if looks_like_token_file(path):
        raise InputError(f"{path}: this is a word/tag (CoNLL) file, not sentence/label data; use --task token for it.")
    return read_labelled(path, text_column, label_column, header=header)


def _word_tokenizer(encoder):
    """The tokenizer, able to take pre-split words: byte-level BPE (RoBERTa) needs add_prefix_space=True for that."""
    try:
        encoder.tokenizer([["a", "b"]], is_split_into_words=True)
        return encoder.tokenizer
    except ValueError:
        from transformers import AutoTokenizer

        source = encoder.loaded.source
        return AutoTokenizer.from_pretrained(source.path, add_prefix_space=True, local_files_only=source.kind != "hub")


def _split(items, labels, share: float, seed: int, stratify: bool):
    from sklearn.model_selection import train_test_split

    if not 0 < share < 1:
        raise InputError(f"dev share {share}: give a share between 0 and 1, e.g. 0.1, or pass --dev.")
    if len(items) < 4:
        raise InputError(f"only {len(items)} training examples: too few to hold out a dev set; pass --dev.")
    counts = {label: labels.count(label) for label in set(labels)} if stratify else {}
    strata = labels if stratify and min(counts.values()) >= 2 else None
    return train_test_split(items, labels, test_size=share, random_state=seed, stratify=strata)


def _data_record(train, dev, train_rows, dev_rows, dev_share, seed, limit) -> dict:
    if dev_rows == 0:
        raise InputError(f"the dev set{f' {dev}' if dev else ''} is empty; give a dev file with examples.")
    record = {"train": str(train), "train_sha256": _sha256(train), "train_rows": train_rows, "limit": limit,
              "dev_rows": dev_rows}
    if dev is not None:
        record.update(dev=str(dev), dev_sha256=_sha256(dev))
    else:
        record["dev"] = f"{dev_share:.0%} held out of {train} (seed {seed})"
    return record


def _sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---- model and optimizer --------------------------------------------------------------------------------------------
def _build_model(encoder, task: str, labels: list[str]):
    """A `...ForSequence/TokenClassification` model whose encoder weights are the loaded encoder's (head random)."""
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

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


def _optimizer(network, args: FinetuneArguments) -> torch.optim.AdamW:
    """AdamW; biases and LayerNorm weights are not decayed."""
    decay, no_decay = [], []
    for name, parameter in network.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    try:  # the fused kernel updates the 30k-row embedding table ~4× faster than the per-tensor loop on CPU
        return torch.optim.AdamW(groups, lr=args.learning_rate, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=args.learning_rate)


class _Evaluator:
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
            from .report import classification_metrics

            predicted = self.runner.predict(self.prepared.dev_inputs)
            metrics = classification_metrics(self.prepared.dev_gold, predicted, self.prepared.labels)
            return metrics["accuracy"], metrics
        metrics = entity_scores(self.prepared.dev_gold, self.runner.predict_word_tags(self.prepared.dev_inputs))
        return metrics["f1"], metrics


@dataclass
class _Trainer:
    """The epoch loop: steps, dev scoring, checkpoints; Ctrl-C becomes a checkpoint and a KeyboardInterrupt."""

    network: object
    optimizer: torch.optim.Optimizer
    scheduler: object
    prepared: Prepared
    evaluator: "_Evaluator"
    args: FinetuneArguments
    state: TrainingState
    checkpoint: Path
    run_record: dict
    log: Callable[[str], None]
    progress: bool | None
    callbacks: Sequence[Callable[[TrainingState], None]]

    def train(self) -> None:
        with _deferred_interrupt(self.log) as interrupted:
            while self.state.epoch < self.args.epochs and not self.state.finished:
                seen, loss_sum, seconds = self._epoch(interrupted)
                self._end_epoch(seen, loss_sum, seconds)
                if interrupted:
                    self.log(f"interrupted after epoch {self.state.epoch}: checkpoint saved in {self.checkpoint}; "
                             "run the same command with --resume to continue.")
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
        self.network.train()
        try:
            for position in range(state.step_in_epoch, len(batches)):
                rows = batches[position]
                loss = self.network(**collate([prepared.train[i] for i in rows], pad_id, with_type_ids)).loss
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.network.parameters(), args.max_grad_norm)
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
                state.step_in_epoch, state.global_step = position + 1, state.global_step + 1
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
            state.train_seconds += time.perf_counter() - started
            self._save()
            self.log(f"interrupted in epoch {state.epoch + 1} after step {state.step_in_epoch}: checkpoint saved in "
                     f"{self.checkpoint}; run the same command with --resume to continue.")
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
        self.log(f"epoch {state.epoch + 1}/{args.epochs}: train loss {entry['train_loss']:.4f}, dev "
                 f"{self.evaluator.metric_name} {score:.4f}{' (best)' if improved else ''}, {seconds:.0f}s, "
                 f"{entry['examples_per_second']:.1f} examples/s")
        state.epoch, state.step_in_epoch = state.epoch + 1, 0
        if state.epochs_without_improvement >= args.patience and state.epoch < args.epochs:
            self.log(f"early stop: no better dev score for {args.patience} epochs.")
            state.finished = True
        self._save(best_metrics=metrics if improved else None)

    def _save(self, best_metrics: dict | None = None) -> None:
        _save_checkpoint(self.checkpoint, self.network, self.optimizer, self.scheduler, self.state, self.run_record,
                         best_metrics)


@contextmanager
def _deferred_interrupt(log: Callable[[str], None]):
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
        log("interrupt: finishing the current step, then saving a checkpoint (Ctrl-C again to stop at once) ...")

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, previous)


# ---- checkpoints ----------------------------------------------------------------------------------------------------
def _check_output(output: Path, resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise InputError("--resume continues a run and --overwrite starts over: give one of them.")
    if resume:
        if (output / CONFIG_FILE).is_file():
            raise InputError(f"{output}: this run already finished; nothing to resume (--overwrite trains it again).")
        if not (output / CHECKPOINT / "state.json").is_file() and not (output / f"{CHECKPOINT}.old" / "state.json").is_file():
            raise InputError(f"{output}: no checkpoint to resume from; start the run without --resume.")
        return
    if output.exists() and not overwrite and (output / CHECKPOINT).exists() and not (output / CONFIG_FILE).exists():
        raise InputError(f"{output} holds an unfinished run; pass --resume to continue it or --overwrite to start over.")
    check_new_directory(output, overwrite)


def _check_resumable(output: Path, run_record: dict) -> TrainingState:
    directory = output / CHECKPOINT
    if not (directory / "state.json").is_file():
        (output / f"{CHECKPOINT}.old").rename(directory)  # a crash between the two renames of _save_checkpoint
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


def _save_checkpoint(directory: Path, network, optimizer, scheduler, state: TrainingState, run_record: dict,
                     best_metrics: dict | None = None) -> None:
    """Write weights, optimizer moments, RNG state and progress to a fresh directory, then swap it in."""
    from safetensors.torch import save_file

    staging = directory.with_name(f"{CHECKPOINT}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
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
    old = directory.with_name(f"{CHECKPOINT}.old")
    shutil.rmtree(old, ignore_errors=True)
    if directory.exists():
        directory.rename(old)
    staging.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def _load_checkpoint(directory: Path, network, optimizer, scheduler) -> None:
    from safetensors.torch import load_file

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


def _write_final(output: Path, evaluator: _Evaluator, state: TrainingState, run_record: dict, log):
    """Put the best epoch's weights in `output` as a transformers model + tokenizer + bertkit.json; drop the checkpoint."""
    from safetensors.torch import load_file

    from .classify import _version

    checkpoint = output / CHECKPOINT
    network = evaluator.runner.model
    network.load_state_dict(load_file(str(checkpoint / "best.safetensors")))
    metrics = json.loads((checkpoint / "best_metrics.json").read_text(encoding="utf-8"))
    staging = output / ".final.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    with quiet_transformers():
        network.save_pretrained(str(staging), safe_serialization=True)
        evaluator.tokenizer.save_pretrained(str(staging))
    history = state.history
    seen = sum(h["examples_per_second"] * h["seconds"] for h in history)
    record = {
        "kind": KIND_TEXT if run_record["task"] == "text" else KIND_TOKEN,
        "bertkit_version": _version("bertkit"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        **run_record,
        "training": {
            "epochs_run": state.epoch, "best_epoch": state.best_epoch, "stopped_early": state.finished,
            "history": history, "train_seconds": round(state.train_seconds, 1),
            "examples_per_second": round(seen / max(sum(h["seconds"] for h in history), 1e-9), 1),
        },
        "metrics": metrics,
        "versions": {name: _version(name) for name in ("torch", "transformers", "tokenizers")},
    }
    (staging / CONFIG_FILE).write_text(json.dumps(record, indent=2), encoding="utf-8")
    names = sorted(p.name for p in staging.iterdir())
    for name in [n for n in names if n != CONFIG_FILE] + [CONFIG_FILE]:  # bertkit.json last: it marks the run finished
        (staging / name).replace(output / name)
    staging.rmdir()
    shutil.rmtree(checkpoint)
    log(f"saved {output}: best epoch {state.best_epoch} (dev {evaluator.metric_name} {state.best_score:.4f})")
    loader = FineTunedClassifier if run_record["task"] == "text" else FineTunedTagger
    return loader.load(output)


def _bar(total: int, epoch: int, epochs: int, progress: bool | None):
    from tqdm.auto import tqdm

    disable = (not sys.stderr.isatty()) if progress is None else not progress
    return tqdm(total=total, unit="ex", desc=f"epoch {epoch + 1}/{epochs}", disable=disable, leave=False)
