"""OS and file-format errors at the CLI boundary: one 'error:' line (path, problem, advice), exit 2, no output left."""

from __future__ import annotations

import errno
import os
import shutil

import pytest
from conftest import run_cli

from bertkit.cli.main import describe_os_error, in_flags, user_message
from bertkit.encoder.models import default_model_dir

run = run_cli


def error_line(err: str) -> str:
    """The single error line; anything else on stderr must be a warning, never a traceback."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    return errors[0]


@pytest.fixture
def texts(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("a good film\na bad film\n")
    return path


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_missing_input_file(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(monkeypatch, capsys, "embed", "nope.tsv", "-o", "v.npy")
    line = error_line(err)
    assert code == 2 and out == ""
    assert line.startswith("error: nope.tsv: no such file or directory; check the path") and str(tmp_path) in line
    assert leftovers(tmp_path) == []


def test_input_that_is_a_directory(monkeypatch, capsys, tmp_path):
    (tmp_path / "folder").mkdir()
    code, _, err = run(monkeypatch, capsys, "embed", tmp_path / "folder", "-o", tmp_path / "v.npy")
    assert code == 2 and "folder: is a directory; give a file path" in error_line(err)
    assert leftovers(tmp_path) == ["folder"]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            ["--stride", "5"],
            "error: --stride 5 is the overlap of --long-text window; with --long-text truncate no text",
        ),
        (["--truncate-dim=9999"], "error: --truncate-dim 9999: these vectors have 384 numbers; give 1 to 384."),
        (["-p", "nope"], "error: --pooling nope:"),
        (["--prompt-name", "nope"], "error: --prompt-name nope: this model's prompts are none"),
    ],
)
def test_option_mistakes_are_worded_in_the_flags_the_user_typed(monkeypatch, capsys, tmp_path, texts, flags, expected):
    code, _, err = run(monkeypatch, capsys, "embed", texts, "-o", tmp_path / "v.npy", *flags)
    line = error_line(err)
    assert code == 2 and line.startswith(expected), line
    assert not any(f"{name}=" in line for name in ("stride", "long_text", "truncate_dim", "prompt_name", "prompt"))
    assert leftovers(tmp_path) == ["in.txt"]


def test_only_the_commands_own_options_become_flags():
    said = "label='x' and stride=5, prompt='query: ' with normalize_embeddings=False; see pooling=."
    assert in_flags(said, ["embed", "in.txt"]) == (
        "label='x' and --stride 5, --prompt 'query: ' with --no-normalize; see --pooling."
    )
    assert in_flags(said, ["tokenize", "a text"]) == said  # not that command's options: the library's words stay
    for inside_a_path in (
        "path/stride=5.txt",
        "runs/lr=1e-4,seed=1/run: x",
        "seed=1/a.tsv, line 3",
        "http://h/?model=x",
    ):
        assert in_flags(inside_a_path, ["finetune", "in.tsv"]) == inside_a_path
    assert in_flags("prompt='' is empty; overwrite=False", ["embed"]) == "--prompt '' is empty; overwrite=False"


def test_output_whose_folder_is_a_file(monkeypatch, capsys, tmp_path, texts):
    code, _, err = run(monkeypatch, capsys, "embed", texts, "-o", texts / "v.npy")
    assert code == 2 and f"{texts} is a file, not a directory" in error_line(err)
    assert leftovers(tmp_path) == ["in.txt"]


def test_output_that_is_a_directory(monkeypatch, capsys, tmp_path, texts):
    (tmp_path / "out.npy").mkdir()
    code, _, err = run(monkeypatch, capsys, "embed", texts, "-o", tmp_path / "out.npy")
    assert code == 2 and "out.npy is a directory; give a file name inside it" in error_line(err)


def test_output_folder_without_write_permission(monkeypatch, capsys, tmp_path, texts):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    if os.access(locked, os.W_OK):  # root may write anywhere: make the permission check see what a user would
        real_access = os.access
        monkeypatch.setattr(
            os, "access", lambda p, mode, **kw: False if str(p) == str(locked) else real_access(p, mode, **kw)
        )
    code, _, err = run(monkeypatch, capsys, "embed", texts, "-o", locked / "v.npy")
    assert code == 2 and f"cannot write in {locked} (permission denied)" in error_line(err)
    assert leftovers(locked) == []


@pytest.mark.parametrize(
    "failure, expected",
    [
        (PermissionError(errno.EACCES, "Permission denied"), "permission denied; choose a location you may use"),
        (OSError(errno.ENOSPC, "No space left on device"), "no space left on the device; free some space"),
    ],
)
def test_write_failure_mid_run_leaves_nothing(monkeypatch, capsys, tmp_path, texts, failure, expected):
    """The disk fills (or a permission flips) while the vectors are written: one line, and no partial file."""
    target = tmp_path / "out" / "v.npy"
    real_pwrite = os.pwrite

    def failing_pwrite(handle, data, offset):
        real_pwrite(handle, data[: len(data) // 2], offset)  # half-written, like a full disk
        raise failure

    monkeypatch.setattr(os, "pwrite", failing_pwrite)
    code, _, err = run(monkeypatch, capsys, "embed", texts, "-o", target)
    line = error_line(err)
    assert code == 2 and expected in line
    assert leftovers(target.parent) == []  # no output, no partial file, no progress record


@pytest.fixture(scope="module")
def damaged_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("damaged")
    source = default_model_dir()
    truncated = shutil.copytree(source, root / "truncated")
    (truncated / "model.safetensors").write_bytes((source / "model.safetensors").read_bytes()[:4096])
    garbage = shutil.copytree(source, root / "garbage")
    (garbage / "model.safetensors").write_bytes(b"\x00" * 64)
    bad_tokenizer = shutil.copytree(source, root / "bad_tokenizer")
    (bad_tokenizer / "tokenizer.json").write_text("{not json")
    return {"truncated": truncated, "garbage": garbage, "bad_tokenizer": bad_tokenizer}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("truncated", "the weights file is truncated or corrupt"),
        ("garbage", "the weights file is truncated or corrupt"),
        ("bad_tokenizer", "cannot load a tokenizer from"),
    ],
)
def test_damaged_model_directory(monkeypatch, capsys, tmp_path, texts, damaged_models, name, expected):
    code, _, err = run(monkeypatch, capsys, "embed", texts, "-o", tmp_path / "v.npy", "--model", damaged_models[name])
    line = error_line(err)
    assert code == 2 and expected in line and str(damaged_models[name]) in line
    assert not (tmp_path / "v.npy").exists()


def test_ctrl_c_says_so_in_one_line_with_status_130(monkeypatch, capsys, tmp_path, texts):
    """Typer ended a Ctrl-C with status 130 and no word (train, explain, ...); embed says what it kept, once."""
    from bertkit import TextClassifier
    from bertkit.encoder.encode import Encoder
    from bertkit.io import stream

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    labelled = tmp_path / "labelled.tsv"
    labelled.write_text("a good film\t1\na bad film\t0\n" * 4)
    monkeypatch.setattr(Encoder, "from_pretrained", interrupt)
    monkeypatch.setattr(TextClassifier, "fit", interrupt)  # train may find its model loaded and its vectors cached
    for args in (
        ["train", labelled, "-o", tmp_path / "run", "--no-cache"],
        ["explain", "a text", "-o", tmp_path / "page.html"],
    ):
        code, _, err = run(monkeypatch, capsys, *args)
        assert code == 130 and err.endswith("\ninterrupted.\n" if args[0] == "train" else "interrupted.\n"), err
        assert err.count("interrupted") == 1
    monkeypatch.undo()
    monkeypatch.setattr(stream, "embed_file", interrupt)
    code, _, err = run(monkeypatch, capsys, "embed", texts, "-o", tmp_path / "v.npz")
    assert (
        code == 130
        and err.splitlines()[-1].startswith("interrupted: finished chunks are kept")
        and ("interrupted." not in err)
    ), err


def test_bugs_keep_their_traceback():
    assert user_message(RuntimeError("a bug")) is None
    assert user_message(ZeroDivisionError()) is None


def test_describe_os_error_names_both_paths_of_a_rename():
    exc = OSError(errno.EXDEV, "Invalid cross-device link", "/a/x.tmp", None, "/b/x")
    assert describe_os_error(exc) == "/a/x.tmp → /b/x: Invalid cross-device link; check the path and try again."


def test_a_cache_directory_that_is_a_users_file_is_left_as_it_is(monkeypatch, capsys, tmp_path, texts):
    mine = tmp_path / "notes.txt"
    mine.write_text("my notes")
    labelled = tmp_path / "labelled.tsv"
    labelled.write_text("a good film\t1\na bad film\t0\n" * 4)
    code, _, err = run(monkeypatch, capsys, "train", labelled, "-o", tmp_path / "run", "--cache-dir", mine)
    line = error_line(err)
    assert code == 2 and "notes.txt: already exists; choose another name" in line and "remove" not in line, line
    assert mine.read_text() == "my notes"
