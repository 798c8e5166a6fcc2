"""Embedding throughput on your texts: the tutorial's naive loop, sentence-transformers and bertkit at each precision.

Prints speed, the share of the measured matmul peak, and each row's distance from bertkit's fp32 vectors; then where
bertkit's time goes. Other scripts here (throughput.py, int8_frontier.py) build on its functions.

    python benchmarks/bench.py [TEXTS] [--text-column C] [--limit 2000] [--repeats 3] [--precision fp32,bf16,int8]
        [--no-peers] [--batch-size N] [--model M] [--threads N] [--device cpu]

TEXTS is a TSV/CSV/JSONL/Parquet/text file (default: bertkit's sample reviews).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from bertkit.encoder import tokenize as tok
from bertkit.encoder.devices import describe
from bertkit.encoder.encode import Encoder
from bertkit.encoder.models import quiet_transformers
from bertkit.encoder.options import EmbedOptions
from bertkit.encoder.precision import PRECISIONS, fast_bf16_cpu
from bertkit.errors import BertkitError, InputError
from bertkit.tasks.search import cosines

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


@dataclass
class Row:
    """One way of embedding in the table: its name, each timed run's seconds, its vectors, a note."""

    name: str
    seconds: list[float] = field(default_factory=list)
    vectors: np.ndarray | None = None
    note: str = ""


# like with like: the mean of the last layer, not normalized, as the tutorial loop and the peer compute it
RAW_MEAN = EmbedOptions(pooling="mean", normalize_embeddings=False)
PEAK_REPEAT_S = 0.2  # seconds a timed repeat of the matmul peak takes (slow kernels get fewer products, not hours)


def matmul_peak_gflops(sizes: Sequence[int] = (512, 1024, 2048), repeats: int = 3, precision: str = "fp32") -> float:
    """Best GFLOP/s (int8: GOP/s) of square matrix products at the current thread setting, in `precision`."""
    best = 0.0
    for n in sizes:
        if precision == "int8":
            a, b = (torch.randint(-128, 127, (n, n), dtype=torch.int8) for _ in range(2))
            product = functools.partial(torch._int_mm, a, b)  # what the int8 path runs
        else:
            dtype = torch.bfloat16 if precision == "bf16" else torch.float32
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            product = functools.partial(torch.matmul, a, b)
        started = time.perf_counter()
        product()  # warm-up, and how long one product takes: each timed repeat lasts about PEAK_REPEAT_S
        single = time.perf_counter() - started
        count = max(1, int(PEAK_REPEAT_S / max(single, 1e-6)))
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(count):
                product()
            best = max(best, count * 2 * n**3 / (time.perf_counter() - started) / 1e9)
        if single > PEAK_REPEAT_S:  # a slow kernel (int8 without VNNI): larger products would take minutes
            break
    return best


def forward_flops(encoder: Encoder, token_counts: Sequence[int]) -> float:
    """Multiply-adds × 2 of the encoder layers for unpadded inputs: projections, feed-forward and attention."""
    config = encoder.model.config
    hidden = encoder.hidden_size
    inner = getattr(config, "intermediate_size", None) or getattr(config, "hidden_dim", 4 * hidden)
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * inner)
    counts = np.asarray(token_counts, dtype=np.float64)
    return float(encoder.num_layers * (per_token * counts.sum() + 4 * hidden * (counts**2).sum()))


def naive_loop(encoder: Encoder, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
    """Embed the tutorial's way: pad everything to the longest text, batches in dataset order, mean of last layer."""
    tokenizer, model = encoder.tokenizer, encoder.model
    padded = tokenizer(
        list(texts), padding="longest", truncation=True, max_length=encoder.max_length, return_tensors="pt"
    )
    out = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            inputs = {k: v[start : start + batch_size].to(encoder.device) for k, v in padded.items()}
            states = model(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).to(states.dtype)
            out.append(((states * mask).sum(1) / mask.sum(1)).cpu().numpy())
    return np.concatenate(out)


def sentence_transformers_encoder(encoder: Encoder) -> SentenceTransformer:
    """sentence-transformers on the same weights with mean pooling and no normalisation: like with like."""
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling, Transformer

    with quiet_transformers():  # the peer's weights load without transformers' progress bar in the table
        transformer = Transformer(encoder.source.path, max_seq_length=encoder.max_length)
        dimension = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
        pooling = Pooling(dimension(), pooling_mode="mean")
        return SentenceTransformer(modules=[transformer, pooling], device=str(encoder.device))


def _time(function: Callable[[], np.ndarray], repeats: int, row: Row) -> Row:
    """One untimed warm-up call (first-call set-up, kernel selection), then `repeats` timed ones into `row`."""
    function()
    for _ in range(repeats):
        started = time.perf_counter()
        row.vectors = np.asarray(function(), dtype=np.float32)
        row.seconds.append(time.perf_counter() - started)
    return row


def compare(reference: np.ndarray, vectors: np.ndarray) -> tuple[float, float]:
    """Max absolute difference and minimum cosine of `vectors` against `reference`."""
    return float(np.abs(reference - vectors).max()), float(cosines(reference, vectors).min())


def where_time_goes(encoder: Encoder, texts: Sequence[str], batch_size: int) -> dict[str, float]:
    """Time one warmed-up fp32 embed call: tokenizing, the model's forward passes (its own report), and the rest."""
    encoder.embed(texts[:batch_size], RAW_MEAN, batch_size=batch_size, progress=False, warn=False)  # warm-up
    started = time.perf_counter()
    report = encoder.embed_with_report(texts, RAW_MEAN, batch_size=batch_size, progress=False, warn=False).report
    total = time.perf_counter() - started
    spent = {"tokenize": report.tokenize_seconds, "forward": report.forward_seconds}
    return {"total": total, **spent, "other": max(total - spent["tokenize"] - spent["forward"], 0.0)}


def parse_precisions(spec: str | Sequence[str]) -> tuple[str, ...]:
    """'fp32,bf16,int8' → ('fp32', 'bf16', 'int8'); each one a known precision, fp32 (the reference) always in."""
    names = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec) if p.strip()]
    for name in names:
        if name not in PRECISIONS:
            raise InputError(f"precision {name!r}: valid values are {', '.join(PRECISIONS)} (comma-separated).")
    return tuple(dict.fromkeys(["fp32", *names]))


