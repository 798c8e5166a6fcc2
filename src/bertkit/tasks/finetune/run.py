"""Fine-tuning: a classification head on the encoder, the whole model updated, checkpointed every epoch, resumable.

The saved directory is a plain transformers model (`AutoModelFor{Sequence,Token}Classification.from_pretrained`)
plus `bertkit.json` with the arguments, data fingerprints, per-epoch history and dev metrics.
"""

from __future__ import annotations

import logging
import collections
import copy
import dataclasses
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

import torch
from transformers import get_linear_schedule_with_warmup

from ...encoder.encode import Encoder
from ...encoder.threads import set_threads
from ...errors import InputError
from ...io.writers import remove_bertkit_directory
from .arguments import CHECKPOINT, TEXT_MAX_LENGTH, FinetuneArguments, TrainingState
from .checkpoint import check_output, check_resumable, load_checkpoint, write_final
from .prepare import prepare, word_tokenizer
from .trainer import Evaluator, Trainer, build_model, make_optimizer

logger = logging.getLogger(__name__)


def finetune(
    train: str | Path,
    dev: str | Path | None = None,
    *,
    output_dir: str | Path,
    task: str | None = None,
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
    callbacks: Sequence[Callable[[TrainingState], None]] = (),
    **training,
):
    """Fine-tune the encoder on a labelled file and save it to `output_dir`; returns the loaded best model.

    task='text' (the default) or 'token', here or in `args.task` (a contradiction is an error). 'text': TSV/CSV/JSONL with text and label columns. task='token': CoNLL (word … tag) or two-column files.
    Training settings go as keywords, as on the command line (`epochs=1, lr=5e-5, batch_size=16, patience=2`; every
    `FinetuneArguments` field, `lr` for `learning_rate`), or as `args=FinetuneArguments(...)`; keywords override args.
    Without `dev`, a seeded `dev_share` of the training data is held out. `resume=True` continues an interrupted
    run from its last checkpoint; `callbacks` are called after every optimizer step (KeyboardInterrupt there
    interrupts like Ctrl-C does).
    """
    args = _with_keywords(copy.deepcopy(args) if args is not None else FinetuneArguments(), training)
    if task is not None and args.task is not None and task != args.task:
        raise InputError(f"task={task!r} but args.task={args.task!r}: they contradict each other; give the task once.")
    task = args.task = task or args.task or "text"
    args.check()
    output = Path(output_dir)
    check_output(output, resume, overwrite)
    set_threads(threads)

    encoder = Encoder.from_pretrained(model)
    max_length = min(args.max_length or (TEXT_MAX_LENGTH if task == "text" else encoder.max_length), encoder.max_length)
    tokenizer = encoder.tokenizer if task == "text" else word_tokenizer(encoder)
    prepared = prepare(task, tokenizer, train, dev, max_length, args.seed, dev_share, limit,
                        text_column, label_column, header)
    run_record = {
        "task": task,
        "base_model": {"spec": encoder.name, "path": str(encoder.source.path), "fingerprint": encoder.fingerprint},
        "args": asdict(args),
        "labels": prepared.labels,
        "max_length": max_length,
        "data": prepared.data_record,
    }
    baseline = majority_baseline(task, prepared)
    state = TrainingState()
    checkpoint = output / CHECKPOINT
    if resume:
        state = check_resumable(output, run_record)
    elif output.exists():
        remove_bertkit_directory(output)  # --overwrite, checked above; only after the data has been read and validated
    for note in prepared.notes:
        logger.warning(note)

    torch.manual_seed(args.seed)
    network = build_model(encoder, task, prepared.labels)
    evaluator = Evaluator(task, network, tokenizer, max_length, prepared)
    del encoder
    optimizer = make_optimizer(network, args)
    batches_per_epoch = -(-len(prepared.train) // args.batch_size)
    total_steps = batches_per_epoch * args.epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, int(args.warmup_ratio * total_steps), total_steps)
    if resume:
        load_checkpoint(checkpoint, network, optimizer, scheduler)
        logger.info(f"resuming {output} after epoch {state.epoch}" + (f", step {state.step_in_epoch}" if state.step_in_epoch else ""))
    logger.info(f"fine-tuning {task} model on {len(prepared.train)} examples ({len(prepared.labels)} labels), "
        f"dev {len(prepared.dev_inputs)}; {args.epochs} epochs × {batches_per_epoch} batches of {args.batch_size}, "
        f"lr {args.learning_rate:g}, {torch.get_num_threads()} threads")
    Trainer(network, optimizer, scheduler, prepared, evaluator, args, state, checkpoint, run_record, progress,
             callbacks).train()
    run_record["baseline"] = baseline
    return write_final(output, evaluator.runner.model, evaluator.tokenizer, evaluator.metric_name, state, run_record)




KEYWORD_ALIASES = {"lr": "learning_rate"}  # the command line's short names


def _with_keywords(args: FinetuneArguments, training: dict) -> FinetuneArguments:
    fields = {f.name for f in dataclasses.fields(FinetuneArguments)}
    for key, value in training.items():
        name = KEYWORD_ALIASES.get(key, key)
        if name not in fields:
            raise InputError(f"finetune() got an unknown setting {key!r}; the settings are {', '.join(sorted(fields))} "
                             "(and lr for learning_rate).")
        setattr(args, name, value)
    return args


def majority_baseline(task: str, prepared) -> dict:
    """What predicting the most frequent training label scores on dev (tagging: all 'O', entity F1 0)."""
    if task != "text":
        return {"what": "tagging every word 'O'", "score": 0.0}
    counts = collections.Counter(example.labels for example in prepared.train)
    majority = prepared.labels[counts.most_common(1)[0][0]]
    score = sum(gold == majority for gold in prepared.dev_gold) / max(len(prepared.dev_gold), 1)
    return {"what": f"always predicting the majority label {majority!r}", "score": score}
