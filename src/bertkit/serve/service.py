"""What the endpoints do, apart from HTTP: queue each request's model work and shape the library's answer.

`Service` is `app.state.service`. Every model call goes through its one queue (`batcher`) into the library's own
calls: `Encoder.embed_with_report` for vectors, a served run's predict, rank and answer, the explainer. The event loop
only checks, queues and answers; a request's options arrive resolved (the request models resolve them once).
"""

from __future__ import annotations

import asyncio
import bisect
import copy
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..encoder.encode import Encoder
from ..encoder.options import EmbedOptions
from ..encoder.results import TokenEmbedding
from ..encoder.tokenize import TextTooLong, encode
from ..explain.explainer import model_name
from ..tasks.qa import AnswerOptions
from ..tasks.runs import KIND_QA
from ..tasks.search import query_options
from .batcher import Batcher, Job
from .errors import ServeError
from .metrics import Metrics
from .runs import ServedRun
from .settings import ServeSettings

if TYPE_CHECKING:
    from ..tasks.index import VectorIndex

logger = logging.getLogger(__name__)

Disconnected = Callable[[], Awaitable[None]]  # returns when the client has gone away
CHARS_PER_TOKEN = 4  # what a request's characters are estimated to cost in tokens before it is tokenized


class ClientGone(Exception):
    """The client disconnected before its answer was ready; its work was dropped."""


@dataclass
class EmbedResult:
    """Per input a sentence vector (an (n, dim) array) or a `TokenEmbedding`; the truncated inputs; tokens if asked."""

    vectors: np.ndarray | list[TokenEmbedding]
    truncated: list[int]
    tokens: int = 0


def served_encoder(encoder: Encoder, settings: ServeSettings) -> Encoder:
    """Return `encoder`, or a shallow copy (the same model, tokenizer and forward) with this server's batching.

    `--max-batch-tokens` is the copy's token budget and `--concurrent-batches` its passes in flight; a GPU runs one.
    """
    runner = encoder.runner()
    budget = settings.max_batch_tokens or runner.max_batch_tokens
    concurrent = settings.concurrent_batches or runner.concurrent
    if encoder.device.type != "cpu" and concurrent > 1:
        logger.warning("--concurrent-batches %d: on %s one pass runs at a time; using 1.", concurrent, encoder.device)
        concurrent = 1
    if (budget, concurrent) == (runner.max_batch_tokens, runner.concurrent):
        return encoder
    served, served.network = copy.copy(encoder), copy.copy(encoder.network)
    served.network.max_batch_tokens, served.network.concurrent_batches = budget, concurrent  # the copy's own batching
    return served


