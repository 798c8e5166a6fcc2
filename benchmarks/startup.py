"""Start-up time of the command line: how long each command takes before it does anything, median of 5 runs.

    python benchmarks/startup.py [--repeats 5] [--importtime]

Beside bertkit's commands it times the floor (`python -c pass`) and what a command would cost that imported torch
and transformers at start (`python -c "import torch, transformers"`), the state before bertkit's lazy imports.
--importtime prints the ten slowest imports of `bertkit tokenize` (`python -X importtime`), to find culprits.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
COMMANDS = {
    "python -c pass (the floor)": [sys.executable, "-c", "pass"],
    "import torch, transformers (eager imports)": [sys.executable, "-c", "import torch, transformers"],
    "bertkit --help": [str(BIN / "bertkit"), "--help"],
    "bertkit --version": [str(BIN / "bertkit"), "--version"],
    "bertkit a typo": [str(BIN / "bertkit"), "tokenise"],
    "bertkit tokenize 'I love Korea'": [str(BIN / "bertkit"), "tokenize", "I love Korea", "--max-length", "7"],
    "bertkit info (loads the model)": [str(BIN / "bertkit"), "info"],
}


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"}
    )
    return time.perf_counter() - started


def importtime(top: int = 10) -> None:
    probe = (
        "import sys; sys.argv = ['bertkit', 'tokenize', 'I love Korea']\nfrom bertkit.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", probe], capture_output=True, text=True).stderr
    rows = []
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
            rows.append((int(cumulative), name))
    print("\nslowest imports of `bertkit tokenize` (cumulative µs, python -X importtime):")
    for cumulative, name in sorted(rows, reverse=True)[:top]:
        print(f"{cumulative:>10}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--importtime", action="store_true")
    options = parser.parse_args()
    for command in COMMANDS.values():  # warm the file cache once: the first run of anything reads from disk
        seconds(command)
    print(f"{'command':<45} {'median s':>8} {'min':>6} {'max':>6}   ({options.repeats} runs, {os.cpu_count()} CPUs)")
    for name, command in COMMANDS.items():
        times = [seconds(command) for _ in range(options.repeats)]
        print(f"{name:<45} {statistics.median(times):8.2f} {min(times):6.2f} {max(times):6.2f}")
    if options.importtime:
        importtime()


if __name__ == "__main__":
    main()
