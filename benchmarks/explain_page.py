"""Explainer page speed: how long one sentence takes to update every panel, measured in the browser; and the
README's pictures of the page.

    flock /tmp/bertkit-cpu.lock .venv/bin/python benchmarks/explain_page.py [--sentences 12 --repeats 3]
    .venv/bin/python benchmarks/explain_page.py --screenshots docs/explain

`--screenshots DIR` writes the README's pictures (page.png, one per panel, tokens-korean.png, bad-layer-spec.png;
Korean needs a CJK font, Debian's fonts-noto-cjk, or its letters are empty boxes) into DIR from a live server with a
feature run on the sample reviews and a real `bertkit probe` of them (60 to train, 20 to score), instead of
measuring.

Starts `bertkit serve` with a feature run (logistic regression on bertkit's sample reviews) on a free loopback port,
opens the page in Debian's chromium, types SST-2 dev sentences (up to 64 tokens) and reads the page's own
performance.now() timings (request sent → every panel drawn). For scale, in the same run: the server's POST /explain
alone (httpx, JSON included) and one bare `Encoder.embed` of the same sentence, the floor of any panel.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
from playwright.sync_api import sync_playwright
from sklearn.linear_model import LogisticRegression

from bertkit import Encoder, set_threads
from bertkit.io.readers import read_labelled, sample_path
from bertkit.tasks.classify import TextClassifier

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
TARGET_MS = 300
PANELS = ("tokens", "model", "sentence", "map", "prediction", "probe")


def sentences(encoder: Encoder, count: int) -> list[str]:
    """SST-2 dev sentences of at most 64 tokens, spread over lengths (longest included); sample reviews without data."""
    path = DATA / "sst2" / "dev.tsv"
    texts = (
        read_labelled(path).texts
        if path.is_file()
        else read_labelled(sample_path("reviews.tsv"), "text", "label", header=True).texts
    )
    lengths = [len(encoder.tokenize([t]).tokens[0]) for t in texts]
    fitting = sorted((n, t) for n, t in zip(lengths, texts) if n <= 64)
    picks = np.linspace(0, len(fitting) - 1, count).astype(int)
    return [fitting[i][1] for i in picks]


def feature_run(folder: Path) -> Path:
    """A logistic regression (C=1) on bertkit's 80 sample reviews, saved as a run."""
    data = read_labelled(sample_path("reviews.tsv"), "text", "label", header=True)
    return (
        TextClassifier(classifier=LogisticRegression(C=1.0, max_iter=3000))
        .fit(data.texts, data.labels)
        .save_pretrained(folder / "reviews")
    )


def probe_run(folder: Path) -> Path:
    """A real but small `bertkit probe`: 60 sample reviews to train on, the other 20 to score on, cls and mean."""
    lines = sample_path("reviews.tsv").read_text(encoding="utf-8").splitlines()
    (folder / "train.tsv").write_text("\n".join(lines[:61]) + "\n", encoding="utf-8")
    (folder / "dev.tsv").write_text("\n".join([lines[0]] + lines[61:]) + "\n", encoding="utf-8")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bertkit.cli",
            "probe",
            str(folder / "train.tsv"),
            "--dev",
            str(folder / "dev.tsv"),
            "--text-column",
            "text",
            "--label-column",
            "label",
            "--poolings",
            "cls,mean",
            "-o",
            str(folder / "probe"),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return folder / "probe"


