"""bertkit on a GPU against the GPU peers, in one run on one device: embedding throughput and fine-tuning speed.

    python benchmarks/gpu.py                          # CUDA: all of SST-2 train and a 100k-text corpus
    bash benchmarks/gpu_check.sh --dry-run OUT        # the same code at CI size on a CPU (tests/test_gpu_check.py)

Embedding, sentences/s (median of --repeats after a warm-up) with the device's peak memory beside each row, for
the packaged default and a BERT-base-shaped model (12 layers, hidden 768, 12 heads, random weights: speed does not
depend on their values), on two corpora: SST-2 train (short sentences) and --synthetic texts built from it (2 to 6
SST-2 sentences joined: paragraph-long inputs, a different length mix):
- naive transformers loop: AutoModel in fp32, batches of 32 in dataset order padded to their longest, mean pooling;
- sentence-transformers `encode` at its fastest settings: the model in fp16 (`.half()`), batch 128 (fp32 on a CPU);
- bertkit `Encoder.embed` in fp32, fp16 and bf16 (autocast; each where the device runs it), its default batching.
`min cos` is the smallest cosine of a row's vectors to bertkit fp32's: the rows compute the same thing.

Fine-tuning, examples/s of one epoch and SST-2 dev accuracy, the packaged default with a classification head,
batch 32, lr 1e-4, linear schedule: transformers `Trainer` (fp16 on CUDA, group_by_length) against bertkit
`finetune` (mixed_precision fp16 on CUDA). Targets (issues 25, 34): embedding >= 1.3x sentence-transformers at
cosine >= 0.999; fine-tuning >= 1.0x Trainer (dev accuracy beside it).

`--json PATH` writes the figures and the targets' PASS/FAIL as JSON after every table, and `--budget-s` stops
starting tables once that many seconds have passed (benchmarks/gpu_check.sh runs it so, within its 8 minutes):
the default model's tables first, then fine-tuning, then the base-shaped model's. `--models` takes the models that
gpu_check.sh built (benchmarks/gpu_models.py) and names them in the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __name__ != "__mp_main__":  # the load clients, spawned, import this file again and need neither (4-5 s each)
    import numpy as np
    import torch

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
NAIVE_BATCH, PEER_BATCHES, TRAIN_BATCH, LR = 32, (32, 128, 512), 32, 1e-4
EMBED_TARGET, COSINE_TARGET, FINETUNE_TARGET, SERVE_TARGET = 1.5, 0.999, 1.0, 2.0
SENTENCES_TARGET = 20_000  # the packaged model on SST-2 sentences, texts/s on the GPU
HALF_WAYS = ("bertkit fp16", "bertkit bf16")
NAIVE = f"naive transformers loop (fp32, batch {NAIVE_BATCH})"
TOKENIZE_ONLY = "bertkit tokenization only (no model: the host's ceiling)"
PEER = "sentence-transformers encode"
SERVE_CLIENTS, SERVE_PROCESSES, SERVE_WARM_UP_S = 32, 4, 5


class Budget:
    """Seconds left to start more work (`--budget-s`; 0: no limit); what was left out is listed."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds if seconds > 0 else float("inf")
        self.skipped: list[str] = []

    def allows(self, what: str) -> bool:
        if time.monotonic() < self.deadline:
            return True
        self.skipped.append(what)
        print(f"  {what}: left out, the time budget is spent", file=sys.stderr)
        return False


# ---- corpora and models ------------------------------------------------------------------------------------------
def sst2(split: str) -> tuple[list[str], list[int]]:
    from bertkit.io.readers import read_labelled

    data = read_labelled(DATA / "sst2" / f"{split}.tsv")
    return list(data.texts), [int(v) for v in data.labels]


def synthetic_corpus(sentences: list[str], size: int, seed: int = 0) -> list[str]:
    """`size` texts of 2 to 6 SST-2 sentences each, drawn with a fixed seed."""
    pick = random.Random(seed)
    return [" ".join(pick.choices(sentences, k=pick.randint(2, 6))) for _ in range(size)]


