"""Nothing lost (issue 60): an output never touches an input, `--overwrite` replaces only what bertkit wrote, and a
killed `--overwrite` leaves the previous output whole.

Every command that writes is run as a user runs it (in-process, through the command line's own main()), with `-o`
equal to an input, a folder holding one, or a path inside one, spelled in generated ways; the input must be byte for
byte what it was, and the answer one line.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import start_child
from test_finetune import sentiment_file

from bertkit.errors import InputError
from bertkit.io import writers
from bertkit.io.writers import check_job_output, check_output, job_path, replace_folder, work_folder
from bertkit.records import new_record

BERTKIT = [sys.executable, "-m", "bertkit.cli"]


def snapshot(root: Path) -> dict:
    """Every file under `root` (relative name → bytes) and every folder (→ None)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def labelled(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return sentiment_file(folder / "train.tsv", n=24)


# each command that writes, its arguments before -o: DATA is the input under test, OTHER another input, RUN a run
COMMANDS = {
    "train": lambda data, other, run: ["train", data, "-l", "last", "--C", "1.0"],
    "train --dev": lambda data, other, run: ["train", other, "--dev", data, "-l", "last", "--C", "1.0"],
    "finetune": lambda data, other, run: ["finetune", data, "--epochs", "1"],
    "finetune --dev": lambda data, other, run: ["finetune", other, "--dev", data, "--epochs", "1"],
    "probe": lambda data, other, run: ["probe", data, "--dev", other],
    "probe --dev": lambda data, other, run: ["probe", other, "--dev", data],
    "embed": lambda data, other, run: ["embed", data, "--text-column", "0"],
    "embed --calibration": lambda data, other, run: ["embed", other, "--text-column", "0", "--calibration", data],
    "quantize --calibration": lambda data, other, run: ["quantize", "--calibration", data],
    "predict": lambda data, other, run: ["predict", run, data, "--text-column", "0"],
    "rerank": lambda data, other, run: ["rerank", run, data, "--query", "a film"],
}


@pytest.fixture(scope="module")
def features_run(tmp_path_factory):
    from sklearn.linear_model import LogisticRegression

    from bertkit import BertVectorizer, TextClassifier

    texts, labels = ["good film", "great film", "bad film", "awful plot"] * 3, ["pos", "pos", "neg", "neg"] * 3
    estimator = TextClassifier(BertVectorizer(layers="last"), LogisticRegression(C=1.0, max_iter=3000))
    return estimator.fit(texts, labels).save_pretrained(tmp_path_factory.mktemp("run") / "run")


def spellings(path: Path, cwd: Path):
    """Ways to write `path`: absolute, relative, with `.` and `..` segments, through a link to its folder."""
    link = cwd / "via"
    if not link.exists():
        link.symlink_to(path.parent)
    relative = os.path.relpath(path, cwd)
    return st.sampled_from(
        [
            str(path),
            relative,
            f"./{relative}",
            str(path.parent / "." / path.name),
            str(path.parent / ".." / path.parent.name / path.name),
            str(link / path.name),
        ]
    )


@pytest.mark.parametrize("command", sorted(COMMANDS))
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), relation=st.sampled_from(["equal", "holding", "inside"]), overwrite=st.booleans())
def test_no_command_writes_over_its_input(
    command, features_run, tmp_path_factory, monkeypatch, capsys, data, relation, overwrite
):
    root = tmp_path_factory.mktemp("lost")
    monkeypatch.chdir(root)
    data_file = labelled(root / "data")
    other = sentiment_file(root / "other.tsv", n=24)
    (root / "data" / "bertkit.json").write_text(json.dumps(new_record("features")))  # even a bertkit folder
    target = {"equal": data_file, "holding": data_file.parent, "inside": data_file}[relation]
    out = data.draw(spellings(target, root))
    if relation == "inside":  # a path inside the input
        out = str(Path(out) / "out")
    command_args = COMMANDS[command](str(data_file), str(other), str(features_run))
    before = snapshot(root / "data"), other.read_bytes(), snapshot(features_run)
    code, _, err = run_cli(monkeypatch, capsys, *command_args, "-o", out, *(["--overwrite"] if overwrite else []))
    assert code == 2, err
    assert (snapshot(root / "data"), other.read_bytes(), snapshot(features_run)) == before
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", ["predict", "rerank"])
def test_a_table_is_never_written_into_the_run_it_reads(command, features_run, tmp_path, monkeypatch, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("a good film\n")
    before = snapshot(features_run)
    for name in ("bertkit.json", "predictions.tsv"):
        args = COMMANDS[command](str(texts), None, str(features_run))
        code, _, err = run_cli(monkeypatch, capsys, *args, "-o", features_run / name, "--overwrite")
        assert code == 2 and "is inside the input folder" in err, err
    assert snapshot(features_run) == before


def test_overwrite_refuses_a_folder_bertkit_did_not_write(monkeypatch, capsys, tmp_path):
    data = sentiment_file(tmp_path / "train.tsv", n=24)
    mydocs = tmp_path / "mydocs"
    mydocs.mkdir()
    (mydocs / "thesis.tex").write_text("years of work")
    (mydocs / "bertkit.json").write_text('{"not": "a bertkit record"}')  # a name alone does not make it bertkit's
    before = snapshot(mydocs)
    for command in (["train", data, "-l", "last", "--C", "1.0"], ["finetune", data, "--epochs", "1"]):
        code, _, err = run_cli(monkeypatch, capsys, *command, "-o", mydocs, "--overwrite")
        assert code == 2 and "bertkit did not write" in err and "give a new or empty folder" in err, err
        assert len(err.strip().splitlines()) == 1
    assert snapshot(mydocs) == before
    with pytest.raises(InputError, match="bertkit did not write"):
        check_output(mydocs, overwrite=True)


def test_an_empty_folder_or_a_bertkit_folder_is_replaced_with_overwrite_only(tmp_path):
    empty, run = tmp_path / "empty", tmp_path / "run"
    empty.mkdir()
    run.mkdir()
    (run / "bertkit.json").write_text(json.dumps(new_record("features")))
    for folder in (empty, run):
        with pytest.raises(InputError, match="already exists"):
            check_output(folder)
        assert check_output(folder, overwrite=True) == folder


def test_a_work_folder_of_someone_elses_is_in_the_way(tmp_path):
    output = tmp_path / "run"
    work_folder(output).mkdir()
    (work_folder(output) / "mine.txt").write_text("keep")
    with pytest.raises(InputError, match="is in the way"):
        check_job_output(output, overwrite=True)
    job_path(output).write_text("{}")  # a job of bertkit's own: its work folder is its own
    assert check_job_output(output, overwrite=False) is True


def test_replacing_a_folder_keeps_the_old_one_until_the_new_one_is_in_place(tmp_path, monkeypatch):
    old, new = tmp_path / "run", tmp_path / "new"
    for folder, text in ((old, "old"), (new, "new")):
        folder.mkdir()
        (folder / "bertkit.json").write_text(text)
    replace_folder(new, old)  # Linux: one atomic exchange
    assert (old / "bertkit.json").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["run"]

    # without the exchange, a process killed between its two renames: the next write puts the old folder back
    monkeypatch.setattr(writers, "_exchange", lambda first, second: False)
    again = tmp_path / "again"
    again.mkdir()
    real_replace = writers._replace

    def killed_after_setting_aside(source, target):
        real_replace(source, target)
        if Path(target).name.endswith(".old.tmp"):
            raise SystemExit("killed")

    monkeypatch.setattr(writers, "_replace", killed_after_setting_aside)
    with pytest.raises(SystemExit):
        replace_folder(again, old)
    monkeypatch.setattr(writers, "_replace", real_replace)
    assert not old.exists()
    [aside] = [p for p in tmp_path.iterdir() if p.name.endswith(".old.tmp")]
    dead = aside.with_name(aside.name.replace(f".{os.getpid()}.", ".999999999."))  # as if its process had died
    aside.rename(dead)
    writers._SWEPT.discard(old)
    writers.sweep_stale_temporaries(old)
    assert (old / "bertkit.json").read_text() == "new"


def start(args, cwd):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [*BERTKIT, *map(str, args)]
    return start_child(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )


@pytest.mark.slow
def test_a_killed_overwrite_leaves_the_previous_run_loadable(tiny_dirs, tmp_path):
    from bertkit import load_run

    data = sentiment_file(tmp_path / "train.tsv", n=240)
    command = [
        "finetune",
        data,
        "--model",
        tiny_dirs["bert_cased"],
        "--epochs",
        "4",
        "--batch-size",
        "8",
        "--patience",
        "4",
        "-o",
        tmp_path / "run",
    ]
    first = start(command, tmp_path)
    assert first.wait(timeout=300) == 0, first.stderr.read().decode()
    weights = (tmp_path / "run" / "model.safetensors").read_bytes()
    rng, kills = random.Random(60), 0
    for _ in range(4):
        process = start([*command, "--overwrite"], tmp_path)
        deadline = time.monotonic() + 120
        while not job_path(tmp_path / "run").exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 1.5))
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            kills += 1
        process.communicate()
        run = load_run(tmp_path / "run")  # the old run, or the new one complete: never neither
        assert run.predict(["a good film"]).shape == (1,)
        if job_path(tmp_path / "run").exists():  # killed while training: the old weights are still there
            assert (tmp_path / "run" / "model.safetensors").read_bytes() == weights
    assert kills >= 2, f"only {kills} of 4 runs were killed while working"
    if job_path(tmp_path / "run").exists():
        resumed = start([*command, "--resume"], tmp_path)
        assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
    assert not job_path(tmp_path / "run").exists() and not work_folder(tmp_path / "run").exists()


STUCK = """
import sys, time
from bertkit.encoder import network
def stuck(*args, **kwargs):  # a pass that never returns, outside Python's reach as a native call is
    sys.stdout.write("passing\\n")  # one write: two passes at once print no interleaved line
    sys.stdout.flush()
    time.sleep(600)
network.call_model = stuck  # the torch engine's pass (BERTKIT_ENGINE=torch)
from bertkit.cli.main import main
sys.argv = ["bertkit", *sys.argv[1:]]
main()
"""


@pytest.mark.slow
def test_ctrl_c_ends_a_command_whose_passes_are_stuck(tmp_path):
    texts = tmp_path / "t.txt"
    texts.write_text("".join(f"sentence {i} about a film\n" for i in range(64)))
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    env = {**os.environ, "OMP_NUM_THREADS": "2", "BERTKIT_ENGINE": "torch"}
    command = [sys.executable, script, "embed", texts, "-b", "8", "-o", tmp_path / "v.npy"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while b"passing" not in process.stdout.readline() and process.poll() is None and time.monotonic() < deadline:
        pass
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("Ctrl-C did not end the command while its passes were stuck")
    assert process.returncode == 130 and b"interrupted" in err, err.decode()
    assert not (tmp_path / "v.npy").exists()
