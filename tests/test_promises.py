"""Regression tests for the promises an outside review found broken: overwrite, umask, defaults, interrupts,
resumable progress on a full disk, sentence-transformers' length, and file names taken for texts."""

import errno
import json
import os
import stat

import numpy as np
import pytest
from conftest import run_cli
from safetensors.numpy import save_file
from sklearn.linear_model import LogisticRegression
from test_finetune import sentiment_file, tiny_args

from bertkit.errors import InputError
from bertkit.io import stream
from bertkit.io.writers import atomic_path, job_path, staged_directory


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


# ---- 1. an existing output is replaced only with --overwrite (a folder: only one bertkit wrote) ------------------
def test_one_refusal_for_a_file_bertkit_wrote_and_a_users_file_and_nothing_is_touched(tmp_path):
    from bertkit.io.writers import check_output, write_json
    from bertkit.records import new_record

    ours = write_json(tmp_path / "metrics.json", new_record("metrics", accuracy=1.0))
    theirs = tmp_path / "thesis.tex"
    theirs.write_text("years of work")
    folder = tmp_path / "Documents"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    before = {p: p.read_bytes() for p in (ours, theirs, folder / "notes.txt")}
    messages = set()
    for path in (ours, theirs, folder):
        with pytest.raises(InputError) as refused:
            check_output(path, overwrite=False)
        messages.add(str(refused.value).replace(str(path), "PATH"))
        if path.is_file():
            assert check_output(path, overwrite=True) == path  # --overwrite: a file, whoever wrote it
        else:  # a folder of the user's own files: not even with --overwrite
            with pytest.raises(InputError, match="bertkit did not write"):
                check_output(path, overwrite=True)
    assert messages == {
        "PATH already exists; nothing was touched. Choose another output, or pass --overwrite to replace it."
    }
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Documents", "metrics.json", "thesis.tex"]


def test_an_output_is_never_one_of_the_inputs(tmp_path):
    from bertkit.io.writers import check_output

    data = tmp_path / "texts.tsv"
    data.write_text("a\tb\n")
    for overwrite in (False, True):
        with pytest.raises(InputError, match="is also an input"):
            check_output(tmp_path / "." / "texts.tsv", overwrite, inputs=[data])
    assert data.read_text() == "a\tb\n"