def base_shaped_model(folder: Path, layers: int = 12) -> Path:
    """A BERT-base-shaped model (hidden 768, 12 heads, feed-forward 3072) with random weights and the default's
    tokenizer."""
    from gpu_models import random_bert

    from bertkit.encoder.models import default_model_dir

    return random_bert(folder, default_model_dir(), layers, 768, 12, sentence=False)


# ---- the ways ----------------------------------------------------------------------------------------------------
def naive_loop(path: str, device: torch.device) -> Callable[[list[str]], np.ndarray]:
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).to(device).eval()

    def embed(texts: list[str]) -> np.ndarray:
        out = []
        with torch.inference_mode():
            for start in range(0, len(texts), NAIVE_BATCH):
                inputs = tokenizer(
                    texts[start : start + NAIVE_BATCH], padding=True, truncation=True, return_tensors="pt"
                ).to(device)
                states = model(**inputs).last_hidden_state
                mask = inputs["attention_mask"].unsqueeze(-1).to(states.dtype)
                out.append(((states * mask).sum(1) / mask.sum(1)).float().cpu().numpy())
        return np.concatenate(out)

    return embed


def sentence_transformers_model(path: str, device: torch.device):
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Pooling, Transformer

    transformer = Transformer(path)
    dimension = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
    model = SentenceTransformer(modules=[transformer, Pooling(dimension(), "mean")], device=str(device))
    if device.type == "cuda":
        model.half()  # its documented fastest GPU setting
    return model


def sentence_transformers_encode(model, batch_size: int) -> Callable[[list[str]], np.ndarray]:
    def embed(texts: list[str]) -> np.ndarray:
        return model.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)

    return embed


def tokenization_only(path: str) -> Callable[[list[str]], np.ndarray]:
    """What an embedding call does on the host before any pass: bertkit's tokenization of the whole corpus."""
    from bertkit import Encoder
    from bertkit.encoder import tokenize as tok

    tokenizer = Encoder.from_pretrained(path, device="cpu").tokenizer

    def embed(texts: list[str]) -> np.ndarray:
        encoded = tok.encode(tokenizer, texts, max_length=256)
        return np.zeros((len(encoded), 1), np.float32)

    return embed


def bertkit_embed(path: str, device: torch.device, precision: str) -> Callable[[list[str]], np.ndarray] | str:
    from bertkit import Encoder, InputError

    try:
        encoder = Encoder.from_pretrained(path, device=device, precision=precision)
    except InputError as exc:
        return f"refused here: {exc}"
    return lambda texts: encoder.embed(texts, progress=False, warn=False)


