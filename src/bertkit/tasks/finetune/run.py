"""Fine-tuning: a classification head on the encoder, the whole model updated, checkpointed every epoch, resumable.

The saved directory is a plain transformers model (`AutoModelFor{Sequence,Token}Classification.from_pretrained`)
plus `bertkit.json` with the arguments, data fingerprints, per-epoch history and dev metrics.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import get_linear_schedule_with_warmup

from ...encoder.devices import describe, resolve_device
from ...encoder.encode import Encoder
from ...encoder.precision import check_precision
from ...encoder.threads import set_threads
from ...errors import InputError
from ...io.writers import remove_bertkit_directory
from .arguments import CHECKPOINT, LOGS, PAIR_MAX_LENGTH, TEXT_MAX_LENGTH, FinetuneArguments, TrainingState
from .checkpoint import check_output, check_resumable, load_checkpoint, write_final
from .prepare import MULTI_LABEL, REGRESSION, SINGLE_LABEL, TOKENS, Columns, prepare, word_tokenizer
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
    pair_column: str | int | None = None,
    header: bool | None = None,
    label_separator: str = ",",
    dev_share: float = 0.1,
    limit: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    threads: int | None = None,
    device: str | None = "auto",
    progress: bool | None = None,
    callbacks: Sequence[Callable[[TrainingState], None]] = (),
    **training,
):
    """Fine-tune the encoder on a labelled file and save it to `output_dir`; returns the loaded best model.

    Parameters
    ----------
    train, dev : str or Path
        Text tasks: TSV/CSV/JSONL with text and label columns (pair: text, pair and label; JSONL fields text,
        text_pair, label); token task: CoNLL (word ... tag) or two columns. Without `dev`, a seeded `dev_share` of
        the training data is held out.
    output_dir : str or Path
        The run directory: a plain transformers model, its tokenizer, `bertkit.json` and `logs/`.
    task : str
        'text' (the default), 'pair' (sentence pairs: NLI, paraphrase, similarity, relevance) or 'token' (tagging),
        here or in `args.task` (a contradiction is an error). Text and pair runs classify, or with
        `regression=True` (implied by labels with decimals) score, or with `multi_label=True` give several labels.
    text_column, pair_column, label_column : str or int, optional
        Column names or indices (JSONL: field names).
    label_separator : str
        Multi-label: what separates a row's labels in a TSV/CSV field.
    model : str, optional
        The encoder to start from (None: the packaged default).
    args : FinetuneArguments, optional
        Training settings; keywords (`epochs=1, lr=5e-5, batch_size=16`, any field, `lr` for `learning_rate`)
        override them, as on the command line.
    resume : bool
        Continue an interrupted run from its last checkpoint.
    overwrite : bool
        Replace a finished run bertkit wrote.
    device : str
        'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'. Launched by `accelerate launch` or `torchrun`, each process
        takes its own GPU (or, on CPUs, a share of the cores with the gloo backend).
    callbacks : list of callables
        Called after every optimizer step with the `TrainingState` (a KeyboardInterrupt there interrupts as
        Ctrl-C does).

    Returns
    -------
    FineTunedClassifier or FineTunedTagger
        The best epoch's model, loaded from `output_dir` (None on the other processes of a distributed run).
    """
    args = _with_keywords(copy.deepcopy(args) if args is not None else FinetuneArguments(), training)
    if task is not None and args.task is not None and task != args.task:
        raise InputError(f"task={task!r} but args.task={args.task!r}: they contradict each other; give the task once.")
    task = args.task = task or args.task or "text"
    args.check()
    output = Path(output_dir)
    set_threads(threads)
    accelerator = make_accelerator(args, device, output)
    if not accelerator.is_main_process:  # one voice: the main process says what happens
        logging.getLogger("bertkit").setLevel(logging.ERROR)
    with accelerator.main_process_first():  # the main process may tidy an interrupted replace; the others only look
        check_output(output, resume, overwrite)

    encoder = Encoder.from_pretrained(model)
    default_length = {"text": TEXT_MAX_LENGTH, "pair": PAIR_MAX_LENGTH}.get(task, encoder.max_length)
    max_length = min(args.max_length or default_length, encoder.max_length)
    tokenizer = word_tokenizer(encoder) if task == "token" else encoder.tokenizer
    problem = (
        TOKENS
        if task == "token"
        else REGRESSION
        if args.regression
        else MULTI_LABEL
        if args.multi_label
        else SINGLE_LABEL
    )
    columns = Columns(text_column, label_column, pair_column, header, label_separator)
    prepared = prepare(task, problem, tokenizer, train, dev, max_length, args.seed, dev_share, limit, columns)
    run_record = {
        "task": task,
        "problem": prepared.problem,
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
    elif output.exists() and accelerator.is_main_process:
        remove_bertkit_directory(output)  # --overwrite, checked above; only after the data has been read and validated
    accelerator.wait_for_everyone()
    for note in prepared.notes:
        logger.warning(note)

    torch.manual_seed(args.seed)
    network = build_model(encoder, task, prepared.labels, prepared.problem)
    del encoder
    optimizer = make_optimizer(network, args)
    batches_per_epoch = -(-len(prepared.train) // args.batch_size)
    total_steps = batches_per_epoch * args.epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, int(args.warmup_ratio * total_steps), total_steps)
    network, optimizer = accelerator.prepare(network, optimizer)
    evaluator = Evaluator(task, accelerator.unwrap_model(network), tokenizer, max_length, prepared)
    torch.manual_seed(args.seed + accelerator.process_index)  # dropout: each process its own draws, seeded
    if resume:
        load_checkpoint(checkpoint, accelerator, network, optimizer, scheduler)
        logger.info(
            f"resuming {output} after epoch {state.epoch}"
            + (f", step {state.step_in_epoch}" if state.step_in_epoch else "")
        )
    logger.info(
        f"fine-tuning {task} model on {len(prepared.train)} examples ({len(prepared.labels)} labels), "
        f"dev {len(prepared.dev_inputs)}; {args.epochs} epochs × {batches_per_epoch} steps of {args.batch_size}"
        f"{_parts(args, accelerator)}, lr {args.learning_rate:g}, on {describe(accelerator.device)}"
        f"{'' if accelerator.device.type != 'cpu' else f' ({torch.get_num_threads()} threads)'}"
        f"{'' if args.mixed_precision == 'no' else f', {args.mixed_precision} mixed precision'}"
    )
    if args.report_to:
        accelerator.init_trackers("bertkit-finetune", config=_tracker_config(args, run_record))
    try:
        Trainer(
            accelerator,
            network,
            optimizer,
            scheduler,
            prepared,
            evaluator,
            args,
            state,
            checkpoint,
            run_record,
            progress,
            callbacks,
            output / LOGS,
        ).train()
        run_record.update(baseline=baseline, device=describe(accelerator.device), processes=accelerator.num_processes)
        result = None
        if accelerator.is_main_process:
            result = write_final(
                output, evaluator.runner.model, evaluator.tokenizer, evaluator.metric_name, state, run_record
            )
        accelerator.wait_for_everyone()
    finally:
        accelerator.end_training()  # closes the trackers (and, launched distributed, the process group)
    return result


def make_accelerator(args: FinetuneArguments, device: str | None, output: Path):
    """accelerate's Accelerator for this run: device, mixed precision, trackers writing under `output/logs`."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import ProjectConfiguration

    wanted = resolve_device(device)
    if args.mixed_precision == "fp16" and wanted.type != "cuda":
        raise InputError(
            "mixed_precision='fp16' needs a CUDA GPU; on a CPU use 'bf16' (where the CPU has native bf16) or 'no'."
        )
    if args.mixed_precision == "bf16" and wanted.type == "cpu":
        check_precision("bf16")
    if args.mixed_precision == "bf16" and wanted.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise InputError("mixed_precision='bf16': this GPU has no bf16; use 'fp16'.")
    if wanted.type == "cuda":
        torch.cuda.set_device(wanted)
    project = ProjectConfiguration(project_dir=str(output), logging_dir=str(output / LOGS))
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        # accelerate keeps one process-wide state and refuses a second run with other settings (a notebook that
        # fine-tunes twice); a single process may start afresh. `_reset_state` is what accelerate's own tests use.
        AcceleratorState._reset_state(reset_partial_state=True)
    with quiet_accelerate():
        return Accelerator(
            cpu=wanted.type == "cpu",
            mixed_precision=args.mixed_precision,
            log_with=list(args.report_to) or None,
            project_config=project,
        )


