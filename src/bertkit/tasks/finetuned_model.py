"""`FineTuned`: a fine-tuned transformers model and its tokenizer loaded from a run, run through the one runner."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import AutoTokenizer

from ..display import facts_table
from ..encoder import tokenize as tok
from ..encoder.devices import describe, resolve_device
from ..encoder.engines import weights_digest
from ..encoder.models import quiet_transformers, refuse_model_code
from ..encoder.network import Network
from ..encoder.runner import Row, Runner
from ..errors import InputError, ModelLoadError, brief
from ..records import new_record
from .attributions import ExplainsPredictions
from .runs import CONFIG_FILE, read_run_config, write_run

logger = logging.getLogger(__name__)

EVAL_BATCH_SIZE = 64


class FineTuned(ExplainsPredictions):
    """A transformers `AutoModelFor...` and its tokenizer, run without gradients through the one `Runner`.

    Every fine-tuned head (classifier, tagger, question answering) is one of these plus its own pre- and
    post-processing.
    """

    KIND: str  # the run kind written in the run's config
    AUTO_CLASS: str  # the transformers auto class that loads the model
    LONG_TEXTS: tuple[str, ...] = ("window",)  # the long-text policies it honours, its default first
    OUTPUTS: tuple[str, ...] = ("logits",)  # what its model returns that `_take` reads (engines.HEAD_OUTPUTS' order)

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_length: int,
        record: dict | None = None,
        precision: str | None = None,
        long_text: str | None = None,
        directory: str | Path | None = None,
        engine: str = "torch",
    ) -> None:
        self.long_text = long_text or self.LONG_TEXTS[0]
        if self.long_text not in self.LONG_TEXTS:
            honoured = ", ".join(map(repr, self.LONG_TEXTS))
            raise InputError(
                f"long_text={long_text!r}: {type(self).__name__} takes {honoured}"
                + ("." if len(self.LONG_TEXTS) > 1 else " (it reads every token of a long text, in windows).")
            )
        self.model, self.tokenizer, self.max_length, self.record_ = model, tokenizer, max_length, record or {}
        trained = self.record_.get("precision", "fp32")
        own = str(directory) if directory else None  # a run without its own int8 calibration: cached by its weights
        # a run being trained is scored on torch (its weights change); a saved one may run on OpenVINO
        self._holding = dict(
            precision=precision or trained, engine=engine, calibration_dir=own, source=own or type(self).__name__
        )
        held = self.network = self._hold()
        self.precision, self.engine, self.engine_reason = held.precision, held.engine, held.engine_reason
        if self.precision != trained:
            logger.warning(
                "this model was fine-tuned and evaluated at %s and is now used at %s: its predictions may "
                "differ slightly from the evaluated ones.",
                trained,
                self.precision,
            )
        labels = getattr(model.config, "id2label", None) or {}
        self.classes_ = np.array([labels.get(i, str(i)) for i in range(model.config.num_labels)])
        self.takes_type_ids = self.network.takes_type_ids

    def _hold(self) -> Network:
        """Hold the model where it is now, at the run's precision and engine (the one model holder)."""
        digest, width = (lambda: weights_digest(self.model)), self.max_length
        held = dict(width=width, max_length=width, digest=digest, device=self.device, outputs=self.OUTPUTS)
        return Network(self.model, self.tokenizer, **held, **self._holding)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | Path,
        *,
        precision: str | None = None,
        long_text: str | None = None,
        device: str | None = "auto",
        engine: str | None = None,
    ) -> Any:
        """Load a run with plain transformers from safetensors (what `bertkit finetune` saved), remote code off.

        Parameters
        ----------
        directory : str or Path
            The run directory.
        precision : str, optional
            None runs at the precision the model was trained with; 'int8' quantises the encoder layers (with the
            directory's own calibration when `bertkit quantize` wrote one), 'bf16'/'fp16' autocast where they run.
        long_text : {'truncate', 'error', 'window'}, optional
            A classifier's text longer than the run's maximum length: cut (said; the default), refused, or read in
            windows. Taggers and question answering read every token of a long text, in windows, and take only
            'window'.
        device : str
            'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'.
        engine : str, optional
            'auto' (OpenVINO for fp32 and bf16 on a CPU when it is installed, else torch), 'torch' or 'openvino';
            None reads $BERTKIT_ENGINE, else 'auto' (as `Encoder.from_pretrained`).

        Returns
        -------
        FineTuned
            Of the class it is called on.
        """
        record = read_run_config(directory, expected_kind=cls.KIND)
        refuse_model_code(directory)
        auto = getattr(transformers, cls.AUTO_CLASS)
        try:
            with quiet_transformers():
                local = {"trust_remote_code": False, "local_files_only": True}
                model = auto.from_pretrained(str(directory), use_safetensors=True, **local)
                tokenizer = AutoTokenizer.from_pretrained(str(directory), **local)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{directory}: cannot load the fine-tuned model ({brief(exc)}).") from None
        model.eval().to(resolve_device(device))
        return cls(model, tokenizer, int(record["max_length"]), record, precision, long_text, directory, engine)

    def save_pretrained(self, directory: str | Path, *, overwrite: bool = False) -> Path:
        """Write this run (model, tokenizer, `bertkit.json`) as a new directory, complete or absent.

        Parameters
        ----------
        directory : str or Path
            The run directory to create; plain transformers loads it.
        overwrite : bool
            Replace a run bertkit wrote there (never a folder it did not write).

        Returns
        -------
        Path
            The directory.
        """
        fields = {key: value for key, value in self.record_.items() if key != "bertkit"}  # stamped anew
        record = new_record(self.KIND, **{**fields, "max_length": self.max_length})
        return write_run(directory, {CONFIG_FILE: record}, overwrite=overwrite, weights=(self.model, self.tokenizer))

    @property
    def device(self) -> torch.device:
        """Where the model's weights are (inputs go there)."""
        return next(self.model.parameters()).device

    def facts(self) -> dict[str, str]:
        """Say what this run is, in a few lines: what `repr` and Jupyter show."""
        record = self.record_
        metrics = {k: v for k, v in record.get("metrics", {}).items() if isinstance(v, float) and "baseline" not in k}
        facts = {
            "task": str(record.get("task", "text")),
            "base model": str(record.get("base_model", {}).get("spec", "?")),
            "labels": ", ".join(map(str, self.classes_[:12])) + (" …" if len(self.classes_) > 12 else ""),
            "dev": ", ".join(f"{k} {v:.4f}" for k, v in list(metrics.items())[:4]) or "not evaluated",
            "max_length": str(self.max_length),
            "runs": f"{self.precision} on {describe(self.device)}",
        }
        if record.get("training"):
            training = record["training"]
            facts["trained"] = f"{training.get('epochs_run')} epochs (best {training.get('best_epoch')})"
        return facts

    def evaluate(self, inputs: Sequence, labels: Sequence) -> Any:
        """Score this run on labelled data the way its problem is scored: what `bertkit evaluate` prints.

        Parameters
        ----------
        inputs : list
            Texts, (text, pair) tuples for a pair model, or word lists for a tagger.
        labels : list
            A label per text (a score for a regressor, a list of labels for a multi-label model), or a tag list per
            sentence.

        Returns
        -------
        EvaluationReport
            A dict of the metrics; a table (and the confusion matrix drawn) in Jupyter.
        """
        from .evaluate import evaluate

        return evaluate(self, inputs, labels)

    def __repr__(self) -> str:
        facts = self.facts()
        described = f"{facts['task']} on {facts['base model']}; labels {facts['labels']}; dev {facts['dev']}"
        return f"{type(self).__name__}({described})"

    def _repr_html_(self) -> str:
        return facts_table(self.facts(), type(self).__name__)

    def runner(self, batch_size: int = EVAL_BATCH_SIZE) -> Runner:
        """Return the one runner over this model: token-budget passes, two at once on a CPU, split on out-of-memory."""
        if self.network.device != self.device:  # a run being trained: the trainer placed its model since
            self.network = self._hold()
        return self.network.runner(batch_size)

    def outputs(self, rows: Sequence[Row], batch_size: int = EVAL_BATCH_SIZE) -> list[Any]:
        """Each row's output (`_take` of its pass), in the order of `rows`."""
        was_training = self.model.training
        self.model.eval()
        try:
            return self.runner(batch_size).run(rows, self._take) if rows else []
        finally:
            self.model.train(was_training)

    def _take(self, group: list[int], inputs: dict, out: Any) -> list[torch.Tensor]:
        """Per row of a pass: its logits (a class row, or one row per real token)."""
        logits = out.logits.float().cpu()
        lengths = inputs["attention_mask"].sum(1).tolist()
        return [logits[k, : lengths[k]] if logits.dim() == 3 else logits[k] for k in range(len(group))]

    def encode(self, texts: list[str], pairs: list[str] | None = None) -> list[tok.Encoded]:
        """Tokenized inputs under the run's long-text policy (the tokenizer's truncation or overflow windows)."""
        if self.long_text == "window" and pairs is not None:
            raise InputError(
                "long_text='window' reads one long text in windows; pairs are cut longest first: load the run with "
                "long_text='truncate' (the default) to score pairs."
            )
        try:
            encoded = tok.encode(self.tokenizer, texts, pairs, max_length=self.max_length, long_text=self.long_text)
        except tok.TextTooLong as exc:
            what = "pairs" if pairs is not None else "texts"
            raise InputError(
                f"{what}[{exc.row}] has {exc.tokens} tokens, more than this model's maximum of {self.max_length}; "
                "use long_text='truncate'" + (" or 'window'." if pairs is None else ".")
            ) from None
        tok.warn_truncated(sum(e.truncated for e in encoded), len(texts), self.max_length, pairs is not None)
        return encoded
