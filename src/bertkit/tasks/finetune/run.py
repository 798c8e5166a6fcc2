"""`finetune()`: a head on the encoder, the whole model trained by transformers' `Trainer`, the best epoch saved."""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...encoder.devices import describe, resolve_device
from ...encoder.encode import Encoder
from ...encoder.models import quiet_transformers
from ...encoder.precision import check_precision
from ...errors import InputError
from ...io.writers import work_folder
from ..report import multi_label_metrics
from .arguments import FinetuneArguments
from .checkpoint import check_output, last_checkpoint, start_run, write_final
from .examples import collate
from .prepare import MULTI_LABEL, QA, REGRESSION, SINGLE_LABEL, TOKENS, Columns, Prepared, prepare, word_tokenizer
from .settings import LOGS, MAX_LENGTHS
from .trainer import (
    Evaluator,
    Examples,
    FinetuneTrainer,
    RunCallback,
    best_metrics,
    build_model,
    held_interrupt,
    history,
    qa_loss,
    step_loss,
)

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
    device: str | None = "auto",
    progress: bool | None = None,
    callbacks: Sequence[Callable[[Any], None]] = (),
    **training: Any,
) -> Any:
    """Fine-tune the encoder on a labelled file and save it to `output_dir`; returns the loaded best model.

    Parameters
    ----------
    train, dev : str or Path
        Text tasks: TSV/CSV/JSONL with text and label columns (pair: text, pair and label; JSONL fields text,
        text_pair, label); token task: CoNLL (word ... tag) or two columns; qa task: SQuAD v1.1/v2.0 JSON or flat
        JSONL (id, question, context, answers). Without `dev`, a seeded `dev_share` of the training data is held out.
    output_dir : str or Path
        The run directory: a plain transformers model, its tokenizer, `bertkit.json` and `logs/`.
    task : str
        'text' (the default), 'pair' (sentence pairs: NLI, paraphrase, similarity, relevance), 'token' (tagging)
        or 'qa' (extractive question answering: `max_length` 384, `doc_stride`), here or in `args.task` (a
        contradiction is an error). Text and pair runs classify, or with `regression=True` (implied by labels with
        decimals) score, or with `multi_label=True` give several labels.
    model : str, optional
        The encoder to start from (None: the packaged default).
    args : FinetuneArguments, optional
        Training settings; keywords (`num_train_epochs=1, lr=5e-5, batch_size=16`, any field, `lr` for
        `learning_rate`) override them, as on the command line.
    text_column, pair_column, label_column : str or int, optional
        Column names or indices (JSONL: field names).
    header : bool, optional
        Whether line 1 is a header (default: when the columns are names).
    label_separator : str
        Multi-label: what separates a row's labels in a TSV/CSV field.
    dev_share : float
        The share of `train` held out when no `dev` is given.
    limit : int, optional
        Use the first `limit` training examples.
    resume : bool
        Continue an interrupted run from its last checkpoint.
    overwrite : bool
        Replace a finished run bertkit wrote.
    device : str
        'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'. Launched by `accelerate launch` or `torchrun`, each process
        takes its own GPU (or, on CPUs, a share of the cores with the gloo backend).
    progress : bool, optional
        Report the steps (loss, examples/s, time left): a bar on a terminal, a line every few seconds elsewhere
        (default: on; False: silent).
    callbacks : list of callables
        Called after every optimizer step with `Trainer`'s `TrainerState` (a KeyboardInterrupt there interrupts as
        Ctrl-C does: at that step, with a checkpoint).
    **training
        `FinetuneArguments` fields.

    Returns
    -------
    FineTunedClassifier or FineTunedTagger or FineTunedQA
        The best epoch's model, loaded from `output_dir` on torch, as it was trained (None on the other processes of a
        distributed run); `load_run(output_dir)` runs it on the fastest engine (OpenVINO, exported then).
    """
    args = _arguments(args, task, training)
    output, wanted = Path(output_dir), _check_device(args, device)
    # the processes as the run's Trainer will see them: arguments made before the device was known (as `args` were)
    # set accelerate up with each process on a CPU the only one, so each would check and write the output
    state = _placed(args, wanted).distributed_state
    if not state.is_main_process:  # one voice: the main process says what happens
        logging.getLogger("bertkit").setLevel(logging.ERROR)
    if state.is_main_process:  # one process checks the output and writes it; the others follow (a second check
        check_output(output, resume, overwrite, [train, dev, model])  # raced the main one's job record and refused it)
    state.wait_for_everyone()
    encoder = Encoder.from_pretrained(model, device="cpu", engine="torch")  # its weights are about to change
    columns = Columns(text_column, label_column, pair_column, header, label_separator)
    prepared, run_record, tokenizer = _prepare(args, encoder, train, dev, dev_share, limit, columns)
    work = start_run(output, run_record, resume) if state.is_main_process else work_folder(output)
    state.wait_for_everyone()
    for note in prepared.notes:
        logger.warning(note)
    torch.manual_seed(args.seed)
    network = build_model(encoder, args.task, prepared.labels, prepared.problem)
    evaluator = Evaluator(args.task, network, tokenizer, run_record["max_length"], prepared)
    del encoder
    trainer = _train(args, work, evaluator, wanted, progress, state, list(callbacks), resume)
    training = _training_record(trainer, evaluator.metric_name, args)
    run_record.update(device=describe(trainer.args.device), processes=state.num_processes)
    result = None
    if state.is_main_process:
        metrics = best_metrics(trainer.state)
        result = write_final(output, work, trainer.model, evaluator.runner, run_record, training, metrics)
    state.wait_for_everyone()
    return result