def _precision_row(encoder: Encoder, texts: list[str], precision: str, repeats: int, batch_size: int) -> Row:
    """Time one non-fp32 precision on the same texts, or say why it cannot run here."""
    way = "per-token, smoothed" if precision == "int8" else "autocast"
    if precision == "bf16" and encoder.device.type == "cpu" and not fast_bf16_cpu():
        return Row(f"bertkit {precision}", note="refused: this CPU has no native bf16 (AMX / AVX512-BF16)")
    try:
        variant = encoder.with_options(precision=precision, concurrent_batches=encoder.runner().concurrent)
    except InputError as exc:
        return Row(f"bertkit {precision}", note=f"refused: {exc}")
    row = Row(f"bertkit {precision} {way} (batch {batch_size})")
    return _time(
        lambda: variant.embed(texts, RAW_MEAN, batch_size=batch_size, progress=False, warn=False), repeats, row
    )


def run_benchmark(
    encoder: Encoder,
    texts: Sequence[str],
    *,
    repeats: int = 3,
    batch_size: int | None = None,
    include_peers: bool = True,
    echo: Callable[[str], None] = print,
    precisions: str | Sequence[str] = ("fp32", "bf16"),
) -> list[Row]:
    """Time the tutorial loop, sentence-transformers and bertkit at each precision; print speed and fidelity."""
    precisions = parse_precisions(precisions)
    batch_size = batch_size or encoder._default_batch_size
    texts = list(texts)
    encoded = tok.encode(encoder.tokenizer, texts, max_length=encoder.max_length)
    counts = [len(e.ids) for e in encoded]
    flops = forward_flops(encoder, counts)
    on_cpu = encoder.device.type == "cpu"  # the matmul peak and its bound are measured for CPUs only
    peaks = {p: matmul_peak_gflops(precision=p) for p in precisions if on_cpu and (p == "fp32" or _runs_here(p))}
    bounds = {p: len(texts) / (flops / (value * 1e9)) for p, value in peaks.items()}
    echo(
        f"{len(texts)} texts, {sum(counts)} tokens (with specials); model {encoder.source.spec} "
        f"({encoder.num_layers} layers, hidden {encoder.hidden_size}); torch threads {torch.get_num_threads()}"
    )
    echo(
        f"{flops / len(texts) / 1e9:.3f} GFLOP per sentence on {describe(encoder.device)}"
        + ("; matmul peak " if peaks else "")
        + ", ".join(f"{p} {value:.0f} GFLOP/s → bound {bounds[p]:.0f} sentences/s" for p, value in peaks.items())
    )

    rows: list[Row] = []
    if include_peers:
        naive = Row("tutorial loop (pad to longest, batch 32, dataset order)")
        rows.append(_time(lambda: naive_loop(encoder, texts), repeats, naive))
        try:
            peer = sentence_transformers_encoder(encoder)
            st = Row("sentence-transformers encode (batch 32, mean)")
            encode = lambda: peer.encode(texts, batch_size=32, convert_to_numpy=True, show_progress_bar=False)  # noqa: E731
            rows.append(_time(encode, repeats, st))
        except ImportError:
            echo("sentence-transformers is not installed: its row is skipped (pip install sentence-transformers)")
    fp32 = Row(f"bertkit fp32 (length-sorted, batch {batch_size})")
    _time(lambda: encoder.embed(texts, RAW_MEAN, batch_size=batch_size, progress=False, warn=False), repeats, fp32)
    rows += [fp32] + [_precision_row(encoder, texts, p, repeats, batch_size) for p in precisions if p != "fp32"]

    _print_table(rows, len(texts), bounds, fp32.vectors, echo)
    split = where_time_goes(encoder.with_options(concurrent_batches=1), texts, batch_size)
    echo(
        "\nwhere bertkit fp32's time goes (one batch at a time): "
        + ", ".join(
            f"{name} {seconds:.2f}s ({seconds / split['total']:.0%})"
            for name, seconds in split.items()
            if name != "total"
        )
    )
    return rows