@contextmanager
def quiet_accelerate():
    """accelerate logs its set-up at INFO through its own logger; bertkit says what matters itself."""
    accelerate_logger = logging.getLogger("accelerate")
    level = accelerate_logger.level
    accelerate_logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        accelerate_logger.setLevel(level)


def _parts(args: FinetuneArguments, accelerator) -> str:
    parts = []
    if args.gradient_accumulation_steps > 1:
        parts.append(f"{args.gradient_accumulation_steps} micro-batches")
    if accelerator.num_processes > 1:
        parts.append(f"split over {accelerator.num_processes} processes")
    return f" ({', '.join(parts)})" if parts else ""


def _tracker_config(args: FinetuneArguments, run_record: dict) -> dict:
    """Flat, scalar settings for the trackers' hyper-parameter tables."""
    config = {k: v for k, v in asdict(args).items() if isinstance(v, (int, float, str, bool))}
    return {**config, "base_model": run_record["base_model"]["spec"], "labels": len(run_record["labels"])}


KEYWORD_ALIASES = {"lr": "learning_rate"}  # the command line's short names


def _with_keywords(args: FinetuneArguments, training: dict) -> FinetuneArguments:
    fields = {f.name for f in dataclasses.fields(FinetuneArguments)}
    for key, value in training.items():
        name = KEYWORD_ALIASES.get(key, key)
        if name not in fields:
            raise InputError(
                f"finetune() got an unknown setting {key!r}; the settings are {', '.join(sorted(fields))} "
                "(and lr for learning_rate)."
            )
        setattr(args, name, value)
    return args


def majority_baseline(task: str, prepared) -> dict:
    """What a model that learned nothing scores on dev: the most frequent training label; for a score, the training
    mean (no correlation: 0); for several labels, none at all (micro-F1 0); for tags, 'O' everywhere (entity F1 0)."""
    if prepared.problem == REGRESSION:
        return {"what": "predicting the training mean (no correlation)", "score": 0.0}
    if prepared.problem == MULTI_LABEL:
        return {"what": "predicting no label", "score": 0.0}
    if prepared.problem == TOKENS:
        return {"what": "tagging every word 'O'", "score": 0.0}
    counts = collections.Counter(example.labels for example in prepared.train)
    majority = prepared.labels[counts.most_common(1)[0][0]]
    score = sum(gold == majority for gold in prepared.dev_gold) / max(len(prepared.dev_gold), 1)
    return {"what": f"always predicting the majority label {majority!r}", "score": score}