def _prepare(
    args: FinetuneArguments, encoder: Encoder, train: Any, dev: Any, dev_share: float, limit: int | None, columns: Any
) -> tuple[Prepared, dict, Any]:
    """Read and tokenize the data; return it, the run's record and the tokenizer."""
    task = args.task
    max_length = min(args.max_length or MAX_LENGTHS.get(task, encoder.max_length), encoder.max_length)
    tokenizer = word_tokenizer(encoder) if task == "token" else encoder.tokenizer
    problem = {"token": TOKENS, "qa": QA}.get(task) or (
        REGRESSION if args.regression else MULTI_LABEL if args.multi_label else SINGLE_LABEL
    )
    prepared = prepare(
        task, problem, tokenizer, train, dev, max_length, args.seed, dev_share, limit, columns, args.doc_stride
    )
    args.fill_task_defaults(questions=prepared.data_record["train_rows"])  # qa's schedule: by its data's size
    run_record = {
        "task": task,
        "problem": prepared.problem,
        "base_model": {**dataclasses.asdict(encoder.source), "fingerprint": encoder.fingerprint},
        "args": args.record(),
        "labels": prepared.labels,
        "max_length": max_length,
        "data": prepared.data_record,
        "baseline": majority_baseline(prepared),
    }
    return prepared, run_record, tokenizer


def _placed(args: FinetuneArguments, device: torch.device, **run: Any) -> FinetuneArguments:
    """`args` on `device` (gloo between torchrun's processes on CPUs), in the precision of `mixed_precision`."""
    cpu, launched = device.type == "cpu", int(os.environ.get("WORLD_SIZE", "1")) > 1  # accelerate would take MPI
    return dataclasses.replace(
        args,
        use_cpu=cpu,
        ddp_backend="gloo" if cpu and launched else None,  # a backend given makes one process call get_world_size
        fp16=args.mixed_precision == "fp16",
        bf16=args.mixed_precision == "bf16",
        **run,
    )


def _train(
    args: FinetuneArguments,
    work: Path,
    evaluator: Evaluator,
    device: torch.device,
    progress: bool | None,
    state: Any,
    callbacks: list,
    resume: bool,
) -> FinetuneTrainer:
    """Train in `work` (from its last checkpoint when resuming); a Ctrl-C saves the step, raises KeyboardInterrupt."""
    trainer = _trainer(args, work, evaluator, device, state.num_processes)
    checkpoint = last_checkpoint(work) if resume else None
    if resume and checkpoint is None:
        logger.info("%s stopped before its first checkpoint: starting it from the beginning", work)
    _say_start(args, evaluator.prepared, trainer, work, checkpoint, device)
    with held_interrupt() as requested:
        epochs, main = args.num_train_epochs, state.is_main_process
        run = RunCallback(work / LOGS, evaluator.metric_name, epochs, args.batch_size, main, callbacks, requested)
        run.show = main and progress is not False
        trainer.add_callback(run)
        with quiet_transformers():  # the trainer's own bar stays; its printed logs and save bars go
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    if run.interrupted:
        logger.warning(
            "interrupted %s: checkpoint saved in %s; run the same command with --resume to continue.",
            _where(trainer.state.global_step, trainer.state.max_steps, int(args.num_train_epochs)),
            work / f"checkpoint-{trainer.state.global_step}",
        )
        raise KeyboardInterrupt
    return trainer


