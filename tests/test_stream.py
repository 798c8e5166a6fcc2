"""Streaming `embed`: equal to the in-memory result, resumable after SIGKILL/SIGINT, memory bounded by chunk size."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import warm
from servers import start_child

from bertkit import InputError
from bertkit.io.stream import embed_file

WORDS = [
    "the",
    "movie",
    "was",
    "a",
    "great",
    "and",
    "terrible",
    "thing",
    "to",
    "watch",
    "on",
    "rainy",
    "day",
    "with",
    "friends",
]


def make_lines(path, n, seed=0):
    rng = np.random.default_rng(seed)
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(f"{i}\t{' '.join(rng.choice(WORDS, size=rng.integers(1, 12)))}\n")
    return path


def texts_of(path):
    return [line.rstrip("\n").split("\t")[1] for line in path.open(encoding="utf-8")]


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".parquet"])
def test_streamed_output_equals_in_memory(encoder, tmp_path, suffix):
    source = make_lines(tmp_path / "in.tsv", 150)
    output = tmp_path / f"out{suffix}"
    result = embed_file(encoder, source, output, column=1, id_column=0, layers="last4:sum", chunk_rows=40)
    expected = encoder.embed(texts_of(source), layers="last4:sum")
    assert (result.rows, result.dim, result.resumed_from) == (150, 384, 0)
    if suffix == ".npy":
        got = np.load(output)
    elif suffix == ".npz":
        saved = np.load(output)
        got = saved["vectors"]
        assert saved["ids"].tolist() == [str(i) for i in range(150)]
    else:
        import pyarrow.parquet as pq

        table = pq.read_table(output)
        got = np.array(table.column("vector").to_pylist(), dtype=np.float32)
        assert table.column("id").to_pylist() == [str(i) for i in range(150)]
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.tsv", output.name])  # no leftovers


def test_user_error_midway_leaves_nothing(encoder, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("short\n" * 30 + "word " * 600 + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"in.txt, line 31: 602 tokens, more than the limit of 256; pass --long-text"):
        embed_file(encoder, source, tmp_path / "out.npy", long_text="error", chunk_rows=10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl, line 2: not valid JSON"):
        embed_file(encoder, bad, tmp_path / "new" / "deep" / "out.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "in.txt"]  # no folder made for nothing


def test_a_run_left_with_other_options_is_refused_and_overwrite_starts_over(encoder, tmp_path):
    from bertkit.io.writers import job_path
    from bertkit.records import record_kind

    source = make_lines(tmp_path / "in.tsv", 30)

    def stop_after_the_first_chunk(done, total):
        if done < total:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        embed_file(encoder, source, tmp_path / "v.npy", column=1, chunk_rows=10, on_chunk=stop_after_the_first_chunk)
    record = json.loads(job_path(tmp_path / "v.npy").read_text())
    assert record_kind(record) == "job" and record["state"] == {"rows": 30, "done": 10}
    with pytest.raises(InputError, match="unfinished job with other settings .*pooling was 'mean', now 'cls'"):
        embed_file(encoder, source, tmp_path / "v.npy", column=1, chunk_rows=10, pooling="cls")
    result = embed_file(encoder, source, tmp_path / "v.npy", column=1, chunk_rows=10, pooling="cls", overwrite=True)
    assert result.resumed_from == 0
    expected = encoder.embed(texts_of(source), pooling="cls")
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.tsv", "v.npy"]


def cli(model_dir, source, output, *extra):
    return [
        sys.executable,
        "-m",
        "bertkit.cli",
        "embed",
        str(source),
        "-o",
        str(output),
        "--text-column",
        "1",
        "--model",
        str(model_dir),
        "--chunk-rows",
        "500",
        "--quiet",
        *extra,
    ]


def run_until(command, progress_file, min_done, sig):
    process = start_child(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        try:
            if json.loads(progress_file.read_text())["state"]["done"] >= min_done:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.005)
    assert process.poll() is None, "the run finished before it could be interrupted; make the input larger"
    process.send_signal(sig)
    process.wait(timeout=60)
    return process


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_killed_run_resumes_to_the_same_file(tiny_dirs, tmp_path, sig):
    model = tiny_dirs["bert_cased"]
    source = make_lines(tmp_path / "in.tsv", 20_000)
    reference = tmp_path / "reference.npy"
    warm.run(cli(model, source, reference), check=True, capture_output=True)

    output = tmp_path / "out.npy"
    progress = tmp_path / "out.npy.job.json"
    process = run_until(cli(model, source, output), progress, 1000, sig)
    assert process.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 130)
    done = json.loads(progress.read_text())["state"]["done"]
    assert 0 < done < 20_000 and not output.exists()
    finished = warm.run(cli(model, source, output)[:-1], capture_output=True, text=True)  # not --quiet
    assert finished.returncode == 0, finished.stderr
    assert f"resumed after row {done}" in finished.stderr
    # the counts are of the part this command embedded, and say so (issue 33: they read as the whole file's)
    part = f"rows {done + 1}-20000"
    coverage = next(line for line in finished.stderr.splitlines() if line.startswith("vocabulary coverage:"))
    assert f"the counts below are of {part}" in finished.stderr and coverage.endswith(f"({part})"), coverage
    np.testing.assert_array_equal(np.load(output), np.load(reference))
    assert not progress.exists() and not (tmp_path / "out.npy.partial.npy").exists()


def peak_rss_mb(command):
    probe = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", probe, *command], check=True, capture_output=True, text=True)
    return int(out.stdout) / 1024


@pytest.mark.slow
def test_memory_does_not_grow_with_input_size(tiny_dirs, tmp_path):
    model = tiny_dirs["bert_cased"]
    small = make_lines(tmp_path / "small.tsv", 5_000)
    large = make_lines(tmp_path / "large.tsv", 100_000, seed=1)
    options = ["--layers", "all:concat", "--pooling", "cls+mean+max"]  # 288 floats a row: 115 MB for 100k rows
    rss_small = peak_rss_mb(cli(model, small, tmp_path / "s.npy", *options))
    rss_large = peak_rss_mb(cli(model, large, tmp_path / "l.npy", *options))
    assert np.load(tmp_path / "l.npy", mmap_mode="r").shape == (100_000, 288)
    assert rss_large < 2048
    assert rss_large - rss_small < 60, (rss_small, rss_large)


def test_a_damaged_or_foreign_job_record_is_one_clear_error(encoder, tmp_path):
    from bertkit.io.writers import job_path

    source = make_lines(tmp_path / "in.tsv", 10)
    record = job_path(tmp_path / "v.npy")
    for content, message in (("{not json", "v.npy.job.json: not valid JSON"), ("{}", "has no bertkit record")):
        record.write_text(content)
        with pytest.raises(InputError, match=message):
            embed_file(encoder, source, tmp_path / "v.npy", column=1)
        assert record.read_text() == content  # nothing was touched
    embed_file(encoder, source, tmp_path / "v.npy", column=1, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.tsv", "v.npy"]


def test_out_of_device_memory_keeps_the_finished_chunks_and_the_same_command_resumes(encoder, tmp_path, monkeypatch):
    import torch

    from bertkit.encoder.devices import OutOfDeviceMemory
    from bertkit.io.writers import job_path

    source = make_lines(tmp_path / "in.tsv", 30)
    settings = {"column": 1, "id_column": 0, "header": False, "layers": "last4:sum", "chunk_rows": 10}
    embed_file(encoder, source, tmp_path / "whole.npz", **settings)
    original = encoder.embed_with_report
    embedded = []

    def second_chunk_runs_out(texts, *args, **kwargs):
        embedded.append(len(texts))
        if len(embedded) == 2:
            raise OutOfDeviceMemory(3, 57, torch.device("cuda", 0))
        return original(texts, *args, **kwargs)

    monkeypatch.setattr(encoder, "embed_with_report", second_chunk_runs_out)
    output = tmp_path / "v.npz"
    line = settings["chunk_rows"] + 3 + 1  # row 3 of the second chunk, on a file without a header
    message = rf"in.tsv, line {line}: 57 tokens do not fit in the memory of cuda:0 even alone. Rows 1-10 are kept"
    with pytest.raises(InputError, match=message):
        embed_file(encoder, source, output, **settings)
    assert json.loads(job_path(output).read_text())["state"] == {"rows": 30, "done": 10}
    assert (tmp_path / "v.npz.partial.npy").exists() and not output.exists()

    def count_only(texts, *args, **kwargs):
        embedded.append(len(texts))
        return original(texts, *args, **kwargs)

    monkeypatch.setattr(encoder, "embed_with_report", count_only)
    embedded.clear()
    result = embed_file(encoder, source, output, **settings)
    assert result.resumed_from == 10 and sum(embedded) == result.rows - 10
    resumed, whole = np.load(output), np.load(tmp_path / "whole.npz")
    assert np.array_equal(resumed["vectors"], whole["vectors"]) and resumed["ids"].tolist() == whole["ids"].tolist()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.tsv", "v.npz", "whole.npz"]
