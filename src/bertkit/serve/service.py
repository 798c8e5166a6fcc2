"""What the endpoints do, apart from HTTP: check inputs, tokenize, queue for the batcher, await the vectors.

`Service` is `app.state.service`; other faces (the explainer routes) call it too, so every vector the server
returns comes from the same tokenizer, forward pass, layer selection and pooling as `Encoder.embed`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..encoder.compact import RANGED
from ..encoder.encode import Encoder, check_vector_options
from ..encoder.layers import LayerSelection, parse_layers
from ..encoder.pooling import parse_pooling
from ..encoder.tokenize import Encoded, encode
from ..explain.explainer import model_name
from .batcher import Batcher, CallJob, EmbedJob
from .metrics import Metrics
from .runs import ServedRun
from .settings import ServeSettings

logger = logging.getLogger(__name__)

Disconnected = Callable[[], Awaitable[None]]  # returns when the client has gone away


class ServeError(Exception):
    """An error with its HTTP status and machine-readable type; the message says what to change."""

    def __init__(
        self,
        status: int,
        error_type: str,
        message: str,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ):
        super().__init__(message)
        self.status, self.error_type, self.headers, self.param = status, error_type, headers or {}, param


class ClientGone(Exception):
    """The client disconnected before its answer was ready; its work was dropped."""


@dataclass
class VectorOptions:
    """What a request may ask of its sentence vectors beyond layers and pooling (as `Encoder.embed` takes them)."""

    prompt: str | None = None
    prompt_name: str | None = None
    dimensions: int | None = None
    normalize: bool = False
    output: str = "float32"
    truncation_direction: str = "right"


@dataclass
class EmbedResult:
    """Per input: a sentence vector (dim,) or token vectors (tokens, dim); with the encodings and truncated rows."""

    vectors: list[np.ndarray]
    encoded: list[Encoded]
    truncated: list[int]

    @property
    def tokens(self) -> int:
        return sum(len(e.ids) for e in self.encoded)


class Service:
    """One encoder, its served runs, one batcher: the shared state behind every route."""

    def __init__(
        self, encoder: Encoder, runs: dict[str, ServedRun] | None = None, settings: ServeSettings | None = None
    ):
        self.encoder = encoder
        self.runs = runs or {}
        self.settings = (settings or ServeSettings()).check()
        self.metrics = Metrics()
        self.concurrent_batches = self.settings.concurrent_batches or encoder.concurrent_batches
        self.max_batch_tokens = self.settings.max_batch_tokens or encoder.max_batch_tokens
        if encoder.device.type != "cpu" and self.concurrent_batches > 1:
            # passes in flight at once share a CPU's threads; a GPU runs one pass at a time, and the host work
            # (tokenizing, answering) already overlaps it on the request threads
            logger.warning(
                "--concurrent-batches %d: on %s one pass runs at a time; using 1.",
                self.concurrent_batches,
                encoder.device,
            )
            self.concurrent_batches = 1
        self.batcher = Batcher(
            encoder,
            self.metrics,
            self.max_batch_tokens,
            self.settings.max_queue_tokens,
            self.concurrent_batches,
        )

    # ---- checks -----------------------------------------------------------------------------------------------
    def texts(self, inputs: str | Sequence[str], name: str = "inputs") -> list[str]:
        """One text or a list, never empty and never more than `max_inputs`."""
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        if not texts:
            raise ServeError(422, "invalid_input", f"{name} is an empty list; give at least one text.")
        if len(texts) > self.settings.max_inputs:
            raise ServeError(
                413,
                "too_many_inputs",
                f"{name} has {len(texts)} texts; this server takes at most "
                f"{self.settings.max_inputs} per request (--max-inputs). Split them over several requests.",
            )
        return texts

    def options(self, layers: str, pooling: str) -> tuple[LayerSelection, tuple[str, ...]]:
        """Parse and check `layers`/`pooling` against this model (library errors become 422 with their message)."""
        selection, methods = parse_layers(layers), parse_pooling(pooling)
        selection.resolve(self.encoder.num_layers + 1)
        self.encoder._check_pooling(methods, selection)  # the library's own pooler rules, one place
        return selection, methods

    def encode(self, texts: list[str], truncate: bool, direction: str = "right") -> tuple[list[Encoded], list[int]]:
        """Tokenize with the library; too long with truncate=false is a 413 naming the input and its length."""
        limit = self.encoder.max_length
        policy = "truncate" if truncate else "keep"
        encoded = encode(self.encoder.tokenizer, texts, max_length=limit, long_text=policy, direction=direction)
        too_long = [i for i, e in enumerate(encoded) if len(e.ids) > limit]
        if too_long:
            first = too_long[0]
            raise ServeError(
                413,
                "input_too_long",
                f"inputs[{first}] has {encoded[first].full_length} tokens, more than this model's "
                f"{limit}; {len(too_long)} input(s) are too long. Send truncate=true to cut them, or "
                "shorten them.",
            )
        return encoded, [i for i, e in enumerate(encoded) if e.truncated]

    # ---- work ---------------------------------------------------------------------------------------------------
    async def embed(
        self,
        texts: list[str],
        layers: str = "last",
        pooling: str = "mean",
        truncate: bool = True,
        disconnected: Disconnected | None = None,
        vectors: VectorOptions | None = None,
    ) -> EmbedResult:
        """Vectors for `texts` exactly as `Encoder.embed(texts, layers=..., pooling=..., **vectors)` gives them."""
        selection, methods = self.options(layers, pooling)
        vectors = vectors or VectorOptions()
        encoder = self.encoder
        dim = encoder.sentence_dim(selection, methods)
        check_vector_options(methods, vectors.dimensions, vectors.output, dim)
        prompt, exclude = encoder.prompt_setup(vectors.prompt, vectors.prompt_name, None)
        encoded, truncated = self.encode([prompt + t for t in texts], truncate, vectors.truncation_direction)
        loop = asyncio.get_running_loop()
        job = EmbedJob(
            [e.ids for e in encoded],
            [e.type_ids for e in encoded],
            selection,
            methods,
            loop.create_future(),
            loop,
            exclude=exclude,
        )
        found = await self._wait(job, disconnected)
        if methods != ("none",) and (vectors.dimensions or vectors.normalize or vectors.output != "float32"):
            options = dict(
                layers=layers,
                pooling=pooling,
                prompt=prompt,
                dimensions=vectors.dimensions,
                normalize=vectors.normalize,
                truncation_direction=vectors.truncation_direction,
            )
            ranges = None
            if vectors.output in RANGED:  # the calibration sentences go through the model thread, once per options
                ranges = await self.call(lambda: encoder.calibration_ranges(**options), 4096, disconnected)
            finished = encoder.finish_vectors(
                np.stack(found), vectors.dimensions, vectors.normalize, vectors.output, ranges, options
            )
            found = list(finished)
        return EmbedResult(found, encoded, truncated)

    async def predict(self, name: str, inputs: list, disconnected: Disconnected | None = None) -> list[dict]:
        """A served run's own predictions (of texts, or of [text, pair] pairs for a pair run), on the model thread."""
        run = self.run(name)
        pairs = bool(inputs) and all(isinstance(x, list) for x in inputs)
        if pairs != run.takes_pairs:
            wanted = "[text, pair] pairs: send a list of two-text lists" if run.takes_pairs else "texts, not pairs"
            raise ServeError(422, "invalid_input", f"run {name!r} takes {wanted}.", param="inputs")
        items = [tuple(x) for x in inputs] if pairs else inputs
        estimate = sum(len(" ".join(x) if pairs else x) // 4 + 2 for x in inputs)  # tokens, for the queue budget
        return await self.call(lambda: run.predict(items), estimate, disconnected)

    def reranker(self, name: str | None) -> ServedRun:
        """The served pair run `name`, or the only one when no name is given."""
        if name is not None:
            run = self.run(name)
            if not run.ranks:
                what = "text pairs" if run.takes_pairs else "single texts"
                raise ServeError(
                    422,
                    "not_a_reranker",
                    f"run {name!r} does not rerank: it is a {run.problem} model of {what}. Reranking takes a pair run "
                    "(bertkit finetune --task pair) that gives one score: a regressor or a two-class classifier.",
                    param="model",
                )
            return run
        rankers = sorted(name for name, run in self.runs.items() if run.ranks)
        if not rankers:
            raise ServeError(
                404,
                "no_reranker",
                "this server serves no reranker; start it with --run NAME=DIR of a run fine-tuned with --task pair.",
            )
        if len(rankers) > 1:
            raise ServeError(
                422,
                "model_required",
                f"several rerankers are served ({', '.join(rankers)}); name one with the model field.",
                param="model",
            )
        return self.runs[rankers[0]]

    async def rerank(
        self,
        run: ServedRun,
        query: str,
        documents: list[str],
        raw: bool = False,
        truncate: bool = True,
        disconnected: Disconnected | None = None,
    ) -> tuple[list, int]:
        """(index, score) of every document for `query`, best first, and the tokens the pairs took."""
        from ..encoder.tokenize import TOKENIZER_LOCK

        documents = self.texts(documents, "documents")
        model = run.model
        with TOKENIZER_LOCK:
            lengths = [len(ids) for ids in model.tokenizer([query] * len(documents), documents)["input_ids"]]
        too_long = [i for i, n in enumerate(lengths) if n > model.max_length]
        if too_long and not truncate:
            first = too_long[0]
            raise ServeError(
                413,
                "input_too_long",
                f"the query with texts[{first}] has {lengths[first]} tokens, more "
                f"than this run's {model.max_length}; {len(too_long)} pair(s) are too long. Send "
                "truncate=true to cut them (longest first), or shorten them.",
            )
        tokens = sum(min(n, model.max_length) for n in lengths)
        ranked = await self.call(lambda: run.rerank(query, documents, raw), tokens, disconnected)
        return ranked, tokens

    async def call(self, work: Callable[[], Any], tokens: int, disconnected: Disconnected | None = None) -> Any:
        """Run `work` on the model thread, alone (no pass in flight), under the queue's admission control.

        Every model call of the service goes through the batcher: the embedding passes, the served runs' predicts
        and the explainer. A model or tokenizer is then never used by two threads at once, and a full queue
        answers 429 whatever the endpoint.

        Parameters
        ----------
        work : callable
            What to run; its return value is the result.
        tokens : int
            Its estimated cost in tokens, counted against `--max-queue-tokens`.
        disconnected : callable, optional
            Returns when the client has gone away; the work is then dropped if it has not started.

        Returns
        -------
        Any
            What `work` returned.
        """
        loop = asyncio.get_running_loop()
        return await self._wait(CallJob(work, max(1, tokens), loop.create_future(), loop), disconnected)

    def run(self, name: str) -> ServedRun:
        if name not in self.runs:
            served = ", ".join(sorted(self.runs)) or "none (start the server with --run NAME=DIR)"
            raise ServeError(404, "unknown_run", f"no run named {name!r}; served runs: {served}.")
        return self.runs[name]

    async def _wait(self, job: EmbedJob | CallJob, disconnected: Disconnected | None):
        self.batcher.submit(job)
        if disconnected is None:
            return await job.future
        watcher = asyncio.ensure_future(disconnected())
        try:
            await asyncio.wait((job.future, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if not job.future.done():
            job.cancelled = True
            job.future.cancel()
            raise ClientGone()
        return job.future.result()

    @property
    def model_names(self) -> set[str]:
        """Names `/v1/embeddings` accepts for the served model."""
        return {"default", "bertkit", str(self.info()["model"])}

    def info(self) -> dict:
        """Model facts (no file paths), served runs, limits and batching settings."""
        facts = {k: v for k, v in self.encoder.info().items() if k != "path"}
        facts["model"] = model_name(self.encoder)  # a local model's directory name, not where it lives
        return {
            **facts,
            "runs": [run.describe() for run in self.runs.values()],
            "limits": {
                "max_inputs": self.settings.max_inputs,
                "max_body_bytes": self.settings.max_body_bytes,
                "max_batch_tokens": self.max_batch_tokens,
                "max_queue_tokens": self.settings.max_queue_tokens,
            },
            "concurrent_batches": self.concurrent_batches,
            "auth": self.settings.api_key is not None,
        }
