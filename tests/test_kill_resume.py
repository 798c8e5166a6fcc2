"""Kill -9 at seeded random points, then run the same command again: the result equals an uninterrupted run.

Each kill lands while the command is working (after its first progress record, or at a random time for commands
that keep none). After every kill, an output that exists must be complete and equal to the uninterrupted one: a
partial file is never taken for a finished one.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import LONG_TESTS
from servers import start_child
from test_finetune import sentiment_file

from bertkit.io.writers import job_path

pytestmark = pytest.mark.slow
BERTKIT = [sys.executable, "-m", "bertkit.cli"]
EMBED_KILLS = 20 if LONG_TESTS else 5
TRAIN_KILLS = 5 if LONG_TESTS else 2
FINETUNE_KILLS = 5


def start(args, cwd):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return start_child(
        [*BERTKIT, *map(str, args)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


def finish(process, timeout=300):
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err.decode()
    return out.decode(), err.decode()


def kill_after(process, delay, wait_for: Path | None = None, limit=120.0):
    """SIGKILL `process` `delay` seconds after `wait_for` appears (or after start); True if it was still running."""
    deadline = time.monotonic() + limit
    while wait_for is not None and not wait_for.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(delay)
    alive = process.poll() is None
    if alive:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended between the two lines (a warm command is reaped at once)
            alive = False
    process.communicate()
    return alive


def corpus(path, n=960):
    rng = random.Random(7)
    words = [
        "the",
        "film",
        "was",
        "a",
        "long",
        "slow",
        "sad",
        "funny",
        "good",
        "bad",
        "plot",
        "actor",
        "scene",
        "story",
    ]
    path.write_text("".join(" ".join(rng.choices(words, k=rng.randint(3, 30))) + "\n" for _ in range(n)))
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    import tiny_models

    return tiny_models.tiny_bert(tmp_path_factory.mktemp("model") / "tiny", max_positions=64)


@pytest.mark.parametrize("suffix", [".npz"])  # .npy ends in one rename; .npz is converted in slices
def test_embed_killed_anywhere_resumes_to_the_same_vectors(model_dir, tmp_path, suffix):
    texts = corpus(tmp_path / "in.txt")
    command = ["embed", texts, "--model", model_dir, "--chunk-rows", "16", "--quiet"]
    reference = tmp_path / f"reference{suffix}"
    process = start([*command, "-o", reference], tmp_path)
    while not job_path(reference).exists() and process.poll() is None:
        time.sleep(0.005)
    began = time.monotonic()
    finish(process)
    working = time.monotonic() - began  # how long a run works once its progress record is there: where kills land
    expected = np.load(reference)
    expected = expected["vectors"] if suffix == ".npz" else expected

    output = tmp_path / f"out{suffix}"
    progress = job_path(output)
    rng = random.Random(20)
    kills = attempts = 0
    while kills < EMBED_KILLS and attempts < 2 * EMBED_KILLS:  # a run that finished before its kill does not count
        attempts += 1
        delay = rng.uniform(0.0, 0.9 * working)  # a fixed range let a fast machine finish most runs before it
        killed = kill_after(start([*command, "-o", output], tmp_path), delay, wait_for=progress)
        kills += killed
        if not killed:  # the reference ran on a busier box than this run: a run works for less than it did
            working = min(working, delay)
        if output.exists():  # whatever exists under the output name is the whole, finished result
            got = np.load(output)
            np.testing.assert_array_equal(got["vectors"] if suffix == ".npz" else got, expected)
            output.unlink()
    assert kills == EMBED_KILLS, f"only {kills} of {attempts} runs were still working when killed"
    finish(start([*command, "-o", output], tmp_path))
    got = np.load(output)
    np.testing.assert_array_equal(got["vectors"] if suffix == ".npz" else got, expected)
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".out", "out")))
    assert leftovers == [output.name], leftovers


def head_arrays(run) -> dict:
    """The fitted arrays of a feature run's scaler and classifier (skops' file names differ between saves)."""
    import skops.io

    path = run / "head.skops"
    head = skops.io.load(path, trusted=skops.io.get_untrusted_types(file=path))
    return {
        f"{step}.{name}": np.asarray(value)
        for step, part in head.steps
        for name, value in vars(part).items()
        if name.endswith("_") and isinstance(value, np.ndarray)
    }


def test_train_killed_anywhere_leaves_a_whole_run_or_none(model_dir, tmp_path):
    data = sentiment_file(tmp_path / "train.tsv", n=120)
    command = ["train", data, "--model", model_dir, "-l", "last", "--C", "1.0", "--no-cache"]
    began = time.monotonic()
    finish(start([*command, "-o", tmp_path / "reference"], tmp_path))
    working = time.monotonic() - began  # kills land inside a run's own time, whatever this machine's speed
    expected = head_arrays(tmp_path / "reference")
    rng = random.Random(5)
    run = tmp_path / "run"
    kills = attempts = 0
    while kills < TRAIN_KILLS and attempts < 3 * TRAIN_KILLS:  # a run that finished before its kill does not count
        attempts += 1
        overwrite = ["--overwrite"] if run.exists() else []  # a kill while replacing a whole run keeps a whole one
        kills += kill_after(start([*command, "-o", run, *overwrite], tmp_path), rng.uniform(0.1, 0.9) * working)
        if run.exists():  # a whole run: its record, and a classifier equal to the uninterrupted one's, array by array
            assert (run / "bertkit.json").is_file() and head_arrays(run).keys() == expected.keys()
            for name, array in head_arrays(run).items():
                np.testing.assert_array_equal(array, expected[name], err_msg=name)
    assert kills == TRAIN_KILLS, f"only {kills} of {attempts} runs were still working when killed"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run")]


def test_finetune_killed_anywhere_resumes_to_the_same_weights(model_dir, tmp_path):
    from safetensors.numpy import load_file

    data = sentiment_file(tmp_path / "train.tsv", n=480)
    command = [
        "finetune",
        data,
        "--model",
        model_dir,
        "--epochs",
        "8",
        "--batch-size",
        "8",
        "--lr",
        "3e-3",
        "--patience",
        "8",
        "--warmup-ratio",
        "0",
    ]
    started_at = time.monotonic()
    finish(start([*command, "-o", tmp_path / "reference"], tmp_path))
    print(f"uninterrupted fine-tuning took {time.monotonic() - started_at:.1f} s")
    expected = load_file(tmp_path / "reference" / "model.safetensors")

    run = tmp_path / "run"
    rng = random.Random(11)
    kills = 0
    for _ in range(FINETUNE_KILLS):
        started = job_path(run).exists()
        if (run / "bertkit.json").exists():
            break
        kills += kill_after(
            start([*command, "-o", run, *(["--resume"] if started else [])], tmp_path),
            rng.uniform(0.0, 1.0),
            wait_for=job_path(run),
        )
    assert kills >= 3, f"only {kills} runs were killed while training"
    if not (run / "bertkit.json").exists():
        finish(start([*command, "-o", run, "--resume"], tmp_path))
    got = load_file(run / "model.safetensors")
    assert got.keys() == expected.keys()
    assert all(np.array_equal(got[k], expected[k]) for k in got), "the resumed run differs from the uninterrupted one"


@pytest.fixture
def small_disk(tmp_path):
    """A 160 KiB tmpfs (root and mount rights needed: CI has both)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mount)], capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({result.stderr.decode().strip()}): needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def remount(mount, options):
    subprocess.run(["mount", "-o", f"remount,{options}", str(mount)], check=True)