class Service:
    """One encoder, its served runs and indexes, one queue: the shared state behind every route."""

    def __init__(
        self,
        encoder: Encoder,
        runs: dict[str, ServedRun] | None = None,
        settings: ServeSettings | None = None,
        indexes: dict[str, VectorIndex] | None = None,
    ) -> None:
        self.settings = settings or ServeSettings()
        self.encoder = served_encoder(encoder, self.settings)
        self.runs = runs or {}
        self.indexes = indexes or {}
        for index in self.indexes.values():  # an index of another model's vectors is refused before the server starts
            index.check_encoder(encoder)
        self.metrics = Metrics()
        runner = self.encoder.runner()
        self.concurrent_batches, self.max_batch_tokens = runner.concurrent, runner.max_batch_tokens
        self.batcher = Batcher(self.metrics, self.max_batch_tokens, self.settings.max_queue_tokens)

    async def embed(
        self, texts: list[str], options: EmbedOptions, disconnected: Disconnected | None = None, count: bool = False
    ) -> EmbedResult:
        """Vectors for `texts` exactly as `Encoder.embed_with_report(texts, options)` gives them; `count`: tokens too.

        Requests of equal options that wait together are one call. A text too long for long_text='error' (TEI's
        truncate=false) is a 413 that names it.
        """
        estimate = token_estimate((len(t) + len(options.prompt or "") for t in texts), options.max_length)
        job = Job(self._embed_turn(options), (texts, count), estimate, options, len(texts))
        result = await self._wait(job, disconnected)
        numbers = sum(item.vectors.size for item in result.vectors) if options.token_vectors else 0
        if numbers > (limit := self.settings.max_answer_numbers):  # seconds of JSON
            message = (
                f"the answer would hold {numbers:,} numbers (every token's vector), more than this server's limit of "
                f"{limit:,} (--max-answer-numbers); send fewer or shorter inputs, or ask for sentence vectors."
            )
            raise ServeError(413, "answer_too_large", message)
        return result

    def _embed_turn(self, options: EmbedOptions) -> Callable[[list], list]:
        """Make one queue turn of embedding requests of `options`: one library call, each request its own rows."""
        encoder = self.encoder

        def run(asks: list[tuple[list[str], bool]]) -> list:
            answers: list[Any] = [None] * len(asks)
            left = list(range(len(asks)))
            while left:
                texts = [text for k in left for text in asks[k][0]]
                try:
                    vectors, report = encoder.embed_with_report(texts, options, warn=False, progress=False)
                except TextTooLong as exc:  # that request fails; the others of the turn run without it
                    sizes = list(itertools.accumulate(len(asks[k][0]) for k in left))
                    owner = bisect.bisect_right(sizes, exc.row)  # the request whose text it is, and its own row
                    answers[left.pop(owner)] = _too_long(exc.row - ([0, *sizes][owner]), exc)
                    continue
                self.metrics.tokens.inc(report.coverage.n_tokens if report.coverage is not None else 0)
                start = 0
                for k in left:
                    own, counted = asks[k]
                    cut = [r - start for r in report.truncated_rows if start <= r < start + len(own)]
                    tokens = _token_count(encoder, own, options) if counted else 0
                    answers[k] = EmbedResult(vectors[start : start + len(own)], cut, tokens)
                    start += len(own)
                break
            return answers

        return run

    async def tokenize(self, texts: list[str], truncate: bool, disconnected: Disconnected | None = None) -> list:
        """Tokenize `texts` with the library (its `Encoded` items); too long with `truncate` false is a 413."""
        encoder = self.encoder

        def work() -> list:
            try:
                policy = "truncate" if truncate else "error"
                return encode(encoder.tokenizer, texts, max_length=encoder.max_length, long_text=policy)
            except TextTooLong as exc:
                raise _too_long(exc.row, exc) from None

        estimate = token_estimate(map(len, texts), encoder.max_length if truncate else None)
        return await self.call(work, estimate, disconnected)

    async def predict(self, name: str, inputs: list, disconnected: Disconnected | None = None) -> list[dict]:
        """Run a served run's own predict in the queue: of texts, or of [text, pair] pairs for a pair run."""
        run = self.run(name)
        if run.kind == KIND_QA:
            raise _questions_wanted(name)
        pairs = bool(inputs) and all(isinstance(x, list) for x in inputs)
        if pairs != run.takes_pairs:
            wanted = "[text, pair] pairs: send a list of two-text lists" if run.takes_pairs else "texts, not pairs"
            raise ServeError(422, "invalid_input", f"run {name!r} takes {wanted}.", param="inputs")
        items = [tuple(x) for x in inputs] if pairs else inputs
        lengths = (len(" ".join(x) if pairs else x) for x in inputs)
        estimate = token_estimate(lengths, getattr(run.model, "max_length", None))
        return await self.call(lambda: run.predict(items), estimate, disconnected)

    async def answer(self, name: str, inputs: Any, parameters: Any, disconnected: Disconnected | None) -> Any:
        """Answer Hugging Face's question-answering task on a served QA run: one answer, or lists.

        The contexts are cut into windows in the queue's turn, refused (413) past the windows the queue holds.
        """
        run = self.run(name)
        if run.kind != KIND_QA:
            message = f"run {name!r} does not answer questions: send texts, no parameters."
            raise ServeError(422, "invalid_input", message, param="inputs")
        items = inputs if isinstance(inputs, list) else [inputs]
        if not all(hasattr(item, "question") for item in items):
            raise _questions_wanted(name)
        options = AnswerOptions(**(parameters.model_dump(exclude_none=True) if parameters is not None else {}))
        questions, contexts = [i.question for i in items], [i.context for i in items]
        most = max(1, self.settings.max_queue_tokens // run.model.max_length)

        def work() -> list:
            windows = run.model.windows(questions, contexts, options)
            if windows.count > most:
                longest = max(len(w.ids) for part in windows.parts for w in part)
                message = (
                    f"the contexts make {windows.count} windows of up to {longest} tokens, more than this server "
                    f"takes in one request ({most}: --max-queue-tokens / the run's length of {run.model.max_length}); "
                    "send shorter contexts, or fewer windows: a smaller doc_stride, a max_seq_len nearer the run's "
                    "length."
                )
                raise ServeError(413, "input_too_long", message)
            self.metrics.tokens.inc(windows.tokens)
            return run.model.ranked(windows, options)

        estimate = token_estimate(len(q) + len(c) for q, c in zip(questions, contexts))
        found = await self.call(work, estimate, disconnected)
        shaped = [answers[0] if options.top_k == 1 else answers for answers in found]
        return shaped if isinstance(inputs, list) else shaped[0]

    def reranker(self, name: str | None) -> ServedRun:
        """Return the served pair run `name`, or the only one when no name is given."""
        if name is not None:
            run = self.run(name)
            if not run.ranks:
                message = (
                    f"run {name!r} does not rerank: it is a {run.problem} model of "
                    f"{'text pairs' if run.takes_pairs else 'single texts'}. Reranking takes a pair run "
                    "(bertkit finetune --task pair) that gives one score: a regressor or a two-class classifier."
                )
                raise ServeError(422, "not_a_reranker", message, param="model")
            return run
        rankers = sorted(name for name, run in self.runs.items() if run.ranks)
        if not rankers:
            message = (
                "this server serves no reranker; start it with --run NAME=DIR of a run fine-tuned with --task pair."
            )
            raise ServeError(404, "no_reranker", message)
        if len(rankers) > 1:
            message = f"several rerankers are served ({', '.join(rankers)}); name one with the model field."
            raise ServeError(422, "model_required", message, param="model")
        return self.runs[rankers[0]]

    async def rerank(
        self,
        name: str | None,
        query: str,
        documents: list[str],
        raw: bool = False,
        truncate: bool = True,
        disconnected: Disconnected | None = None,
    ) -> tuple[list, int, list[int]]:
        """Rank `documents` for `query` by reranker `name`: (index, score) best first, tokens, indices of cut pairs.

        The pairs are read as the run reads them (cut longest first past its length); with `truncate` false a pair
        it would cut is a 413.
        """
        model = self.reranker(name).model

        def work() -> tuple[list, int, list[int]]:
            encoded = model.encode([query] * len(documents), documents)  # the run's own reading: lengths, cuts
            cut = [i for i, item in enumerate(encoded) if item.truncated]
            if cut and not truncate:
                message = (
                    f"the query with texts[{cut[0]}] has {encoded[cut[0]].full_length} tokens, more than this run's "
                    f"{model.max_length}; {len(cut)} pair(s) are too long. Send truncate=true to cut them (longest "
                    "first), or shorten them."
                )
                raise ServeError(413, "input_too_long", message)
            return model.rank(query, documents, raw=raw), sum(len(item.ids) for item in encoded), cut

        estimate = token_estimate((len(query) + len(d) for d in documents), model.max_length)
        return await self.call(work, estimate, disconnected)

    async def search(
        self, name: str | None, queries: list[str], top_k: int, prompt: str | None, disconnected: Disconnected | None
    ) -> tuple[list[list[dict]], EmbedResult]:
        """Find the `top_k` nearest rows of index `name` to each query, embedded as the index's vectors were."""
        index = self.index(name)
        options = query_options(index.meta, prompt=prompt)
        result = await self.embed(queries, options.resolve(self.encoder), disconnected)
        vectors = np.asarray(result.vectors)
        found = await self.call(lambda: index.search(vectors, top_k), len(queries) * top_k, disconnected)
        return found, result  # ids as the file holds them: numbers stay numbers, as `VectorIndex.search` gives them

    def index(self, name: str | None) -> VectorIndex:
        """Return the loaded index `name` (None: the only one), or a 404 / 422 that lists the loaded ones."""
        loaded = ", ".join(sorted(self.indexes)) or "none (start the server with --index NAME=FILE)"
        if name is None and len(self.indexes) == 1:
            return next(iter(self.indexes.values()))
        if name is None:
            status, kind = (422, "invalid_input") if self.indexes else (404, "unknown_index")
            message = f"say which index to search (index); loaded indexes: {loaded}."
            raise ServeError(status, kind, message, param="index")
        if name not in self.indexes:
            raise ServeError(404, "unknown_index", f"no index named {name!r}; loaded indexes: {loaded}.", param="index")
        return self.indexes[name]

    async def call(self, work: Callable[[], Any], tokens: int, disconnected: Disconnected | None = None) -> Any:
        """Run `work` in a turn of its own in the queue, under its admission control (a full queue: 429).

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
        return await self._wait(Job(lambda _: [work()], None, max(1, tokens)), disconnected)

    def run(self, name: str) -> ServedRun:
        """Return the served run `name`, or a 404 that lists the served ones."""
        if name not in self.runs:
            served = ", ".join(sorted(self.runs)) or "none (start the server with --run NAME=DIR)"
            raise ServeError(404, "unknown_run", f"no run named {name!r}; served runs: {served}.")
        return self.runs[name]

    async def _wait(self, job: Job, disconnected: Disconnected | None) -> Any:
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
        return {"default", "bertkit", model_name(self.encoder)}

    def info(self) -> dict:
        """Model facts (no file paths), served runs, limits and batching settings."""
        facts = {k: v for k, v in self.encoder.info().items() if k != "path"}
        facts["model"] = model_name(self.encoder)  # a local model's directory name, not where it lives
        return {
            **facts,
            "runs": [run.describe() for run in self.runs.values()],
            "indexes": [
                {"name": name, **{k: getattr(index, k) for k in ("rows", "dim", "precision", "metric")}}
                for name, index in self.indexes.items()
            ],
            "limits": {
                **{k: getattr(self.settings, k) for k in ("max_inputs", "max_body_bytes", "max_queue_tokens")},
                "max_batch_tokens": self.max_batch_tokens,
            },
            "concurrent_batches": self.concurrent_batches,
            "auth": self.settings.api_key is not None,
        }


def _questions_wanted(name: str) -> ServeError:
    message = f'run {name!r} answers questions: send {{"inputs": {{"question": ..., "context": ...}}}}.'
    return ServeError(422, "invalid_input", message, param="inputs")


def token_estimate(lengths: Iterable[int], limit: int | None = None) -> int:
    """Estimate the tokens of texts of these lengths (characters), each at most `limit`, before they are tokenized."""
    per_text = (length // CHARS_PER_TOKEN + 2 for length in lengths)
    return sum(per_text) if limit is None else sum(min(tokens, limit) for tokens in per_text)


def _too_long(row: int, exc: TextTooLong) -> ServeError:
    message = (
        f"inputs[{row}] has {exc.tokens} tokens, more than this model's {exc.max_length}. Send truncate=true to cut "
        "it, or shorten it."
    )
    return ServeError(413, "input_too_long", message)


def _token_count(encoder: Encoder, texts: list[str], options: EmbedOptions) -> int:
    """Count the tokens the model reads of `texts` (prompt and special tokens included, after truncation)."""
    return int(encoder.tokenize([(options.prompt or "") + text for text in texts]).attention_mask.sum())
