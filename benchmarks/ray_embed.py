"""Ray engine overhead on one machine: `bertkit embed` local path (one process, `embed_file`) against Ray Data with
1 and 2 actors (`bertkit.ray.embed_files` on a local `ray.init`), on deterministic sentences built from SST-2 words.

Each timing is end to end (model load, Ray start, reading, writing), in the same run, repeated and interleaved;
it prints rows/s, the time ratio Ray / local (target: <= 1.25), and Ray's fixed start-up cost measured on a
64-row input, from which it projects the ratio at --project rows.

    python benchmarks/ray_embed.py [--rows 100000] [--files 4] [--repeats 3] [--project 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import ray

from bertkit import Encoder
from bertkit.io.stream import embed_file
from bertkit.ray import embed_files

SST2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "train.tsv"


def sentences(count: int, seed: int = 0) -> list[str]:
    """`count` sentences of 6-20 words drawn (seeded) from SST-2 train's vocabulary: same list on every run."""
    words = sorted({w for line in SST2.read_text(encoding="utf-8").splitlines() for w in line.split("\t")[0].split()})
    rng = random.Random(seed)
    return [" ".join(rng.choices(words, k=rng.randint(6, 20))) for _ in range(count)]


def write_files(folder: Path, texts: list[str], files: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    size = -(-len(texts) // files)
    paths = []
    for index in range(files):
        path = folder / f"part-{index:03d}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[index * size : (index + 1) * size]))
        paths.append(path)
    return paths


def time_local(paths: list[Path], out: Path) -> float:
    started = time.perf_counter()
    encoder = Encoder.from_pretrained()
    for path in paths:
        embed_file(encoder, path, out / f"{path.stem}.parquet")
    return time.perf_counter() - started


def time_ray(folder: Path, out: Path, actors: int) -> float:
    started = time.perf_counter()
    ray.init(address="local", include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        embed_files(str(folder / "*.jsonl"), out, actors=actors)
    finally:
        ray.shutdown()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--project", type=int, default=100_000)
    args = parser.parse_args()
    ray.data.DataContext.get_current().enable_progress_bars = False
    root = Path(tempfile.mkdtemp(prefix="bertkit-ray-bench-"))
    try:
        texts = sentences(args.rows)
        paths = write_files(root / "in", texts, args.files)
        write_files(root / "small", texts[:64], 1)
        ways = {
            "local (embed_file, 1 process)": lambda out: time_local(paths, out),
            "ray, 1 actor": lambda out: time_ray(root / "in", out, 1),
            "ray, 2 actors": lambda out: time_ray(root / "in", out, 2),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        startup: list[float] = []
        for repeat in range(args.repeats):
            for name, run in ways.items():
                out = root / f"out-{repeat}-{len(times[name])}-{name.split()[0]}"
                times[name].append(run(out))
                shutil.rmtree(out)
                print(f"  repeat {repeat + 1}: {name}: {times[name][-1]:.1f} s", flush=True)
            startup.append(time_ray(root / "small", root / f"small-out-{repeat}", 1))
        local = statistics.median(times["local (embed_file, 1 process)"])
        fixed = statistics.median(startup)
        print(f"\n{args.rows} sentences in {args.files} JSONL files, median of {args.repeats}:")
        print(
            f"{'way':32} {'seconds':>8} {'rows/s':>8} {'× local time':>13} {'projected × at ' + str(args.project):>22}"
        )
        for name, values in times.items():
            median = statistics.median(values)
            steady = args.rows / max(median - (fixed if name.startswith("ray") else 0.0), 1e-9)
            projected = ((fixed if name.startswith("ray") else 0.0) + args.project / steady) / (
                args.project * local / args.rows
            )
            print(f"{name:32} {median:8.1f} {args.rows / median:8.0f} {median / local:13.2f} {projected:22.2f}")
        print(f"Ray start-up (ray.init + driver model + actor start, 64 rows): {fixed:.1f} s median")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