def test_overwrite_replaces_a_folder_whole_and_a_failed_write_keeps_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("old")
    with pytest.raises(RuntimeError), staged_directory(run) as staging:
        (staging / "bertkit.json").write_text("{}")
        raise RuntimeError("the write failed")
    assert (run / "notes.txt").read_text() == "old"
    with staged_directory(run) as staging:
        (staging / "bertkit.json").write_text('{"new": 1}')
    assert sorted(p.name for p in run.iterdir()) == ["bertkit.json"]
    assert json.loads((run / "bertkit.json").read_text()) == {"new": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging folder left behind


def test_the_one_run_writer_writes_each_kind_of_content_and_a_failure_keeps_the_previous_run(tmp_path):
    from bertkit.records import new_record
    from bertkit.tasks.runs import write_run

    source = tmp_path / "source"
    (source / "1_Pooling").mkdir(parents=True)
    (source / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (source / "vocab.txt").write_text("[PAD]\n")
    record = new_record("features", note="old")
    run = write_run(tmp_path / "run", {"bertkit.json": record, "head.bin": b"\x00\x01", "notes.md": "# run"})
    assert json.loads((run / "bertkit.json").read_text())["note"] == "old"
    assert (run / "head.bin").read_bytes() == b"\x00\x01" and (run / "notes.md").read_text() == "# run"

    def broken(path):
        path.write_text("half")
        raise RuntimeError("the disk filled up")

    files = {"bertkit.json": {**record, "note": "new"}, "vocab.txt": source / "vocab.txt", "w.bin": broken}
    with pytest.raises(RuntimeError, match="disk filled"):
        write_run(run, files, overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == ["bertkit.json", "head.bin", "notes.md"]  # the old run, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "source"]  # no staging folder left behind
    files |= {"w.bin": lambda path: path.write_bytes(b"w"), "1_Pooling": source / "1_Pooling"}
    write_run(run, files, overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == ["1_Pooling", "bertkit.json", "vocab.txt", "w.bin"]
    assert json.loads((run / "1_Pooling" / "config.json").read_text()) == {"pooling_mode_mean_tokens": True}
    assert json.loads((run / "bertkit.json").read_text())["note"] == "new" and (run / "w.bin").read_bytes() == b"w"
    with pytest.raises(InputError, match="already exists"):
        write_run(run, {"notes.md": "x"})


def test_cli_train_refuses_any_existing_folder_without_overwrite(monkeypatch, capsys, tmp_path):
    data = sentiment_file(tmp_path / "train.tsv", n=24)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code, _, err = run_cli(monkeypatch, capsys, "train", str(data), "-o", str(mine), "-l", "last", "--C", "1.0")
    assert code == 2 and "already exists; nothing was touched" in err and str(mine) in err
    assert (mine / "notes.txt").read_text() == "keep me" and len(err.strip().splitlines()) == 1


def test_finetune_refuses_any_existing_folder_without_overwrite(tiny_dirs, tmp_path):
    from bertkit.tasks.finetune import finetune

    data = sentiment_file(tmp_path / "train.tsv", n=16)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(InputError, match="already exists; nothing was touched"):
        finetune(data, output_dir=mine, model=str(tiny_dirs["bert_cased"]), args=tiny_args(num_train_epochs=1))
    assert (mine / "notes.txt").read_text() == "keep me"


# ---- 2. files and folders get the caller's umask -----------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_outputs_follow_the_umask(tmp_path, umask):
    previous = os.umask(umask)
    try:
        written = []
        for suffix in (".npy", ".npz"):
            with atomic_path(tmp_path / f"v{suffix}") as temporary:
                np.save(temporary.open("wb"), np.ones((2, 3), np.float32))
            written.append(tmp_path / f"v{suffix}")
        with atomic_path(tmp_path / "page.html") as temporary:
            temporary.write_text("<html></html>")
        with staged_directory(tmp_path / "run") as staging:
            (staging / "bertkit.json").write_text("{}")
            save_file({"w": np.ones(2, np.float32)}, str(staging / "weights.safetensors"))  # safetensors writes 0600
            (staging / "part").mkdir(mode=0o700)
            (staging / "part" / "x.txt").write_text("x")
    finally:
        os.umask(previous)
    run = tmp_path / "run"
    for path in [
        *written,
        tmp_path / "page.html",
        run / "bertkit.json",
        run / "weights.safetensors",
        run / "part" / "x.txt",
    ]:
        assert mode(path) == 0o666 & ~umask, (path, oct(mode(path)))
    assert mode(run) == mode(run / "part") == 0o777 & ~umask


def test_a_replaced_file_keeps_its_mode(tmp_path):
    target = tmp_path / "v.npz"
    target.write_bytes(b"a bertkit output")
    target.chmod(0o640)
    with atomic_path(target) as temporary:
        temporary.write_bytes(b"the same output, made again")
    assert mode(target) == 0o640


# ---- 3. one default for the same features ------------------------------------------------------------------------
def test_vectorizer_classifier_and_train_share_one_default():
    import inspect

    from bertkit import BertVectorizer, TextClassifier
    from bertkit.cli.classify import train

    vectorizer = BertVectorizer()
    fitted = TextClassifier(classifier=LogisticRegression()).fit(["good", "bad", "fine", "poor"], [1, 0, 1, 0])
    assert fitted.vectorizer_.get_params() == vectorizer.get_params()
    options = inspect.signature(train).parameters
    assert options["layers"].default == vectorizer.layers  # Annotated options: the parameter's default is the value
    assert options["pooling"].default == vectorizer.pooling


def test_demo_prints_the_features_it_used(monkeypatch, capsys):
    code, out, _ = run_cli(monkeypatch, capsys, "demo")
    assert code == 0
    line = next(line for line in out.splitlines() if "features:" in line)
    from bertkit import BertVectorizer

    assert f"layers={BertVectorizer().layers} pooling={BertVectorizer().pooling}" in line
    assert "max length 256 from sentence_bert_config.json" in out


# ---- 7. a second Ctrl-C inside a step saves nothing ----------------------------------------------------------------
def test_a_second_interrupt_inside_a_step_keeps_the_last_checkpoint(tiny_dirs, tmp_path, monkeypatch):
    import torch

    from bertkit.tasks.finetune import finetune

    data = sentiment_file(tmp_path / "train.tsv")
    options = dict(model=str(tiny_dirs["bert_cased"]), args=tiny_args(num_train_epochs=2), dev_share=0.25)
    original_step = torch.optim.AdamW.step
    calls = []

    def step_then_interrupt(self, *args, **kwargs):  # Ctrl-C lands after the update, before the step is counted
        result = original_step(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 9:
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(torch.optim.AdamW, "step", step_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        finetune(data, output_dir=tmp_path / "run", **options)
    [saved] = [json.loads(p.read_text()) for p in (tmp_path / "run.partial").glob("checkpoint-*/trainer_state.json")]
    assert saved["global_step"] == 6 and saved["epoch"] == 1.0  # the end-of-epoch-1 checkpoint, nothing after it
    umask = os.umask(0)
    os.umask(umask)
    files = [p for p in (tmp_path / "run.partial").glob("checkpoint-*/**/*") if p.is_file()]
    assert files and {oct(mode(p)) for p in files} == {oct(0o666 & ~umask)}  # safetensors writes 0600
    monkeypatch.setattr(torch.optim.AdamW, "step", original_step)
    finetune(data, output_dir=tmp_path / "run", resume=True, **options)
    finetune(data, output_dir=tmp_path / "whole", **options)
    from safetensors.torch import load_file

    a, b = (load_file(str(tmp_path / name / "model.safetensors")) for name in ("run", "whole"))
    assert all(torch.equal(a[k], b[k]) for k in a)


# ---- 9. embed_file: no descriptor leak, progress kept on a full disk ----------------------------------------------
def open_descriptors():
    return len(os.listdir("/proc/self/fd"))


def lines_file(path, n):
    path.write_text("".join(f"sentence number {i} about films\n" for i in range(n)), encoding="utf-8")
    return path


def test_interrupted_embed_file_closes_its_descriptor(encoder, tmp_path):
    texts = lines_file(tmp_path / "in.txt", 12)

    def interrupt(done, total):
        raise KeyboardInterrupt

    before = open_descriptors()
    with pytest.raises(KeyboardInterrupt):
        stream.embed_file(encoder, texts, tmp_path / "out.npy", chunk_rows=4, on_chunk=interrupt)
    assert open_descriptors() == before


def test_full_disk_keeps_the_finished_chunks_and_resumes(encoder, tmp_path, monkeypatch):
    texts = lines_file(tmp_path / "in.txt", 12)
    output = tmp_path / "out.npy"
    real_pwrite, writes = os.pwrite, []

    def pwrite_until_full(fd, data, offset):
        writes.append(offset)
        if len(writes) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(stream.os, "pwrite", pwrite_until_full)
    with pytest.raises(OSError) as raised:
        stream.embed_file(encoder, texts, output, chunk_rows=4)
    from bertkit.cli.main import user_message

    assert user_message(raised.value) == (
        f"{output}: no space left on the device; free some space or write somewhere "
        "else; rows 1-8 are kept and the same command resumes after them."
    )
    assert not output.exists()
    assert json.loads(job_path(output).read_text())["state"]["done"] == 8
    monkeypatch.setattr(stream.os, "pwrite", real_pwrite)
    result = stream.embed_file(encoder, texts, output, chunk_rows=4)
    assert result.resumed_from == 8
    expected = encoder.embed(texts.read_text().splitlines())
    np.testing.assert_allclose(np.load(output), expected, atol=1e-5)


# ---- 11. the length sentence-transformers uses ---------------------------------------------------------------------
def test_long_text_equals_sentence_transformers(encoder):
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from bertkit.encoder.models import default_model_dir

    model = sentence_transformers.SentenceTransformer(str(default_model_dir()), device="cpu")
    long_text = " ".join(f"the film number {i} was long and slow and" for i in range(60))
    assert len(encoder.tokenizer(long_text)["input_ids"]) > 400
    texts = [long_text, "a short one"]
    ours = encoder.embed(texts, pooling="mean")
    ours = ours / np.linalg.norm(ours, axis=1, keepdims=True)
    theirs = model.encode(texts, normalize_embeddings=True)
    cosine = (ours * theirs).sum(axis=1)
    assert cosine.min() > 0.99999, cosine
    assert encoder.max_length == model.max_seq_length == 256
    facts = encoder.info()
    assert facts["position_limit"] == 512 and "sentence_bert_config.json" in facts["max_length_source"]
    assert encoder.embed([long_text], max_length=512).shape == (1, 384)  # the position table still takes 512


# ---- 13. a path that is not there is not a text --------------------------------------------------------------------
@pytest.fixture(scope="module")
def features_run(tmp_path_factory):
    from bertkit import BertVectorizer, TextClassifier

    root = tmp_path_factory.mktemp("run")
    texts = ["good film", "great film", "love it", "bad film", "awful plot", "boring mess"] * 2
    labels = ["pos", "pos", "pos", "neg", "neg", "neg"] * 2
    classifier = TextClassifier(BertVectorizer(layers="last"), LogisticRegression(C=1.0, max_iter=3000))
    classifier.fit(texts, labels).save_pretrained(root / "run")
    return root / "run"


def test_predict_refuses_a_missing_file_unless_marked_as_text(features_run, monkeypatch, capsys, tmp_path):
    code, out, err = run_cli(monkeypatch, capsys, "predict", str(features_run), "reviews.tsv")
    assert code == 2 and "reviews.tsv: no such file" in err and "--text" in err and out == ""
    code, out, err = run_cli(monkeypatch, capsys, "predict", str(features_run), "reviews.tsv", "--text")
    assert code == 0 and "reviews.tsv" in out and "given on the command line" in err
    (tmp_path / "few.txt").write_text("good film\nboring mess\n")
    code, out, err = run_cli(monkeypatch, capsys, "predict", str(features_run), str(tmp_path / "few.txt"))
    assert code == 0 and f"labelling 2 rows of {tmp_path / 'few.txt'}" in err
    code, out, err = run_cli(monkeypatch, capsys, "predict", str(features_run), "a fine film.")
    assert code == 0 and "a fine film." in out


def test_train_prints_the_fold_count_it_used(monkeypatch, capsys, tmp_path):
    rows = [f"good film number {i}\tpos" for i in range(6)] + [f"bad film number {i}\tneg" for i in range(3)]
    (tmp_path / "few.tsv").write_text("\n".join(rows) + "\n")
    code, _, err = run_cli(
        monkeypatch,
        capsys,
        "train",
        str(tmp_path / "few.tsv"),
        "--dev",
        str(tmp_path / "few.tsv"),
        "-o",
        str(tmp_path / "run"),
        "-l",
        "last",
    )
    assert code == 0, err
    assert "C chosen by 3-fold cross-validation" in err  # the rarer class has 3 rows, so 5 folds cannot be used


# ---- 4. fine-tuned models are safe to call from several threads ---------------------------------------------------
def test_finetuned_tagger_from_many_threads(tiny_dirs, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from test_finetune import conll_file

    from bertkit.tasks.finetune import finetune

    data = conll_file(tmp_path / "train.txt", n=24)
    tagger = finetune(
        data,
        output_dir=tmp_path / "run",
        task="token",
        model=str(tiny_dirs["bert_cased"]),
        args=tiny_args(num_train_epochs=1),
        dev_share=0.25,
    )
    sentences = [("EU rejects German call to boycott British lamb " * (1 + i % 5)).split() for i in range(200)]
    expected = tagger.predict_word_tags(sentences)
    with ThreadPoolExecutor(4) as pool:  # unlocked, the Rust tokenizer raised "Already borrowed" here
        results = list(pool.map(lambda _: tagger.predict_word_tags(sentences), range(4)))
    assert all(result == expected for result in results)
