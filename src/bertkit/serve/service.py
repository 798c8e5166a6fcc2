"""What the endpoints do, apart from HTTP: check inputs, tokenize off the event loop, queue for the batcher, finish.

`Service` is `app.state.service`; every vector it returns comes from the same options, tokenizer, forward pass and
vector head as `Encoder.embed`. The event loop never does work that grows with the input.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..encoder.compact import RANGED
from ..encoder.encode import Encoder, calibration_ranges, vector_head
from ..encoder.options import EmbedOptions
from ..encoder.tokenize import TOKENIZER_LOCK, Encoded, encode
from ..encoder.vectors import VectorHead, finish
from ..explain.explainer import model_name
from ..tasks.runs import KIND_QA
from ..tasks.search import query_options
from .batcher import Batcher, CallJob, EmbedJob, Overloaded
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
    """Per input: a sentence vector (dim,) or token vectors (tokens, dim); with the encodings and truncated rows."""

    vectors: list[np.ndarray]
    encoded: list[Encoded]
    truncated: list[int]

    @property
    def tokens(self) -> int:
        """The tokens of every input."""
        return sum(len(e.ids) for e in self.encoded)


class Service:
    """One encoder, its served runs, one batcher: the shared state behind every route."""

    def __init__(
        self,
        encoder: Encoder,
        runs: dict[str, ServedRun] | None = None,
        settings: ServeSettings | None = None,
        indexes: dict[str, VectorIndex] | None = None,
    ) -> None:
        self.encoder = encoder
        self.runs = runs or {}
        self.indexes = indexes or {}
        for index in self.indexes.values():  # an index of another model's vectors is refused before the server starts
            index.check_encoder(encoder)
        self.settings = (settings or ServeSettings()).check()
        self.metrics = Metrics()
        self.concurrent_batches = self.settings.concurrent_batches or encoder.runner().concurrent
        self.max_batch_tokens = self.settings.max_batch_tokens or encoder.runner().max_batch_tokens
        if encoder.device.type != "cpu" and self.concurrent_batches > 1:
            # passes in flight at once share a CPU's threads; a GPU runs one pass at a time, and the host work
            # (tokenizing, answering) already overlaps it on the request threads
            message = "--concurrent-batches %d: on %s one pass runs at a time; using 1."
            logger.warning(message, self.concurrent_batches, encoder.device)
            self.concurrent_batches = 1
        self.batcher = Batcher(
            encoder, self.metrics, self.max_batch_tokens, self.settings.max_queue_tokens, self.concurrent_batches
        )
        self._tokenizers = ThreadPoolExecutor(1, thread_name_prefix="bertkit-tokenize")
        self._tokenizing = 0  # tokens (estimated) being tokenized now: counted against the queue's budget

    def close(self) -> None:
        """Stop the tokenizing thread (after the batcher has drained)."""
        self._tokenizers.shutdown(wait=True)

    def encode(self, texts: list[str], truncate: bool, direction: str = "right") -> tuple[list[Encoded], list[int]]:
        """Tokenize with the library; too long with truncate=false is a 413 naming the input and its length."""
        limit = self.encoder.max_length
        policy = "truncate" if truncate else "keep"
        encoded = encode(self.encoder.tokenizer, texts, max_length=limit, long_text=policy, direction=direction)
        too_long = [i for i, e in enumerate(encoded) if len(e.ids) > limit]
        if too_long:
            first = too_long[0]
            message = (
                f"inputs[{first}] has {encoded[first].full_length} tokens, more than this model's {limit}; "
                f"{len(too_long)} input(s) are too long. Send truncate=true to cut them, or shorten them."
            )
            raise ServeError(413, "input_too_long", message)
        return encoded, [i for i, e in enumerate(encoded) if e.truncated]

    async def off_loop(self, work: Callable[[], Any], estimate: int) -> Any:
        """Run `work` (tokenizing a request) on the tokenizing thread, admitted under the queue's budget.

        `estimate` is the tokens the request will cost the model (`token_estimate`); a request past the budget is a
        429 at once.
        """
        estimate = max(1, estimate)
        queued = self.batcher.queue_depth()[1] + self._tokenizing
        if queued and queued + estimate > self.settings.max_queue_tokens:
            self.metrics.rejected.inc()
            raise Overloaded(queued, max(1, queued // 1000))
        self._tokenizing += estimate
        try:
            return await asyncio.get_running_loop().run_in_executor(self._tokenizers, work)
        finally:
            self._tokenizing -= estimate

    async def embed(
        self, texts: list[str], options: EmbedOptions, truncate: bool = True, disconnected: Disconnected | None = None
    ) -> EmbedResult:
        """Vectors for `texts` exactly as `Encoder.embed(texts, options)` gives them (token vectors for 'none')."""
        encoder = self.encoder
        resolved = options.resolve(encoder)
        prompt = resolved.prompt or ""

        def tokenize() -> tuple[list[Encoded], list[int], VectorHead]:
            encoded, truncated = self.encode([prompt + t for t in texts], truncate, resolved.truncation_direction)
            return encoded, truncated, vector_head(encoder, resolved)

        limit = encoder.max_length if truncate else None
        estimate = token_estimate((len(t) + len(prompt) for t in texts), limit)
        encoded, truncated, head = await self.off_loop(tokenize, estimate)
        if resolved.token_vectors:
            self.check_answer_size(sum(len(e.ids) for e in encoded) * encoder.output_dim(resolved))
        future = asyncio.get_running_loop().create_future()
        job = EmbedJob([e.ids for e in encoded], [e.type_ids for e in encoded], head, future)
        found = await self._wait(job, disconnected)
        if resolved.token_vectors:
            return EmbedResult([finish(v, resolved, token_vectors=True) for v in found], encoded, truncated)
        ranges = None
        if resolved.output_type in RANGED:  # the calibration sentences go through the model thread, once per options
            ranges = await self.call(lambda: calibration_ranges(encoder, resolved), 4096, disconnected)
        return EmbedResult(list(finish(np.stack(found), resolved, ranges)), encoded, truncated)

    def check_answer_size(self, numbers: int) -> None:
        """Refuse (413) an answer of more numbers than `max_answer_numbers` (seconds of JSON), before the model runs."""
        limit = self.settings.max_answer_numbers
        if numbers > limit:
            message = (
                f"the answer would hold {numbers:,} numbers (every token's vector), more than this server's limit of "
                f"{limit:,} (--max-answer-numbers); send fewer or shorter inputs, or ask for sentence vectors."
            )
            raise ServeError(413, "answer_too_large", message)

    async def predict(self, name: str, inputs: list, disconnected: Disconnected | None = None) -> list[dict]:
        """Run a served run's own predict on the model thread: of texts, or of [text, pair] pairs for a pair run."""
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

    async def answer(
        self, name: str, inputs: Any, parameters: Any = None, disconnected: Disconnected | None = None
    ) -> Any:
        """Answer Hugging Face's question-answering task on a served QA run: one answer, or lists.

        The contexts are cut into windows off the event loop, refused (413) past the windows the queue holds.
        """
        run = self.run(name)
        if run.kind != KIND_QA:
            message = f"run {name!r} does not answer questions: send texts, no parameters."
            raise ServeError(422, "invalid_input", message, param="inputs")
        items = inputs if isinstance(inputs, list) else [inputs]
        if not all(hasattr(item, "question") for item in items):
            raise _questions_wanted(name)
        options = parameters.model_dump(exclude_none=True) if parameters is not None else {}
        top_k = options.pop("top_k", 1)
        read = {k: options.pop(k) for k in ("doc_stride", "max_question_len", "max_seq_len") if k in options}
        questions, contexts = [i.question for i in items], [i.context for i in items]
        estimate = token_estimate(len(q) + len(c) for q, c in zip(questions, contexts))
        windows = await self.off_loop(lambda: run.model.windows(questions, contexts, **read), estimate)
        most = max(1, self.settings.max_queue_tokens // run.model.max_length)
        if windows.count > most:
            longest = max(len(w.ids) for part in windows.parts for w in part)
            message = (
                f"the contexts make {windows.count} windows of up to {longest} tokens, more than this server takes in "
                f"one request ({most}: --max-queue-tokens / the run's length of {run.model.max_length}); send shorter "
                "contexts, or fewer windows: a smaller doc_stride, a max_seq_len nearer the run's length."
            )
            raise ServeError(413, "input_too_long", message)
        found = await self.call(lambda: run.model.ranked(windows, top_k, **options), windows.tokens, disconnected)
        self.metrics.tokens.inc(windows.tokens)
        shaped = [answers[0] if top_k == 1 else answers for answers in found]
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

        The query is cut to the run's length once, off the event loop, before it is paired with each document.
        """
        run = self.reranker(name)
        model = run.model

        def lengths() -> tuple[str, list[int]]:
            with TOKENIZER_LOCK:
                kept = _prefix(model.tokenizer, query, model.max_length)
                pairs = model.tokenizer([kept] * len(documents), documents, truncation=False)["input_ids"]
            return kept, [len(p) for p in pairs]

        query_chars = min(len(query), CHARS_PER_TOKEN * model.max_length)  # the query is cut before it is paired
        estimate = token_estimate((query_chars + len(d) for d in documents), model.max_length if truncate else None)
        kept, counts = await self.off_loop(lengths, estimate)
        too_long = [i for i, n in enumerate(counts) if n > model.max_length]
        if too_long and not truncate:
            first = too_long[0]
            message = (
                f"the query with texts[{first}] has {counts[first]} tokens, more than this run's {model.max_length}; "
                f"{len(too_long)} pair(s) are too long. Send truncate=true to cut them (longest first), or shorten "
                "them."
            )
            raise ServeError(413, "input_too_long", message)
        tokens = sum(min(n, model.max_length) for n in counts)
        ranked = await self.call(lambda: run.rerank(kept, documents, raw), tokens, disconnected)
        return ranked, tokens, too_long

    async def search(
        self, name: str | None, queries: list[str], top_k: int, prompt: str | None, disconnected: Disconnected | None
    ) -> tuple[list[list[dict]], EmbedResult]:
        """Find the `top_k` nearest rows of index `name` to each query, embedded as the index's vectors were."""
        index = self.index(name)
        options = query_options(index.meta, **({"prompt": prompt} if prompt is not None else {}))
        result = await self.embed(queries, options, True, disconnected)
        vectors = np.stack(result.vectors)
        found = await self.call(lambda: index.search(vectors, top_k), len(queries) * top_k, disconnected)
        hits = [[{"id": str(index.ids[h["corpus_id"]]), **h} for h in row] for row in found]
        return hits, result

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
        """Run `work` on the model thread, alone (no pass in flight), under the queue's admission control.

        Every model call goes through the batcher, so a model is never used by two threads at once and a full queue
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
        future = asyncio.get_running_loop().create_future()
        return await self._wait(CallJob(work, max(1, tokens), future), disconnected)

    def run(self, name: str) -> ServedRun:
        """Return the served run `name`, or a 404 that lists the served ones."""
        if name not in self.runs:
            served = ", ".join(sorted(self.runs)) or "none (start the server with --run NAME=DIR)"
            raise ServeError(404, "unknown_run", f"no run named {name!r}; served runs: {served}.")
        return self.runs[name]

    async def _wait(self, job: EmbedJob | CallJob, disconnected: Disconnected | None) -> Any:
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
                "max_inputs": self.settings.max_inputs,
                "max_body_bytes": self.settings.max_body_bytes,
                "max_batch_tokens": self.max_batch_tokens,
                "max_queue_tokens": self.settings.max_queue_tokens,
            },
            "concurrent_batches": self.concurrent_batches,
            "auth": self.settings.api_key is not None,
        }


def _questions_wanted(name: str) -> ServeError:
    message = f'run {name!r} answers questions: send {{"inputs": {{"question": ..., "context": ...}}}}.'
    return ServeError(422, "invalid_input", message, param="inputs")


PREFIX_MARGIN = 16  # tokens kept past the limit when a long text is cut to a prefix: the last word's split stays


def token_estimate(lengths: Iterable[int], limit: int | None = None) -> int:
    """Estimate the tokens of texts of these lengths (characters), each at most `limit`, before they are tokenized."""
    per_text = (length // CHARS_PER_TOKEN + 2 for length in lengths)
    return sum(per_text) if limit is None else sum(min(tokens, limit) for tokens in per_text)


def _prefix(tokenizer: Any, text: str, max_length: int) -> str:
    """Cut `text` to the beginning that holds its first `max_length` tokens (and a margin): a pair is cut the same."""
    if len(text) <= 4 * max_length:
        return text
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    if len(offsets) <= max_length + PREFIX_MARGIN:
        return text
    return text[: offsets[max_length + PREFIX_MARGIN][1]]
