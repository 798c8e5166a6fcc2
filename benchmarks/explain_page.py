"""Explainer page speed: how long one sentence takes to update every panel, measured in the browser.

    flock /tmp/bertkit-cpu.lock .venv/bin/python benchmarks/explain_page.py [--sentences 12 --repeats 3]

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
from pathlib import Path

import httpx
import numpy as np
from playwright.sync_api import sync_playwright

from bertkit import Encoder
from bertkit.io.readers import read_labelled, sample_path
from bertkit.tasks.classify import TextClassifier

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
TARGET_MS = 300


def sentences(encoder: Encoder, count: int) -> list[str]:
    """SST-2 dev sentences of at most 64 tokens, spread over lengths (longest included); sample reviews without data."""
    path = DATA / "sst2" / "dev.tsv"
    texts = read_labelled(path).texts if path.is_file() else read_labelled(sample_path("reviews.tsv"), "text", "label",
                                                                            header=True).texts
    lengths = [len(encoder.tokenize([t]).tokens[0]) for t in texts]
    fitting = sorted((n, t) for n, t in zip(lengths, texts) if n <= 64)
    picks = np.linspace(0, len(fitting) - 1, count).astype(int)
    return [fitting[i][1] for i in picks]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    encoder = Encoder.from_pretrained(threads=2)
    texts = sentences(encoder, args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        data = read_labelled(sample_path("reviews.tsv"), "text", "label", header=True)
        run = TextClassifier(C=1.0).fit(data.texts, data.labels).save(Path(tmp) / "reviews")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([sys.executable, "-m", "bertkit.cli", "serve", "--port", str(port), "--run",
                                   f"reviews={run}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            browser_ms, server_ms, embed_ms = measure(url, texts, encoder, args.repeats)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    print(f"CPU {cpu}, {os.cpu_count()} cores (browser, server and this script share them); "
          f"{len(texts)} sentences x {args.repeats} repeats, {min(map(len, texts))}-{max(map(len, texts))} characters")
    print(f"{'what':<44}{'median ms':>10}{'p95 ms':>9}{'max ms':>9}")
    for name, values in [("page: all panels updated (browser)", browser_ms),
                         ("server: POST /explain alone (httpx)", server_ms),
                         ("floor: one Encoder.embed of the sentence", embed_ms)]:
        print(f"{name:<44}{np.median(values):>10.1f}{np.percentile(values, 95):>9.1f}{np.max(values):>9.1f}")
    print(f"page / server = {np.median(browser_ms) / np.median(server_ms):.2f}x; "
          f"page / one embed = {np.median(browser_ms) / np.median(embed_ms):.1f}x; "
          f"target < {TARGET_MS} ms: {'met' if np.percentile(browser_ms, 95) < TARGET_MS else 'NOT met'} at p95")


def measure(url: str, texts: list[str], encoder: Encoder, repeats: int) -> tuple[list, list, list]:
    browser_ms, server_ms, embed_ms = [], [], []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url + "/")
        page.wait_for_function("document.body.dataset.done === String(window.bertkit.seq)", timeout=120_000)
        page.fill("#compare", "a dull , lifeless mess that goes nowhere")
        for round_ in range(repeats + 1):  # round 0 warms every path (map fitted, plotly traces created)
            for text in texts:
                before = page.evaluate("window.bertkit.timings.length")
                page.fill("#text", text + (" " * round_))
                page.wait_for_function("n => window.bertkit.timings.length > n && "
                                       "document.body.dataset.done === String(window.bertkit.seq)", arg=before,
                                       timeout=60_000)
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