def _runs_here(precision: str) -> bool:
    if precision == "bf16":
        return fast_bf16_cpu()
    return precision != "int8" or hasattr(torch, "_int_mm")


TOO_SHORT_S = 0.2  # a timed run shorter than this is mostly noise and start-up


def _print_table(
    rows: list[Row], n: int, bounds: dict[str, float], reference: np.ndarray, echo: Callable[[str], None]
) -> None:
    st = next((r for r in rows if r.name.startswith("sentence-transformers") and r.seconds), None)
    naive = next((r for r in rows if r.name.startswith("tutorial") and r.seconds), None)
    echo(
        f"\n{'way':<58} {'sent/s':>7} {'range':>13} {'×ST':>5} {'×naive':>6} {'bound':>6} {'max|Δ|':>8} {'min cos':>8} "
        f"{'cos_p1':>8} {'cos_med':>8}"
    )
    above_peak = False
    for row in rows:
        if not row.seconds:
            echo(f"{row.name:<58} {row.note}")
            continue
        speeds = [n / s for s in row.seconds]
        median = statistics.median(speeds)
        ratio = functools.partial(_ratio, median, n)
        diff, cosine = compare(reference, row.vectors)
        found = cosines(reference, row.vectors)
        precision = next((p for p in ("bf16", "int8") if f" {p} " in f" {row.name} "), "fp32")
        bound = bounds.get(precision, bounds.get("fp32"))
        share = "     -" if bound is None else f"{median / bound:6.0%}" if median <= bound else "  >pk*"
        above_peak = above_peak or (bound is not None and median > bound)
        echo(
            f"{row.name:<58} {median:7.0f} {min(speeds):6.0f}–{max(speeds):<6.0f} {ratio(st):>5} {ratio(naive):>6} "
            f"{share} {diff:8.1e} {cosine:8.5f} {np.percentile(found, 1):8.5f} {np.median(found):8.5f}"
        )
    shortest = min((min(r.seconds) for r in rows if r.seconds), default=1.0)
    if above_peak:
        echo("* faster than the measured matmul peak of its precision: the peak measurement is off on this machine.")
    if shortest < TOO_SHORT_S:
        echo(
            f"note: the fastest run took {shortest * 1000:.0f} ms: too short to time reliably; give more texts "
            "(e.g. --limit 2000 on a larger file)."
        )
    echo("bound: the share of the matmul peak of the row's own precision (fp32 for the peers).")


def _ratio(median: float, n: int, peer: Row | None) -> str:
    """How many times faster than `peer` (its median over the same `n` texts), or '-' without a peer."""
    return f"{median / statistics.median([n / s for s in peer.seconds]):.2f}" if peer else "-"


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Run the benchmark as the command line asks; a bad value is one `error:` line and exit status 2."""
    import argparse
    import sys
    from pathlib import Path

    from bertkit import set_threads
    from bertkit.io.readers import column_spec, read_texts, sample_path

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?", type=Path, help="texts to time (default: bertkit's sample reviews)")
    parser.add_argument("--text-column", "-c", default=None, help="the texts' column (name or index)")
    parser.add_argument("--header", action=argparse.BooleanOptionalAction, default=None, help="first line is a header")
    parser.add_argument("--limit", type=int, default=2000, help="use the first N texts (0 = all)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each way (3 or more for a median)")
    parser.add_argument("--batch-size", type=int, default=None, help="texts per forward pass")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True, help="time the peers too")
    parser.add_argument("--model", default=None, help="model folder or hub name (default: the packaged one)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    parser.add_argument("--precision", default="fp32,bf16", help="precisions side by side: fp32,bf16,int8")
    args = parser.parse_args(argv)
    try:
        precisions = parse_precisions(args.precision)
        if args.repeats < 1:
            raise InputError("--repeats must be at least 1 (3 or more for a median worth reporting).")
        if args.threads is not None:
            set_threads(args.threads)
        source = args.input or sample_path("reviews.tsv")
        column = column_spec(args.text_column) if args.input else "text"
        texts = read_texts(source, column, header=args.header)[0]
        texts = texts[: args.limit] if args.limit else texts
        encoder = Encoder.from_pretrained(args.model, device=args.device)
        return run_benchmark(
            encoder,
            texts,
            repeats=args.repeats,
            batch_size=args.batch_size,
            include_peers=args.peers,
            precisions=precisions,
        )
    except BertkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