def test_embed_on_a_full_disk_keeps_finished_chunks_then_resumes(model_dir, tmp_path, small_disk):
    texts = corpus(tmp_path / "in.txt", n=2000)
    command = ["embed", texts, "--model", model_dir, "--chunk-rows", "64", "--quiet"]
    finish(start([*command, "-o", tmp_path / "reference.npy"], tmp_path))
    expected = np.load(tmp_path / "reference.npy")
    assert expected.nbytes > 160 * 1024  # the vectors cannot fit the disk

    output = small_disk / "out.npy"
    process = start([*command, "-o", output], tmp_path)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 2 and err.decode().count("\n") == 1, err.decode()
    message = err.decode()
    assert "no space left on the device" in message and "are kept and the same command resumes" in message
    assert not output.exists()
    done = json.loads(job_path(output).read_text())["state"]["done"]
    assert 0 < done < len(expected)

    remount(small_disk, "ro")  # read-only now: the run fails at once and keeps what it had
    process = start([*command, "-o", output], tmp_path)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 2 and "is on a read-only file system" in err.decode(), err.decode()
    assert json.loads(job_path(output).read_text())["state"]["done"] == done

    remount(small_disk, "rw,size=4m")
    out, err = finish(start([*command, "-o", output], tmp_path))
    np.testing.assert_array_equal(np.load(output), expected)
    assert sorted(p.name for p in small_disk.iterdir()) == ["out.npy"]


def test_train_overwrite_on_a_full_disk_keeps_the_previous_run(model_dir, tmp_path, small_disk):
    data = sentiment_file(tmp_path / "train.tsv", n=60)
    command = ["train", data, "--model", model_dir, "-l", "last", "--C", "1.0", "--no-cache", "-o", small_disk / "run"]
    finish(start(command, tmp_path))
    before = {p.name: p.read_bytes() for p in (small_disk / "run").iterdir()}
    filler = small_disk / "filler"
    handle = os.open(filler, os.O_WRONLY | os.O_CREAT)  # fill the disk: no room for a second copy of the run
    try:
        while os.write(handle, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(handle)
    process = start([*command, "--overwrite"], tmp_path)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 2 and "no space left on the device" in err.decode(), err.decode()
    assert {p.name: p.read_bytes() for p in (small_disk / "run").iterdir()} == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "run"]