@contextmanager
def served(*args: str) -> Iterator[str]:
    """`bertkit serve ARGS` on a free loopback port; yields its URL, stops it with SIGTERM."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "bertkit.cli", "serve", "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        yield url
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--screenshots",
        type=Path,
        metavar="DIR",
        help="write the README's pictures of the page into DIR (e.g. docs/explain) instead of measuring",
    )
    args = parser.parse_args()
    if args.screenshots:
        screenshots(args.screenshots)
        return
    set_threads(2)
    encoder = Encoder.from_pretrained()
    texts = sentences(encoder, args.sentences)
    with tempfile.TemporaryDirectory() as tmp, served("--run", f"reviews={feature_run(Path(tmp))}") as url:
        browser_ms, server_ms, embed_ms = measure(url, texts, encoder, args.repeats)
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    print(
        f"CPU {cpu}, {os.cpu_count()} cores (browser, server and this script share them); "
        f"{len(texts)} sentences x {args.repeats} repeats, {min(map(len, texts))}-{max(map(len, texts))} characters"
    )
    print(f"{'what':<44}{'median ms':>10}{'p95 ms':>9}{'max ms':>9}")
    for name, values in [
        ("page: all panels updated (browser)", browser_ms),
        ("server: POST /explain alone (httpx)", server_ms),
        ("floor: one Encoder.embed of the sentence", embed_ms),
    ]:
        print(f"{name:<44}{np.median(values):>10.1f}{np.percentile(values, 95):>9.1f}{np.max(values):>9.1f}")
    print(
        f"page / server = {np.median(browser_ms) / np.median(server_ms):.2f}x; "
        f"page / one embed = {np.median(browser_ms) / np.median(embed_ms):.1f}x; "
        f"target < {TARGET_MS} ms: {'met' if np.percentile(browser_ms, 95) < TARGET_MS else 'NOT met'} at p95"
    )


def screenshots(folder: Path) -> None:
    """The README's pictures: the page with "I love Korea" padded to 7 and compared with "I hate Korea" (with word
    attributions), each panel, Korean on the English vocabulary, and an unknown layer spec's message."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        runs = ["--run", f"reviews={feature_run(Path(tmp))}", "--run", f"probe={probe_run(Path(tmp))}"]
        with served(*runs) as url, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url + "/")
            page.wait_for_function(
                "window.bertkit && document.body.dataset.done === String(window.bertkit.seq)", timeout=120_000
            )
            page.add_style_tag(content="header { position: static !important; }")  # the header covers nothing
            _update(
                page,
                lambda: (
                    page.fill("#pad", "7"),
                    page.fill("#text", "I love Korea"),
                    page.fill("#compare", "I hate Korea"),
                    page.check("#attributions"),  # "Why?": the heat strips of the cosine and the prediction
                ),
            )
            for panel in PANELS:
                page.locator(f"#panel-{panel}").screenshot(path=str(folder / f"{panel}.png"))
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(folder / "page.png"))
            _update(page, lambda: (page.fill("#pad", ""), page.fill("#text", "이 영화 재미없네요")))
            page.locator("#panel-tokens").screenshot(path=str(folder / "tokens-korean.png"))
            _update(page, lambda: (page.fill("#text", "I love Korea"), page.fill("#layers", "last9:sum")))
            page.locator("#panel-sentence").screenshot(path=str(folder / "bad-layer-spec.png"))
            browser.close()
    print(f"wrote {len(PANELS) + 3} pictures into {folder}")


def _update(page, action) -> None:
    """Do `action` on the page and wait until it has drawn the answer."""
    before = page.evaluate("window.bertkit.seq")
    action()
    page.wait_for_function(
        "n => window.bertkit.seq > n && document.body.dataset.done === String(window.bertkit.seq)",
        arg=before,
        timeout=60_000,
    )


def measure(url: str, texts: list[str], encoder: Encoder, repeats: int) -> tuple[list, list, list]:
    browser_ms, server_ms, embed_ms = [], [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url + "/")
        page.wait_for_function("document.body.dataset.done === String(window.bertkit.seq)", timeout=120_000)
        page.fill("#compare", "a dull , lifeless mess that goes nowhere")
        for round_ in range(repeats + 1):  # round 0 warms every path (map fitted, plotly traces created)
            for text in texts:
                before = page.evaluate("window.bertkit.timings.length")
                page.fill("#text", text + (" " * round_))
                page.wait_for_function(
                    "n => window.bertkit.timings.length > n && "
                    "document.body.dataset.done === String(window.bertkit.seq)",
                    arg=before,
                    timeout=60_000,
                )
                if round_:
                    browser_ms.append(page.evaluate("window.bertkit.timings[window.bertkit.timings.length - 1]"))
                    settings = page.evaluate("window.bertkit.result.settings")
                    started = time.perf_counter()
                    httpx.post(url + "/explain", json=settings, timeout=60).raise_for_status()
                    server_ms.append(1000 * (time.perf_counter() - started))
                    started = time.perf_counter()
                    encoder.embed([text])
                    embed_ms.append(1000 * (time.perf_counter() - started))
        browser.close()
    return browser_ms, server_ms, embed_ms


if __name__ == "__main__":
    main()