def _trainer(
    args: FinetuneArguments, work: Path, evaluator: Evaluator, device: torch.device, processes: int
) -> FinetuneTrainer:
    """`Trainer` of the dev scorer's model and data: bertkit's batches and loss, best epoch on dev, early stopping."""
    from transformers import EarlyStoppingCallback, PrinterCallback
    from transformers.integrations import TensorBoardCallback

    callbacks: list = [EarlyStoppingCallback(early_stopping_patience=args.early_stopping_patience)]
    if "tensorboard" in args.report_to:
        from torch.utils.tensorboard import SummaryWriter

        callbacks.append(TensorBoardCallback(SummaryWriter(log_dir=str(work / LOGS))))
    trackers = [name for name in args.report_to if name != "tensorboard"]
    per_device = max(1, math.ceil(args.batch_size / (args.gradient_accumulation_steps * processes)))
    training_args = _placed(
        args,
        device,
        output_dir=str(work),
        per_device_train_batch_size=per_device,
        report_to=trackers or "none",
        disable_tqdm=True,  # bertkit's one reporter draws the bar (RunCallback), transformers' prints raw dicts
    )
    with quiet_transformers():
        runner = evaluator.runner
        trainer = FinetuneTrainer(
            model=runner.model,
            args=training_args,
            train_dataset=Examples(evaluator.prepared.train),
            eval_dataset=Examples(evaluator.prepared.train[:1]),  # dev is scored by the run's own predict (`evaluate`)
            data_collator=functools.partial(
                collate, pad_token_id=runner.tokenizer.pad_token_id, with_type_ids=runner.takes_type_ids
            ),
            compute_loss_func=qa_loss if args.task == "qa" else step_loss,
            callbacks=callbacks,
            evaluator=evaluator,
            batch_size=args.batch_size,
        )
    trainer.remove_callback(PrinterCallback)  # bertkit says what an epoch did, in one line (RunCallback)
    return trainer


def _check_device(args: FinetuneArguments, device: str | None) -> torch.device:
    """Return the device, checked for the mixed precision asked for (one line each that it cannot run)."""
    wanted = resolve_device(device)
    if args.mixed_precision != "no":
        check_precision(args.mixed_precision, wanted, name="mixed_precision")
    if wanted.type == "cuda":
        torch.cuda.set_device(wanted)
    return wanted


def _where(global_step: int, max_steps: int, epochs: int) -> str:
    """'in epoch 2 of 3, after its step 3 (step 9 of 24)': one way to count, interrupted and resumed alike."""
    epoch, step = divmod(global_step, max(1, math.ceil(max_steps / max(epochs, 1))))
    overall = f"(step {global_step} of {max_steps})"
    if step == 0 and epoch:
        return f"after epoch {epoch} of {epochs} {overall}"
    return f"in epoch {epoch + 1} of {epochs}, after its step {step} {overall}"


def _say_start(
    args: FinetuneArguments, prepared: Prepared, trainer: Any, output: Path, checkpoint: Path | None, device: Any
) -> None:
    """Say what the run does: data, steps, learning rate, device (and where it resumes)."""
    parts = [f"{args.gradient_accumulation_steps} micro-batches"] if args.gradient_accumulation_steps > 1 else []
    parts += [f"split over {trainer.args.world_size} processes"] if trainer.args.world_size > 1 else []
    if checkpoint is not None:
        saved = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        logger.info("resuming %s %s", output, _where(saved["global_step"], saved["max_steps"], args.num_train_epochs))
    read = f"{len(prepared.train)} examples ({len(prepared.labels)} labels)"
    if args.task == "qa":  # an example is a window of a context; the labels, its start and end
        read = f"{prepared.data_record['train_rows']} questions ({len(prepared.train)} windows)"
    steps = math.ceil(len(prepared.train) / args.batch_size)
    said = (
        f"fine-tuning {args.task} model on {read}, dev {len(prepared.dev_inputs)}; {args.num_train_epochs} "
        f"epoch{'s' if args.num_train_epochs != 1 else ''} × "
        f"{steps} steps of {args.batch_size}{f' ({chr(44).join(parts)})' if parts else ''}, lr {args.learning_rate:g}, "
        f"on {describe(device)}{'' if device.type != 'cpu' else f' ({torch.get_num_threads()} threads)'}"
        f"{'' if args.mixed_precision == 'no' else f', {args.mixed_precision} mixed precision'}"
    )
    logger.info(said)


