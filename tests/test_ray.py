"""The Ray engine on a real local Ray cluster (`ray start --head` on 127.0.0.1): same numbers as the local path,
one model load per actor, resume after the driver is killed, clear errors before any work."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import warm
from conftest import LOAD_LOG, LONG_TESTS, shared_file
from servers import start_child

ray = pytest.importorskip("ray", reason="the Ray engine needs the extra: pip install 'bertkit[ray]'")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from bertkit.errors import InputError  # noqa: E402  (after the skip above)

VENV_BIN = Path(sys.executable).parent


def record_loads() -> None:
    """Worker setup hook: append 'pid threads' to a log each time an Encoder is loaded in that worker."""
    import torch

    from bertkit.encoder.encode import Encoder

    original = Encoder.from_pretrained.__func__

    def counted(cls, *args, **kwargs):
        encoder = original(cls, *args, **kwargs)
        with open(os.environ[LOAD_LOG], "a") as log:
            log.write(f"{os.getpid()} {torch.get_num_threads()}\n")
        return encoder

    Encoder.from_pretrained = classmethod(counted)


def sst2_texts(count: int, skip: int = 0) -> list[str]:
    lines = shared_file("sst2", "dev.tsv").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[skip : skip + count]]


def write_jsonl(path: Path, texts: list[str], prefix: str = "k") -> Path:
    path.write_text("".join(json.dumps({"text": t, "key": f"{prefix}{i}"}) + "\n" for i, t in enumerate(texts)))
    return path


def read_output(directory: Path) -> tuple[list, np.ndarray]:
    table = pq.read_table(directory).sort_by("id")
    assert (
        str(table.schema.field("vector").type)
        == f"fixed_size_list<element: float>[{table.schema.field('vector').type.list_size}]"
    )
    flat = table.column("vector").combine_chunks().flatten().to_numpy()
    return table.column("id").to_pylist(), flat.reshape(table.num_rows, table.schema.field("vector").type.list_size)


def loads(head) -> list[tuple[int, int]]:
    return [tuple(map(int, line.split())) for line in head["loads"].read_text().splitlines()]


@pytest.mark.slow
def test_files_equal_the_local_path_one_load_per_actor_and_a_finished_output_is_refused(
    head, tmp_path, encoder, monkeypatch, caplog
):
    from bertkit.encoder import progress
    from bertkit.io.stream import embed_file
    from bertkit.io.writers import job_path
    from bertkit.ray import embed_files
    from bertkit.records import record_kind

    inputs = tmp_path / "in"
    inputs.mkdir()
    texts = {"a": sst2_texts(150), "b": sst2_texts(90, skip=150), "c": []}
    for name, rows in texts.items():
        write_jsonl(inputs / f"{name}.jsonl", rows)
    before = len(loads(head))
    monkeypatch.setattr(progress, "terminal", lambda: False)
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)  # a line per written batch: the one reporter, as embed's
    with caplog.at_level(logging.INFO, logger="bertkit"):
        summary = embed_files(str(inputs / "*.jsonl"), tmp_path / "out", actors=2, rows_per_call=32, progress=True)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embed: ")]
    assert len(said) >= 2 and said[-1].startswith("embed: 240/240 rows, ")  # as Ray hands the written rows back

    assert summary.files[0] == "c" and sorted(summary.files) == ["a", "b", "c"]  # the empty one at once, no Ray
    assert summary.rows == 240 and summary.skipped == [] and summary.empty == ["c"]
    for name in ("a", "b"):
        local = embed_file(encoder, inputs / f"{name}.jsonl", tmp_path / f"{name}.parquet")
        ids, vectors = read_output(tmp_path / "out" / name)
        expected = pq.read_table(tmp_path / f"{name}.parquet")
        assert ids == list(range(local.rows)) == expected.column("id").to_pylist()  # none lost, none twice, in order
        reference = np.stack(expected.column("vector").to_numpy(zero_copy_only=False))
        np.testing.assert_allclose(vectors, reference, atol=1e-5, rtol=0)
    assert read_output(tmp_path / "out" / "c")[0] == []
    # 240 rows in batches of 32 went to 2 actors: 2 loads (not one per batch), each on 1 thread (its share of 2 CPUs)
    assert loads(head)[before:] and sorted(t for _, t in loads(head)[before:]) == [1, 1]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert record_kind(manifest) == "ray manifest" and manifest["options"]["layers"] == "last"
    assert {k: v["rows"] for k, v in manifest["files"].items()} == {"a": 150, "b": 90, "c": 0}
    assert not job_path(tmp_path / "out").exists()  # finished: no unfinished state left

    with pytest.raises(InputError, match="out already exists; nothing was touched"):  # a finished output
        embed_files(str(inputs / "*.jsonl"), tmp_path / "out", actors=2)
    assert len(loads(head)) == before + 2 and manifest == json.loads((tmp_path / "out" / "manifest.json").read_text())


@pytest.mark.slow
def test_embed_dataset_adds_vectors_to_a_users_dataset(head, encoder):
    from bertkit.ray import embed_dataset

    texts = sst2_texts(40, skip=300)
    ds = ray.data.from_items([{"doc": f"d{i:02d}", "body": t} for i, t in enumerate(texts)], override_num_blocks=4)
    options = dict(
        layers="last4:sum", pooling="cls+mean", prompt="query: ", truncate_dim=500, normalize_embeddings=True
    )
    out = embed_dataset(ds, column="body", actors=1, encoder=encoder, **options)
    table = pa.concat_tables(ray.get(out.to_arrow_refs())).sort_by("doc")
    assert (
        table.column("doc").to_pylist() == [f"d{i:02d}" for i in range(40)]
        and table.column("body").to_pylist() == texts
    )
    assert pa.types.is_fixed_size_list(table.schema.field("vector").type)
    got = np.stack(table.column("vector").to_numpy(zero_copy_only=False))
    assert got.shape == (40, 500)
    np.testing.assert_allclose(got, encoder.embed(texts, **options), atol=1e-5, rtol=0)
    with pytest.raises(InputError, match="no column named 'text'"):
        embed_dataset(ds.materialize(), column="text", encoder=encoder)


def recorded_files(record: Path) -> dict:
    """The files a job's record holds as complete (none before the record exists)."""
    try:
        return json.loads(record.read_text())["state"]["files"]
    except FileNotFoundError:  # not written yet, or the run finished and removed it
        return {}