# ---- measuring ---------------------------------------------------------------------------------------------------
def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def allocated(device: torch.device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def timed(embed: Callable[[list[str]], np.ndarray], texts: list[str], repeats: int, device: torch.device) -> dict:
    """Warm up on the first texts, then time `repeats` passes over all of them; the passes' peak device memory
    above what was allocated before them (the models' weights)."""
    embed(texts[: min(len(texts), 2048)])
    before = allocated(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rates = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        vectors = np.asarray(embed(texts), dtype=np.float32)
        synchronize(device)
        rates.append(len(texts) / (time.perf_counter() - started))
    working = (torch.cuda.max_memory_allocated(device) - before) / 2**30 if device.type == "cuda" else None
    return {"rates": rates, "vectors": vectors, "working_gib": working}


def min_cosine(reference: np.ndarray, vectors: np.ndarray) -> float:
    dots = (reference * vectors).sum(1)
    norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(vectors, axis=1)
    return float((dots / np.maximum(norms, 1e-12)).min())


def load_ways(path: str, device: torch.device, only: list[str]) -> dict[str, tuple[Callable | str, float | None]]:
    """Each way's embed function (or why it does not run here) and the device memory its model took, in GiB; `only`:
    the ways whose names hold one of these (none: every way)."""
    peer_precision = "fp16" if device.type == "cuda" else "fp32"
    peer: dict = {}
    makers: dict[str, Callable[[], Callable | str]] = {
        TOKENIZE_ONLY: lambda: tokenization_only(path),
        NAIVE: lambda: naive_loop(path, device),
    }
    for size in PEER_BATCHES:  # one model, each batch size: the comparison is with its best
        makers[f"{PEER} ({peer_precision}, batch {size})"] = lambda size=size: sentence_transformers_encode(
            peer.get("model") or peer.setdefault("model", sentence_transformers_model(path, device)), size
        )
    for precision in ("fp32", "fp16", "bf16"):
        makers[f"bertkit {precision}"] = lambda precision=precision: bertkit_embed(path, device, precision)
    ways = {}
    for way, make in makers.items():
        if only and not any(part in way for part in only):
            continue
        before = allocated(device)
        try:
            embed = make()
        except Exception as exc:  # one way failing to load is a row that says so, not a lost run
            embed = f"failed to load here: {type(exc).__name__}: {exc}"
        ways[way] = (embed, (allocated(device) - before) / 2**30 if device.type == "cuda" else None)
    return ways


def busy_share(embed: Callable[[list[str]], np.ndarray], texts: list[str], seconds: float, device) -> float | None:
    """The GPU's busy share of an embedding run: its kernels' and copies' time (torch's profiler) over `seconds`,
    the run's unprofiled wall time (one stream: they do not overlap)."""
    if device.type != "cuda":
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as profiler:
            embed(texts)
            synchronize(device)
        busy_us = sum(e.time_range.elapsed_us() for e in profiler.events() if e.device_type == DeviceType.CUDA)
    except Exception as exc:  # the profiler is a nicety: its failure leaves the figures
        print(f"  busy share not measured: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    return min(1.0, busy_us / 1e6 / seconds)


def ratio(value: float, base: float | None) -> float | None:
    return None if base is None else value / base


def embedding_table(
    name: str,
    path: str,
    corpora: dict[str, list[str]],
    device,
    repeats: int,
    budget: Budget | None = None,
    only: list[str] | None = None,
) -> list[dict]:
    budget = budget or Budget(0)
    ways = load_ways(path, device, only or [])
    rows = []
    for corpus, texts in corpora.items():
        if not budget.allows(f"embedding {name} / {corpus}"):
            continue
        results = {}
        for way, (embed, _) in ways.items():
            if isinstance(embed, str):
                results[way] = {"note": embed}
                continue
            try:
                results[way] = timed(embed, texts, repeats, device)
                if way != TOKENIZE_ONLY:
                    seconds = len(texts) / statistics.median(results[way]["rates"])
                    results[way]["busy"] = busy_share(embed, texts, seconds, device)
            except Exception as exc:  # an error (or out of memory) in one way leaves the others' figures
                results[way] = {"note": f"failed here: {type(exc).__name__}: {exc}"}
                continue
            print(f"  {name} / {corpus} / {way}: {statistics.median(results[way]['rates']):.0f}/s", file=sys.stderr)
        ran = {way: result for way, result in results.items() if "rates" in result}
        reference = ran["bertkit fp32"]["vectors"] if "bertkit fp32" in ran else None
        peers = [statistics.median(r["rates"]) for w, r in ran.items() if w.startswith(PEER)]
        peer = max(peers) if peers else None  # sentence-transformers at its best batch size
        naive = statistics.median(ran[NAIVE]["rates"]) if NAIVE in ran else None
        for way, result in results.items():
            row = {"model": name, "corpus": corpus, "way": way}
            if "note" in result:
                rows.append({**row, "note": result["note"]})
                continue
            median = statistics.median(result["rates"])
            weights = ways[way][1]
            rows.append(
                {
                    **row,
                    "per_second": median,
                    "range": (min(result["rates"]), max(result["rates"])),
                    "x_peer": ratio(median, peer),
                    "x_naive": ratio(median, naive),
                    "min_cos": None
                    if reference is None or way == TOKENIZE_ONLY
                    else min_cosine(reference, result["vectors"]),
                    "busy": result.get("busy"),
                    "peak_gib": None if weights is None else weights + result["working_gib"],
                    "weights_gib": weights,
                }
            )
    return rows


def trainer_epoch(train, dev, device: torch.device, folder: Path) -> dict:
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    from bertkit.encoder.models import default_model_dir, quiet_transformers

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir())
    rows = [{**tokenizer(t, truncation=True, max_length=128), "labels": y} for t, y in zip(*train)]
    dev_rows = [{**tokenizer(t, truncation=True, max_length=128), "labels": y} for t, y in zip(*dev)]
    torch.manual_seed(0)
    with quiet_transformers():
        model = AutoModelForSequenceClassification.from_pretrained(default_model_dir(), num_labels=2)
        args = TrainingArguments(
            output_dir=str(folder),
            per_device_train_batch_size=TRAIN_BATCH,
            per_device_eval_batch_size=128,
            learning_rate=LR,
            weight_decay=0.01,
            warmup_steps=0.1,
            num_train_epochs=1,
            train_sampling_strategy="group_by_length",
            fp16=device.type == "cuda",
            save_strategy="no",
            eval_strategy="no",
            logging_strategy="no",
            report_to=[],
            disable_tqdm=True,
            use_cpu=device.type == "cpu",
            seed=0,
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=rows,
            processing_class=tokenizer,
            data_collator=DataCollatorWithPadding(tokenizer),
        )
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        synchronize(device)
        started = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its own summary line
            trainer.train()
        synchronize(device)
        seconds = time.perf_counter() - started
        predictions = trainer.predict(dev_rows).predictions.argmax(-1)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {
        "per_second": len(rows) / seconds,
        "accuracy": float((predictions == np.asarray(dev[1])).mean()),
        "peak_gib": peak,
    }


def bertkit_epoch(train, dev, device: torch.device, folder: Path) -> dict:
    from bertkit.tasks.finetune import FinetuneArguments, finetune

    for name, (texts, labels) in (("train", train), ("dev", dev)):
        (folder / f"{name}.tsv").write_text("".join(f"{t}\t{y}\n" for t, y in zip(texts, labels)), encoding="utf-8")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    tuned = finetune(
        folder / "train.tsv",
        folder / "dev.tsv",
        output_dir=folder / "run",
        device=str(device),
        progress=False,
        args=FinetuneArguments(
            num_train_epochs=1,
            learning_rate=LR,
            batch_size=TRAIN_BATCH,
            mixed_precision="fp16" if device.type == "cuda" else "no",
        ),
    )
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    history = json.loads((folder / "run" / "bertkit.json").read_text())["training"]["history"]
    predictions = tuned.predict(dev[0])
    accuracy = float(np.mean([str(p) == str(y) for p, y in zip(predictions, dev[1])]))
    return {"per_second": history[0]["examples_per_second"], "accuracy": accuracy, "peak_gib": peak}


def finetune_table(train, dev, device, repeats: int, budget: Budget | None = None) -> list[dict]:
    budget = budget or Budget(0)
    ways = {"transformers Trainer": trainer_epoch, "bertkit finetune": bertkit_epoch}
    results: dict[str, list[dict]] = {way: [] for way in ways}
    failures: dict[str, str] = {}
    for repeat in range(repeats):  # the ways take turns, so a spent budget leaves both with as many runs
        if repeat and not budget.allows(f"fine-tuning, runs {repeat + 1} to {repeats}"):
            break
        for way, run in ways.items():
            if way in failures:
                continue
            try:
                with tempfile.TemporaryDirectory() as folder:
                    results[way].append(run(train, dev, device, Path(folder)))
            except Exception as exc:  # one way failing leaves the other's figures
                failures[way] = f"failed here: {type(exc).__name__}: {exc}"
                continue
            print(f"  fine-tuning / {way}: {results[way][-1]['per_second']:.0f} examples/s", file=sys.stderr)
    rows = []
    for way, runs in results.items():
        row = {"way": way + (" (fp16)" if device.type == "cuda" else " (fp32)")}
        if not runs:
            rows.append({**row, "note": failures.get(way, "not run")})
            continue
        rates = [r["per_second"] for r in runs]
        rows.append(
            {
                **row,
                "per_second": statistics.median(rates),
                "range": (min(rates), max(rates)),
                "accuracy": statistics.median(r["accuracy"] for r in runs),
                "peak_gib": max((r["peak_gib"] or 0.0) for r in runs) if device.type == "cuda" else None,
            }
        )
    trainer = rows[0].get("per_second")
    for row in rows:
        if "per_second" in row:
            row["x_peer"] = ratio(row["per_second"], trainer)
    return rows


def targets(
    embedding: list[dict], finetuning: list[dict], device: torch.device, serving: list[dict] | None = None
) -> list[dict]:
    """The issue's targets, each PASS/FAIL with its figure: bertkit >= 1.5x sentence-transformers fp16 at its best
    batch size, at cosine >= 0.999 (per model and corpus), >= 20,000 SST-2 sentences/s with the packaged model,
    `serve` >= 2x a naive endpoint at 32 clients, fine-tuning >= 1.0x Trainer fp16."""
    if device.type != "cuda":
        why = "the targets are set against sentence-transformers and Trainer in fp16, on a GPU"
        return [{"target": "speed targets", "status": "SKIP", "figure": why}]
    found = []
    for model, corpus in dict.fromkeys((row["model"], row["corpus"]) for row in embedding):
        rows = [r for r in embedding if (r["model"], r["corpus"]) == (model, corpus) and "per_second" in r]
        ours = [r for r in rows if r["way"].startswith("bertkit ") and r["way"] != TOKENIZE_ONLY]
        close = [
            r for r in ours if r["min_cos"] is not None and r["x_peer"] is not None and r["min_cos"] >= COSINE_TARGET
        ]
        name = f"embedding {model} / {corpus}: bertkit >= {EMBED_TARGET}x sentence-transformers fp16 at its best batch"
        if not close:
            cosines = ", ".join(f"{r['way']} {r['min_cos']:.5f}" for r in ours if r["min_cos"] is not None)
            found.append({"target": name, "status": "FAIL", "figure": f"no way at cos >= 0.999 ({cosines or '-'})"})
            continue
        best = max(close, key=lambda r: r["per_second"])
        figure = (
            f"{best['way']} {best['x_peer']:.2f}x at min cos {best['min_cos']:.5f}: {best['per_second']:.0f}/s, "
            f"peak {memory(best['peak_gib'])} GiB"
        )
        status = "PASS" if best["x_peer"] >= EMBED_TARGET else "FAIL"
        found.append({"target": name, "status": status, "figure": figure, "x_peer": best["x_peer"]})
        if model.startswith("default") and corpus.startswith("SST-2"):
            name = f"embedding {model} / {corpus}: >= {SENTENCES_TARGET:,} sentences/s"
            status = "PASS" if best["per_second"] >= SENTENCES_TARGET else "FAIL"
            found.append({"target": name, "status": status, "figure": f"{best['way']}: {best['per_second']:.0f}/s"})
    if serving:
        name = (
            f"serve --device cuda >= {SERVE_TARGET}x a naive FastAPI + sentence-transformers endpoint, "
            f"{SERVE_CLIENTS} clients"
        )
        ours, naive = (next((r for r in serving if r["server"].startswith(k)), {}) for k in ("bertkit", "naive"))
        if not ours.get("per_second") or not naive.get("per_second"):
            found.append({"target": name, "status": "FAIL", "figure": ours.get("note") or naive.get("note") or "-"})
        else:
            x = ours["per_second"] / naive["per_second"]
            figure = (
                f"{x:.2f}x: {ours['per_second']:.0f} against {naive['per_second']:.0f} requests/s, p99 "
                f"{ours['p99_ms']:.1f} against {naive['p99_ms']:.1f} ms"
            )
            found.append(
                {"target": name, "status": "PASS" if x >= SERVE_TARGET else "FAIL", "figure": figure, "x_peer": x}
            )
    if finetuning:
        name = f"fine-tuning: bertkit fp16 >= {FINETUNE_TARGET}x Trainer fp16"
        trainer, ours = finetuning
        if ours.get("x_peer") is None:
            note = ours.get("note") or trainer.get("note") or "not measured"
            found.append({"target": name, "status": "FAIL", "figure": note})
            return found
        figure = (
            f"{ours['x_peer']:.2f}x: {ours['per_second']:.0f} against {trainer['per_second']:.0f} examples/s, dev "
            f"accuracy {ours['accuracy']:.4f} against {trainer['accuracy']:.4f}"
        )
        status = "PASS" if ours["x_peer"] >= FINETUNE_TARGET else "FAIL"
        found.append({"target": name, "status": status, "figure": figure, "x_peer": ours["x_peer"]})
    return found


# ---- serving -----------------------------------------------------------------------------------------------------
def naive_server(port: int, path: str, device: str) -> None:
    """The way most tutorials serve on a GPU: FastAPI, one sentence-transformers `encode` (fp16) per request."""
    import uvicorn
    from fastapi import FastAPI
    from pydantic import BaseModel

    class Body(BaseModel):
        inputs: str | list[str]

    model = sentence_transformers_model(path, torch.device(device))
    app = FastAPI()

    def embed(body: Body) -> list:
        texts = body.inputs if isinstance(body.inputs, list) else [body.inputs]
        return model.encode(texts, convert_to_numpy=True, show_progress_bar=False).tolist()

    embed.__annotations__["body"] = Body  # a class made here: FastAPI cannot resolve its name as a string
    app.post("/embed")(embed)
    app.get("/health")(lambda: {"status": "ok"})
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(command: list[str], port: int, log: Path):
    import subprocess

    import httpx

    with log.open("ab") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    for _ in range(600):
        if process.poll() is not None:
            raise RuntimeError(f"it exited with status {process.returncode}: {log.read_text(errors='replace')[-400:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("it did not answer /health within 120 s")


def load_clients(url: str, texts: list[str], clients: int, ready, starts, seconds: float, results) -> None:
    """One load process: `clients` connections, each posting one sentence at a time until `start_at` + `seconds`.

    It says it is `ready` once imported and takes `start_at` from `starts`. What runs before `start_at` warms the
    server up (every shape the clients send); a request counts when it began at `start_at` or later and ended inside
    the window.
    """
    import asyncio

    import httpx

    ready.put(True)
    start_at = starts.get()
    end = start_at + seconds

    async def client(http, pick: random.Random, latencies: list, errors: list) -> None:
        while time.time() < end:
            began, started = time.time(), time.perf_counter()
            try:
                response = await http.post(url, json={"inputs": pick.choice(texts)})
                ok = response.status_code == 200
            except httpx.HTTPError:
                ok = False
            if began >= start_at and time.time() <= end:
                (latencies if ok else errors).append(time.perf_counter() - started)

    async def run() -> tuple[list, list]:
        latencies: list = []
        errors: list = []
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(limits=limits, timeout=60) as http:
            await asyncio.gather(*(client(http, random.Random(k), latencies, errors) for k in range(clients)))
        return latencies, errors

    results.put(asyncio.run(run()))


def measure_server(url: str, texts: list[str], seconds: float, warm_up: float) -> dict:
    """Requests/s, p50 and p99 of `SERVE_CLIENTS` concurrent clients over `SERVE_PROCESSES` processes, after
    `warm_up` seconds of the same load once every process has started (spawn imports torch)."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    results, ready, starts = context.Queue(), context.Queue(), context.Queue()
    share = SERVE_CLIENTS // SERVE_PROCESSES
    processes = [
        context.Process(target=load_clients, args=(url, texts, share, ready, starts, seconds, results), daemon=True)
        for _ in range(SERVE_PROCESSES)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=120)
    start_at = time.time() + warm_up
    for _ in processes:
        starts.put(start_at)
    latencies, errors = [], []
    for _ in processes:
        found, failed = results.get(timeout=seconds + 120)
        latencies += found
        errors += failed
    for process in processes:
        process.join(30)
    latencies.sort()
    pick = lambda q: 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")  # noqa: E731
    return {"per_second": len(latencies) / seconds, "p50_ms": pick(0.5), "p99_ms": pick(0.99), "errors": len(errors)}


def serve_table(
    path: str, texts: list[str], device: torch.device, seconds: float, warm_up: float, folder: Path
) -> list[dict]:
    """`bertkit serve` (fp16 on a GPU) against the naive endpoint, each alone, the same clients and sentences."""
    precision = "fp16" if device.type == "cuda" else "fp32"
    servers = {
        f"bertkit serve --device {device.type} --precision {precision}": lambda port: [
            sys.executable, "-m", "bertkit.cli", "serve", "--model", path, "--port", str(port),
            "--device", str(device), "--precision", precision,
        ],
        f"naive FastAPI + sentence-transformers ({precision}), one encode a request": lambda port: [
            sys.executable, __file__, "--naive-server", str(port), "--naive-model", path, "--device", str(device),
        ],
    }  # fmt: skip
    rows = []
    for name, command in servers.items():
        port = free_port()
        try:
            process = start_server(command(port), port, folder / "servers.log")
        except RuntimeError as exc:
            rows.append({"server": name, "note": f"did not start: {exc}"})
            continue
        try:
            rows.append({"server": name, **measure_server(f"http://127.0.0.1:{port}/embed", texts, seconds, warm_up)})
        except Exception as exc:  # one server's failure leaves the other's figures
            rows.append({"server": name, "note": f"failed: {type(exc).__name__}: {exc}"})
        finally:
            process.terminate()
            process.wait(60)
        print(f"  serving: {name}: {rows[-1].get('per_second', 0):.0f} requests/s", file=sys.stderr)
    return rows


# ---- report ------------------------------------------------------------------------------------------------------
def memory(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_report(device, embedding: list[dict], finetuning: list[dict], facts: str, serving: list[dict]) -> None:
    print(f"\n{facts}")
    print(
        f"\n{'model / corpus / way':<88} {'texts/s':>8} {'range':>15} {'x ST':>5} {'x naive':>7} {'min cos':>8} "
        f"{'GiB':>6} {'GPU busy':>8}"
    )
    for row in embedding:
        label = f"{row['model']} / {row['corpus']} / {row['way']}"
        if "note" in row:
            print(f"{label:<88} {row['note'][:90]}")
            continue
        low, high = row["range"]
        print(
            f"{label:<88} {row['per_second']:>8.0f} {low:>7.0f}-{high:<7.0f} {number(row['x_peer'], '>5.2f')} "
            f"{number(row['x_naive'], '>7.2f')} {number(row['min_cos'], '>8.5f')} {memory(row['peak_gib']):>6} "
            f"{number(row.get('busy'), '>8.0%')}"
        )
    print(
        f"\n{'fine-tuning (one epoch)':<40} {'examples/s':>10} {'range':>15} {'x Trainer':>9} {'dev acc':>8} {'GiB':>6}"
    )
    for row in finetuning:
        if "note" in row:
            print(f"{row['way']:<40} {row['note'][:120]}")
            continue
        low, high = row["range"]
        print(
            f"{row['way']:<40} {row['per_second']:>10.1f} {low:>7.1f}-{high:<7.1f} {number(row['x_peer'], '>9.2f')} "
            f"{row['accuracy']:>8.4f} {memory(row['peak_gib']):>6}"
        )
    heading = f"server ({SERVE_CLIENTS} clients, one sentence a request)"
    print(f"\n{heading:<60} {'requests/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}")
    for row in serving:
        if "note" in row:
            print(f"{row['server']:<60} {row['note'][:120]}")
            continue
        print(
            f"{row['server']:<60} {row['per_second']:>10.0f} {row['p50_ms']:>7.1f} {row['p99_ms']:>7.1f} "
            f"{row['errors']:>6}"
        )


def shape_name(kind: str, path: str) -> str:
    """'default (6x384)': the model's kind and shape, read from its config."""
    config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    return f"{kind} ({config['num_hidden_layers']}x{config['hidden_size']})"


def write_json(path: Path | None, payload: dict, device: torch.device) -> None:
    if path is None:
        return
    payload["targets"] = targets(payload["embedding"], payload["finetuning"], device, payload.get("serving"))
    path.write_text(json.dumps(payload, indent=1), encoding="utf-8")


def release(device: torch.device) -> None:
    """Hand back what the last table's models held, so the next table's peak memory is its own."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (the CI-sized check)")
    parser.add_argument("--rows", type=int, default=0, help="SST-2 train sentences to embed (0: all 67,349)")
    parser.add_argument("--synthetic", type=int, default=100_000, help="texts in the synthetic corpus")
    parser.add_argument("--finetune-rows", type=int, default=0, help="SST-2 train sentences to fine-tune on (0: all)")
    parser.add_argument("--dev-rows", type=int, default=0, help="SST-2 dev sentences to score on (0: all 872)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base-layers", type=int, default=12, help="layers of the BERT-base-shaped model")
    parser.add_argument("--models", type=Path, help="models.json of benchmarks/gpu_models.py: the models to use")
    parser.add_argument("--json", type=Path, help="write the figures and targets here (after every table)")
    parser.add_argument("--budget-s", type=float, default=0, help="start no table after this many seconds (0: none)")
    parser.add_argument("--serve-seconds", type=float, default=8, help="seconds each server is measured (0: skip)")
    parser.add_argument("--serve-warm-up", type=float, default=SERVE_WARM_UP_S, help="seconds of load before that")
    parser.add_argument("--only-ways", default="", help="comma-separated parts of the ways' names to run (default all)")
    parser.add_argument("--serve-first", action="store_true", help="measure the servers before the embedding tables")
    parser.add_argument("--no-finetune", action="store_true", help="leave the fine-tuning table out")
    parser.add_argument("--naive-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--naive-model", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.naive_server:
        naive_server(options.naive_server, options.naive_model, options.device)
        return
    if not (DATA / "sst2" / "train.tsv").is_file():
        sys.exit(f"{DATA / 'sst2' / 'train.tsv'} is missing: set BERTKIT_DATA to the folder holding sst2/.")

    import sentence_transformers
    import transformers

    from bertkit.encoder.devices import describe, resolve_device
    from bertkit.encoder.models import default_model_dir

    device = resolve_device(options.device)
    budget = Budget(options.budget_s)
    train = sst2("train")
    dev = sst2("dev")
    dev = (dev[0][: options.dev_rows or None], dev[1][: options.dev_rows or None])
    sentences = train[0][: options.rows or None]
    corpora = {
        f"SST-2 train ({len(sentences)})": sentences,
        f"synthetic ({options.synthetic})": synthetic_corpus(train[0], options.synthetic),
    }
    limit = options.finetune_rows or None
    facts = (
        f"device {describe(device)}; torch {torch.__version__}, transformers {transformers.__version__}, "
        f"sentence-transformers {sentence_transformers.__version__}; median of {options.repeats}; "
        f"fine-tuning on {len(train[0][:limit])} SST-2 sentences, dev {len(dev[0])}"
    )
    with tempfile.TemporaryDirectory() as folder:
        if options.models:
            built = json.loads(options.models.read_text(encoding="utf-8"))
            paths = {kind: built[kind]["path"] for kind in ("default", "base")}
            labels = {kind: built[kind]["label"] for kind in ("default", "base")}
        else:
            paths = {
                "default": str(default_model_dir()),
                "base": str(base_shaped_model(Path(folder) / "base", options.base_layers)),
            }
            labels = {"default": "the packaged default", "base": "BERT-base-shaped, random weights"}
        names = {"default": shape_name("default", paths["default"]), "base": shape_name("base-shaped", paths["base"])}
        payload: dict = {
            "facts": facts,
            "device": describe(device),
            "models": {names[kind]: labels[kind] for kind in names},
            "sizes": {"corpora": list(corpora), "finetune_rows": len(train[0][:limit]), "dev_rows": len(dev[0])},
            "repeats": options.repeats,
            "embedding": [],
            "finetuning": [],
            "left_out": budget.skipped,
        }
        payload["serving"] = []
        only = [part for part in options.only_ways.split(",") if part]

        def serve() -> None:
            if options.serve_seconds and budget.allows("serving"):
                payload["serving"] = serve_table(
                    paths["default"], dev[0], device, options.serve_seconds, options.serve_warm_up, Path(folder)
                )
                write_json(options.json, payload, device)

        if options.serve_first:
            serve()
        for kind in ("default", "base"):
            payload["embedding"] += embedding_table(
                names[kind], paths[kind], corpora, device, options.repeats, budget, only
            )
            write_json(options.json, payload, device)
            release(device)
        if not options.serve_first:
            serve()
        if not options.no_finetune and budget.allows("fine-tuning"):
            train_rows = (train[0][:limit], train[1][:limit])
            payload["finetuning"] = finetune_table(train_rows, dev, device, options.repeats, budget)
            write_json(options.json, payload, device)
    serving = payload["serving"]
    print_report(device, payload["embedding"], payload["finetuning"], facts, serving)
    for target in payload.get("targets") or targets(payload["embedding"], payload["finetuning"], device, serving):
        print(f"{target['status']:<5} {target['target']}: {target['figure']}")


if __name__ == "__main__":
    main()