def _training_record(trainer: FinetuneTrainer, metric: str, args: FinetuneArguments) -> dict:
    """Record what bertkit.json says of the training: epochs, the best one, each epoch's line, speed."""
    epochs = history(trainer.state)
    best = max(epochs, key=lambda h: h["dev_score"]) if epochs else {"epoch": None, "dev_score": 0.0}
    seconds = sum(h["seconds"] for h in epochs)
    seen = sum(h["examples_per_second"] * h["seconds"] for h in epochs)
    return {
        "epochs_run": len(epochs),
        "best_epoch": best["epoch"],
        "best_score": best["dev_score"],
        "metric": metric,
        "stopped_early": len(epochs) < args.num_train_epochs,
        "history": epochs,
        "train_seconds": round(seconds, 1),
        "examples_per_second": round(seen / max(seconds, 1e-9), 1),
    }


ZERO_BASELINES = {  # what a model that learned nothing does, scoring 0 (correlation, entity F1)
    REGRESSION: "predicting the training mean (no correlation)",
    TOKENS: "tagging every word 'O'",
}


def _arguments(args: FinetuneArguments | None, task: str | None, keywords: dict) -> FinetuneArguments:
    """`args` with the keyword settings (`lr` for `learning_rate`) and the task resolved, checked once."""
    given = {"learning_rate" if key == "lr" else key: value for key, value in keywords.items()}
    names = {f.name for f in dataclasses.fields(FinetuneArguments)}
    unknown = sorted(given.keys() - names)
    if unknown:
        raise InputError(
            f"finetune() got an unknown setting {unknown[0]!r}; the settings are FinetuneArguments' fields "
            "(and lr for learning_rate)."
        )
    base = args if args is not None else FinetuneArguments()
    chosen = given.pop("task", None) or base.task
    if task is not None and chosen is not None and task != chosen:
        raise InputError(f"task={task!r} but args.task={chosen!r}: they contradict each other; give the task once.")
    return dataclasses.replace(base, **given, task=task or chosen or "text")


QA_MARGIN = 5.0  # F1 points: a QA run this close to "always no answer" has found few answers (issue 45)
QA_ADVICE = (
    "Train longer (--epochs, --patience): on the packaged model 300 questions learned nothing in 3 epochs and reached "
    "dev F1 46.9 against 27.8 with --epochs 10 --lr 1e-4 --patience 10, the defaults under 800 questions "
    "(docs/how-to/qa.md, 'Small data'); or give more questions (1,000 reached 87.3 at the defaults); or start from a "
    "SQuAD-trained --model (its span head is kept)."
)


def majority_baseline(prepared: Any) -> dict:
    """Score on dev a model that learned nothing: majority label, training mean, no labels, all 'O', no answer."""
    if prepared.problem in ZERO_BASELINES:
        return {"what": ZERO_BASELINES[prepared.problem], "score": 0.0}
    if prepared.problem == MULTI_LABEL:  # every text the training share of each label, scored at its best threshold
        shares = np.mean([example.labels for example in prepared.train], axis=0)
        constant = np.tile(shares, (len(prepared.dev_gold), 1))
        score = multi_label_metrics(prepared.dev_gold, constant, prepared.labels)["micro_f1"]
        return {"what": "predicting the same labels for every text (their training shares)", "score": score}
    if prepared.problem == QA:
        unanswerable = sum(1 for answers in prepared.dev_gold if not answers)
        score = 100.0 * unanswerable / max(len(prepared.dev_gold), 1)
        return {"what": "always answering 'no answer'", "score": score, "margin": QA_MARGIN, "advice": QA_ADVICE}
    counts = collections.Counter(example.labels for example in prepared.train)
    majority = prepared.labels[counts.most_common(1)[0][0]]
    score = sum(gold == majority for gold in prepared.dev_gold) / max(len(prepared.dev_gold), 1)
    return {"what": f"always predicting the majority label {majority!r}", "score": score}