def run_cli(*args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # the CLI finds the head's token itself
    return start_child(
        [str(VENV_BIN / "bertkit"), "embed", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


@pytest.mark.slow
def test_cli_killed_midway_resumes_and_skips_finished_files(head, tmp_path, encoder):
    from bertkit.io.writers import job_path  # here, not at the top: Ray's workers import this module

    inputs = tmp_path / "in"
    inputs.mkdir()
    texts = {"p1": sst2_texts(40), "p2": sst2_texts(400, skip=40), "p3": sst2_texts(400, skip=440)}
    for name, rows in texts.items():
        write_jsonl(inputs / f"{name}.jsonl", rows, prefix=name)
    out = tmp_path / "out"
    args = [
        str(inputs / "*.jsonl"),
        "--text-column",
        "text",
        "--id-column",
        "key",
        "--engine",
        "ray",
        "--address",
        head["address"],
        "--actors",
        "1",
        "--chunk-rows",
        "64",
        "-o",
        str(out),
    ]
    first = run_cli(*args)
    deadline = time.monotonic() + 120
    while not recorded_files(job_path(out)) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # the record, not the folder: a kill between the folder's move and its record is legal
    first.kill()  # SIGKILL to the driver: no clean-up runs
    first.wait()
    done = recorded_files(job_path(out))
    assert "p1" in done and len(done) < 3, "the run must be killed while later files are still being embedded"
    changed = run_cli(*args[:-2], "--layers", "-2", "-o", str(out))  # another job is refused, naming what changed
    assert changed.communicate(timeout=120)[1].count("options.layers was") == 1 and changed.returncode == 2
    with (inputs / "p3.jsonl").open("a") as handle:
        handle.write(json.dumps({"text": "one more", "key": "x"}) + "\n")
    edited = run_cli(*args)
    assert "p3.jsonl was" in edited.communicate(timeout=120)[1] and edited.returncode == 2
    write_jsonl(inputs / "p3.jsonl", texts["p3"], prefix="p3")

    second = run_cli(*args)
    _, stderr = second.communicate(timeout=240)
    assert second.returncode == 0, stderr[-2000:]
    assert "skipped 1 complete files (p1)" in stderr or f"skipped {len(done)} complete files" in stderr
    # Ray's own noise stays off the terminal without --verbose: no core-worker lines, no INFO logs or progress
    assert not any(mark in stderr for mark in ("core_worker", "INFO", "WARNING", "Token authentication")), stderr
    for name, rows in texts.items():
        ids, vectors = read_output(out / name)
        assert ids == sorted(f"{name}{i}" for i in range(len(rows)))  # every row once: none lost, none duplicated
        order = np.argsort([f"{name}{i}" for i in range(len(rows))])
        np.testing.assert_allclose(vectors, encoder.embed(rows)[order], atol=1e-5, rtol=0)
    assert not list(out.glob(".*.tmp")), "staging folders of the killed run are cleared"


RAY_KILLS = 6 if LONG_TESTS else 2


@pytest.mark.slow
def test_cli_killed_at_seeded_random_points_resumes_to_the_same_vectors(head, tmp_path, encoder):
    """SIGKILL the driver at random moments (after it has started working), again and again; then finish."""
    import random

    from bertkit.io.writers import job_path, work_folder

    inputs = tmp_path / "in"
    inputs.mkdir()
    texts = {f"p{k}": sst2_texts(120, skip=120 * k) for k in range(6)}
    for name, rows in texts.items():
        write_jsonl(inputs / f"{name}.jsonl", rows, prefix=name)
    out = tmp_path / "out"
    args = [
        str(inputs / "*.jsonl"),
        "--text-column",
        "text",
        "--id-column",
        "key",
        "--engine",
        "ray",
        "--address",
        head["address"],
        "--actors",
        "1",
        "--chunk-rows",
        "32",
        "-o",
        str(out),
    ]
    rng = random.Random(3)
    killed = 0
    for _ in range(RAY_KILLS):
        process = run_cli(*args)
        time.sleep(rng.uniform(4.0, 12.0))  # connecting takes seconds; the whole run takes longer than the longest wait
        killed += process.poll() is None
        process.kill()
        process.wait()
        for name in recorded_files(job_path(out)):
            ids, _ = read_output(work_folder(out) / name)  # whatever the job's record calls done is whole
            assert ids == sorted(f"{name}{i}" for i in range(len(texts[name])))
    assert killed >= RAY_KILLS // 2, f"only {killed} runs were still working when killed"
    final = run_cli(*args)
    _, stderr = final.communicate(timeout=300)
    assert final.returncode == 0, stderr[-2000:]
    for name, rows in texts.items():
        ids, vectors = read_output(out / name)
        assert ids == sorted(f"{name}{i}" for i in range(len(rows)))
        order = np.argsort([f"{name}{i}" for i in range(len(rows))])
        np.testing.assert_allclose(vectors, encoder.embed(rows)[order], atol=1e-5, rtol=0)
    assert not list(out.glob(".*.tmp")), "staging folders of the killed runs are cleared"


@pytest.mark.slow
def test_a_bad_column_is_one_clear_error_before_any_work(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", ["one", "two"])
    started = time.monotonic()
    result = warm.run(
        [
            str(VENV_BIN / "bertkit"),
            "embed",
            str(tmp_path / "*.jsonl"),
            "--text-column",
            "body",
            "--engine",
            "ray",
            "-o",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "error:" in result.stderr and "no field 'body'" in result.stderr and "['key', 'text']" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
    assert time.monotonic() - started < 30  # refused before Ray or the model started


@pytest.mark.slow
def test_empty_inputs_are_handled_without_ray(tmp_path):
    from bertkit.ray import embed_files

    with pytest.raises(InputError, match="no file matches"):
        embed_files(str(tmp_path / "*.jsonl"), tmp_path / "out")
    (tmp_path / "empty.jsonl").write_text("\n")
    summary = embed_files(str(tmp_path / "*.jsonl"), tmp_path / "out")
    assert summary.empty == ["empty"] and summary.rows == 0 and summary.resources is None  # Ray never started
    assert pq.read_table(tmp_path / "out" / "empty").num_rows == 0


def test_plan_keeps_a_cpu_for_reading_and_writing_and_threads_follow_the_share():
    from bertkit.ray import plan_resources

    assert plan_resources(2, 2, 1) == plan_resources(2, 2, 1, actors=1)
    one = plan_resources(2, 2, 1, actors=1)
    assert (one.actors, one.cpus_per_actor, one.threads) == (1, 1.0, 2)
    two = plan_resources(2, 2, 1, actors=2)
    assert (two.cpus_per_actor, two.threads) == (0.5, 1)
    cluster = plan_resources(64, 16, 4)  # 4 nodes of 16 CPUs: 62 one-CPU actors, 2 CPUs kept back
    assert (cluster.actors, cluster.cpus_per_actor, cluster.threads) == (62, 1.0, 1)
    with pytest.raises(InputError, match="starve"):
        plan_resources(2, 2, 1, actors=2, cpus_per_actor=1.0)
    with pytest.raises(InputError, match="no node has more than 16"):
        plan_resources(64, 16, 4, actors=2, cpus_per_actor=20)


@pytest.mark.slow
def test_bertkit_imports_without_ray_and_the_ray_module_says_how_to_get_it():
    code = (
        "import sys; sys.modules['ray'] = None; import bertkit\n"
        "try:\n    import bertkit.ray\nexcept bertkit.InputError as e:\n    print(e)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'bertkit[ray]'" in result.stdout


@pytest.mark.slow
def test_a_static_model_embeds_a_dataset_as_it_embeds_locally(head, tmp_path):
    pytest.importorskip("model2vec", reason="static models need the extra: pip install 'bertkit[static]'")
    from tiny_models import tiny_bert

    from bertkit import Encoder, distill
    from bertkit.ray import embed_dataset

    static = distill(str(tiny_bert(tmp_path / "bert", cased=False)), tmp_path / "static", static=True, dims=16).output
    texts = ["I love Korea", "the movie was great", "EU rejects German call", "a film", "big", "good film"]
    ds = ray.data.from_items([{"doc": i, "text": t} for i, t in enumerate(texts)], override_num_blocks=2)
    table = pa.concat_tables(ray.get(embed_dataset(ds, model=str(static), actors=1).to_arrow_refs())).sort_by("doc")
    got = np.stack(table.column("vector").to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, Encoder.from_pretrained(str(static)).embed(texts), atol=1e-6, rtol=0)
