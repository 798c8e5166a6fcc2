"""The OpenVINO engine: the same vectors as plain transformers for every option, chosen by 'auto' where it can run,
torch where it cannot (with the reason), its exported graph cached complete or not at all.

The rest of the suite runs on torch (conftest sets BERTKIT_ENGINE=torch); this file runs OpenVINO itself."""

import time

import numpy as np
import pytest
import torch
from servers import Server

from bertkit import Encoder, InputError
from bertkit.encoder import engines
from bertkit.encoder.precision import fast_bf16_cpu

openvino = pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'bertkit[openvino]')")

TEXTS = [
    "I love Korea",
    "EU rejects German call to boycott British lamb .",
    "",
    "a much longer sentence with many words so that the padding differs between rows of the batch",
] * 3


@pytest.fixture(autouse=True)
def own_cache(monkeypatch, tmp_path):
    """Each test exports into its own cache, from an empty table of this process's graphs."""
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("BERTKIT_ENGINE", raising=False)
    monkeypatch.setattr(engines, "_GRAPHS", {})
    return tmp_path / "cache" / "openvino"


def transformers_states(folder, texts, max_length):
    """Every hidden state and the pooler from plain transformers, one text at a time (no padding at all)."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        return [
            model(
                **tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt"),
                output_hidden_states=True,
            )
            for text in texts
        ]


@pytest.mark.parametrize("name", ["bert_cased", "distilbert", "electra", "roberta"])
def test_every_layer_and_pooling_equals_transformers_on_openvino(tiny_dirs, name):
    """Each architecture's tokens and sentences from any layer, against transformers' own hidden states."""
    folder = tiny_dirs[name]
    encoder = Encoder.from_pretrained(str(folder), device="cpu", engine="openvino")
    assert encoder.engine == "openvino", encoder.engine_reason
    reference = transformers_states(folder, TEXTS, encoder.max_length)
    for layer in (0, 1, -1):
        tokens = encoder.embed_tokens(TEXTS, layers=str(layer), progress=False)
        for got, want in zip(tokens, reference):
            np.testing.assert_allclose(got.vectors, want.hidden_states[layer][0].numpy(), atol=1e-4)
    means = encoder.embed(TEXTS, layers="all:mean", pooling="mean", progress=False)
    for got, want in zip(means, reference):
        np.testing.assert_allclose(got, torch.stack(want.hidden_states).mean(0)[0].mean(0).numpy(), atol=1e-4)
    if getattr(reference[0], "pooler_output", None) is not None and encoder.has_pooler:
        pooled = encoder.embed(TEXTS, pooling="pooler", progress=False)
        np.testing.assert_allclose(pooled, torch.cat([r.pooler_output for r in reference]).numpy(), atol=1e-4)


def test_the_packaged_model_on_openvino_equals_torch_and_runs_concurrent_passes():
    """fp32 on OpenVINO is torch's fp32 (max abs ≤ 1e-4), one pass at a time or two at once."""
    torch_run = Encoder.from_pretrained(device="cpu", engine="torch")
    expected = torch_run.embed(TEXTS * 10, layers="last4:concat", progress=False)
    for concurrent in (1, 2):
        ov = Encoder.from_pretrained(device="cpu", engine="openvino", concurrent_batches=concurrent)
        got = ov.embed(TEXTS * 10, layers="last4:concat", batch_size=4, progress=False)
        assert np.abs(got - expected).max() <= 1e-4


def test_windows_prompts_and_words_run_on_openvino_as_on_torch():
    """Long texts in overflow windows, a prompt, word vectors: the options that shape the passes, not only pooling."""
    long_texts = [" ".join(["the film was long but never dull"] * 12), "short one"]
    settings = {"long_text": "window", "max_length": 16, "stride": 4, "prompt": "query: ", "progress": False}
    torch_run = Encoder.from_pretrained(device="cpu", engine="torch")
    ov = Encoder.from_pretrained(device="cpu", engine="openvino")
    assert np.abs(ov.embed(long_texts, **settings) - torch_run.embed(long_texts, **settings)).max() <= 1e-4
    words = [text.split() for text in long_texts]
    got = ov.embed_words(words, subtoken_pooling="mean", long_text="window", max_length=16, progress=False)
    want = torch_run.embed_words(words, subtoken_pooling="mean", long_text="window", max_length=16, progress=False)
    assert [g.shape for g in got] == [(len(w), 384) for w in words]
    assert all(np.abs(g - w).max() <= 1e-4 for g, w in zip(got, want))


@pytest.mark.skipif(not fast_bf16_cpu(), reason="this CPU has no native bf16 (AMX or AVX512-BF16)")
def test_bf16_on_openvino_is_bf16_and_close_to_fp32():
    """bf16 is pinned: it differs from fp32 (so it is not fp32 behind the user's back) and keeps cosine ≥ 0.999."""
    fp32 = Encoder.from_pretrained(device="cpu", engine="torch").embed(TEXTS, progress=False)
    bf16 = Encoder.from_pretrained(device="cpu", precision="bf16", engine="openvino")
    assert bf16.engine == "openvino"
    got = bf16.embed(TEXTS, progress=False)
    cosines = (got * fp32).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(fp32, axis=1)
    assert cosines.min() >= 0.999
    assert np.abs(got - fp32).max() > 1e-4


def test_auto_chooses_openvino_where_it_can_and_torch_with_the_reason_elsewhere(monkeypatch):
    encoder = Encoder.from_pretrained(device="cpu")
    assert encoder.engine == "openvino" and "fp32 pinned" in encoder.engine_reason
    int8 = encoder.with_options(precision="int8")
    assert int8.engine == "torch" and "int8" in int8.engine_reason
    assert encoder.with_options(engine="torch").engine == "torch"
    monkeypatch.setenv("BERTKIT_ENGINE", "torch")
    assert Encoder.from_pretrained(device="cpu").engine == "torch"
    monkeypatch.setattr(engines, "openvino_version", lambda: None)  # as without the extra
    monkeypatch.delenv("BERTKIT_ENGINE")
    plain = Encoder.from_pretrained(device="cpu")
    assert plain.engine == "torch" and "bertkit[openvino]" in plain.engine_reason
    with pytest.raises(InputError, match=r"engine='openvino': OpenVINO is not installed"):
        Encoder.from_pretrained(device="cpu", engine="openvino")


def test_a_bad_engine_is_refused_where_it_enters(monkeypatch):
    with pytest.raises(InputError, match=r"engine='onnx': give one of auto, torch, openvino"):
        Encoder.from_pretrained(device="cpu", engine="onnx")
    monkeypatch.setenv("BERTKIT_ENGINE", "fast")
    with pytest.raises(InputError, match=r"BERTKIT_ENGINE=fast: give one of"):
        Encoder.from_pretrained(device="cpu")
    with pytest.raises(InputError, match=r"engine='openvino': int8 is bertkit's own int8"):
        Encoder.from_pretrained(device="cpu", precision="int8", engine="openvino")


def test_the_graph_is_exported_once_cached_complete_and_made_again_when_damaged(own_cache, monkeypatch, tiny_dirs):
    import warnings

    model = str(tiny_dirs["bert_cased"])  # the cache's rules do not depend on the model's size
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = Encoder.from_pretrained(model, device="cpu", engine="openvino")
    assert not [w for w in caught if issubclass(w.category, FutureWarning)], [str(w.message) for w in caught]
    files = sorted(p.name for p in own_cache.iterdir())
    assert [p.rsplit(".", 1)[1] for p in files] == ["bin", "json", "xml"]  # no scratch folder left behind
    assert files[0].startswith(first.fingerprint)
    exports = []
    real_export = engines._export
    monkeypatch.setattr(engines, "_export", lambda *a: exports.append(1) or real_export(*a))
    monkeypatch.setattr(engines, "_GRAPHS", {})
    again = Encoder.from_pretrained(model, device="cpu", engine="openvino")
    assert exports == []  # read from the cache
    np.testing.assert_array_equal(again.embed(TEXTS, progress=False), first.embed(TEXTS, progress=False))
    (own_cache / files[2]).write_text("<not a graph")
    monkeypatch.setattr(engines, "_GRAPHS", {})
    made = Encoder.from_pretrained(model, device="cpu", engine="openvino")
    assert exports == [1]
    np.testing.assert_array_equal(made.embed(TEXTS, progress=False), first.embed(TEXTS, progress=False))


def test_a_model_that_does_not_export_runs_on_torch_with_the_reason(monkeypatch, caplog):
    def refuse(*args):
        raise RuntimeError("no graph for this one\nmore detail")

    monkeypatch.setattr(engines, "_export", refuse)
    encoder = Encoder.from_pretrained(device="cpu")
    assert encoder.engine == "torch"
    assert encoder.engine_reason == "the model does not export to OpenVINO (no graph for this one)"
    assert "running on torch" in caplog.text
    with pytest.raises(InputError, match=r"does not export to OpenVINO \(no graph for this one\)"):
        Encoder.from_pretrained(device="cpu", engine="openvino")


def test_env_says_which_engine_runs_each_precision(monkeypatch, capsys):
    from conftest import run_cli

    code, out, _ = run_cli(monkeypatch, capsys, "env")
    assert code == 0
    assert "openvino (OpenVINO" in next(line for line in out.splitlines() if line.startswith("engine, fp32"))
    assert "torch (int8 is bertkit's own" in next(line for line in out.splitlines() if line.startswith("engine, int8"))


def test_the_service_on_openvino_answers_the_same_vectors_to_the_openai_client(tmp_path):
    """A real `bertkit serve` process that chose OpenVINO by itself, and the openai client."""
    import openai

    expected = Encoder.from_pretrained(device="cpu", engine="torch").embed(
        TEXTS[:4], normalize_embeddings=True, progress=False
    )
    server = Server(env={"BERTKIT_ENGINE": "auto", "BERTKIT_CACHE": str(tmp_path / "cache")})
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
        got = client.embeddings.create(model="default", input=[t or " " for t in TEXTS[:4]])
        vectors = np.array([row.embedding for row in got.data])
    finally:
        server.stop()
    assert "exporting the model to OpenVINO" in server.output() or (tmp_path / "cache" / "openvino").is_dir()
    assert list((tmp_path / "cache" / "openvino").glob("*.xml"))
    np.testing.assert_allclose(vectors[[0, 1, 3]], expected[[0, 1, 3]], atol=1e-4)


def test_fine_tuned_runs_run_on_openvino_as_on_torch(tiny_dirs, tmp_path):
    """A saved classifier, tagger and question-answering run loaded on OpenVINO give torch's scores (their heads are
    in the graph); a run being trained is scored on torch, whose weights change under it."""
    from test_finetune import conll_file, sentiment_file, tiny_args
    from test_qa import qa_records, write_jsonl

    from bertkit.encoder.runner import Row
    from bertkit.tasks.finetune import finetune
    from bertkit.tasks.load import load_run

    model = str(tiny_dirs["bert_cased"])
    one_epoch = tiny_args(num_train_epochs=1)
    text, tags, qa = tmp_path / "text", tmp_path / "token", tmp_path / "qa"
    finetune(sentiment_file(tmp_path / "s.tsv", n=32), task="text", output_dir=text, model=model, args=one_epoch)
    finetune(conll_file(tmp_path / "c.txt", n=16), task="token", output_dir=tags, model=model, args=one_epoch)
    finetune(write_jsonl(tmp_path / "q.jsonl", qa_records(16)), task="qa", output_dir=qa, model=model, args=one_epoch)

    texts = ["good movie", "a bad and very long film about nothing at all", "EU rejects German call"]
    on = {engine: load_run(text, engine=engine) for engine in ("torch", "openvino")}
    assert on["openvino"].engine == "openvino" and on["torch"].engine == "torch"
    np.testing.assert_allclose(on["openvino"].predict_proba(texts), on["torch"].predict_proba(texts), atol=1e-4)

    on = {engine: load_run(tags, engine=engine) for engine in ("torch", "openvino")}
    assert on["openvino"].engine == "openvino"
    ids = on["torch"].tokenizer(texts)["input_ids"]
    rows = [Row(row, [0] * len(row)) for row in ids]
    for got, want in zip(on["openvino"].outputs(rows), on["torch"].outputs(rows)):
        assert got.shape == (len(want), len(on["torch"].classes_))
        np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-4)

    on = {engine: load_run(qa, engine=engine) for engine in ("torch", "openvino")}
    assert on["openvino"].engine == "openvino"
    for record in qa_records(4, seed=3):
        got, want = (on[e].answer(record["question"], record["context"]) for e in ("openvino", "torch"))
        assert got["answer"] == want["answer"] and got["score"] == pytest.approx(want["score"], abs=1e-4)


def test_a_cached_graph_changed_in_place_is_found_and_exported_again(own_cache, monkeypatch, caplog, tiny_dirs):
    model = str(tiny_dirs["bert_cased"])
    first = Encoder.from_pretrained(model, device="cpu", engine="openvino")
    expected = first.embed(TEXTS, progress=False)
    [weights] = own_cache.glob("*.bin")
    data = bytearray(weights.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = bytes(4096)  # same size, other bytes: the graph would still read
    weights.write_bytes(bytes(data))
    monkeypatch.setattr(engines, "_GRAPHS", {})
    again = Encoder.from_pretrained(model, device="cpu", engine="openvino")
    assert "is damaged" in caplog.text and weights.name in caplog.text
    np.testing.assert_allclose(again.embed(TEXTS, progress=False), expected, atol=1e-6)
    torch_vectors = Encoder.from_pretrained(model, device="cpu", engine="torch").embed(TEXTS, progress=False)
    np.testing.assert_allclose(again.embed(TEXTS, progress=False), torch_vectors, atol=1e-4)


def test_openvino_forced_at_int8_is_refused_before_any_work_naming_how_it_was_forced(monkeypatch, capsys, tmp_path):
    from conftest import run_cli

    from bertkit.encoder import int8, models

    def no_work(*args, **kwargs):
        raise AssertionError("the model loaded or int8 calibrated before the refusal")

    monkeypatch.setattr(int8, "calibrate", no_work)
    monkeypatch.setattr(models, "load_model", no_work)
    monkeypatch.setattr("bertkit.encoder.encode.load_model", no_work)
    monkeypatch.setenv("BERTKIT_ENGINE", "openvino")
    with pytest.raises(InputError, match=r"^BERTKIT_ENGINE=openvino: int8 is bertkit's own int8"):
        Encoder.from_pretrained(device="cpu", precision="int8")
    texts = tmp_path / "t.txt"
    texts.write_text("a film\n")
    code, _, err = run_cli(monkeypatch, capsys, "embed", texts, "--precision", "int8", "-o", tmp_path / "v.npy")
    assert code == 2 and "BERTKIT_ENGINE=openvino" in err and "--engine" not in err, err
    assert not (tmp_path / "v.npy").exists()


FIRST_PASSES = """
import faulthandler, sys, threading
faulthandler.dump_traceback_later(float(sys.argv[1]), exit=True)  # a watchdog that needs no GIL: exit 1 on a stall
import torch
from bertkit import Encoder
from bertkit.encoder.threads import threads_per_batch
encoder = Encoder.from_pretrained(device="cpu", engine="openvino")
ids = torch.randint(1000, 2000, (4, 24))
inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
barrier = threading.Barrier(2)
def first_pass():
    barrier.wait()  # both threads' first passes at the same moment: what two concurrent batches do
    encoder.network.openvino(inputs)
with threads_per_batch(2):
    threads = [threading.Thread(target=first_pass) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
print("ok")
"""


@pytest.mark.slow
def test_two_first_passes_at_once_never_stall(own_cache, tmp_path):
    """Fresh processes, two threads making their first pass together, four processes at once on the cores.

    Before every request's first pass ran alone, 1 of 40 such processes stalled forever on a quiet 2-core AMD EPYC,
    11 of 120 beside other work. The suite runs 8 (a guard, about 40 s); BERTKIT_LONG_TESTS=1 runs 200 (the proof).
    """
    import os
    import subprocess
    import sys

    from conftest import LONG_TESTS

    script = tmp_path / "first_passes.py"
    script.write_text(FIRST_PASSES)
    Encoder.from_pretrained(device="cpu", engine="openvino")  # the graph exported once, into the cache
    env = {**os.environ, "BERTKIT_CACHE": str(own_cache.parent), "OMP_NUM_THREADS": "2"}
    runs, stalled = (200 if LONG_TESTS else 8), []
    for start in range(0, runs, 4):
        processes = [
            subprocess.Popen(
                [sys.executable, str(script), "60"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            for _ in range(min(4, runs - start))
        ]
        for process in processes:
            out, err = process.communicate(timeout=120)
            if process.returncode != 0 or b"ok" not in out:
                stalled.append(err.decode()[-2000:])
    assert not stalled, f"{len(stalled)} of {runs} processes stalled; the first:\n{stalled[0]}"


def test_the_one_weight_hash_keeps_the_fingerprint_saved_runs_recorded(encoder):
    """Feature runs, vector files and indexes record the encoder's fingerprint and refuse another: the one hash
    (`engines.digest`) gives the packaged model the value bertkit has written since its first release, a moved model
    the same digest, and changed weights another."""
    import copy

    assert encoder.fingerprint == "937bf9d2170a7ebec21da5c948356cdd"  # what runs saved by earlier versions hold
    model = encoder.model
    moved = copy.deepcopy(model)
    moved.config._name_or_path = "/elsewhere/model"
    assert engines.weights_digest(moved) == engines.weights_digest(model)
    with torch.no_grad():
        next(moved.parameters()).view(-1)[0] += 1e-3
    assert engines.weights_digest(moved) != engines.weights_digest(model)
    assert engines.digest({"a": torch.ones(2)}) != engines.digest({"b": torch.ones(2)})  # names count, not only bytes


def test_the_graph_cache_keeps_the_recently_used_within_its_limit_and_finetune_exports_nothing(
    own_cache, monkeypatch, tiny_dirs, tmp_path
):
    """Past $BERTKIT_OPENVINO_CACHE_MB the least recently used graphs go (only bertkit's whole sets); a fine-tuning
    run makes no graph: its run is exported when a user first loads it."""
    from test_finetune import sentiment_file, tiny_args

    from bertkit.tasks.finetune import finetune
    from bertkit.tasks.load import load_run

    def graphs() -> set[str]:
        return {p.stem for p in own_cache.glob("*.json")} if own_cache.is_dir() else set()

    run = finetune(
        sentiment_file(tmp_path / "s.tsv", n=32),
        task="text",
        output_dir=tmp_path / "run",
        model=str(tiny_dirs["bert_cased"]),
        args=tiny_args(num_train_epochs=1),
    )
    assert run.engine == "torch" and graphs() == set()  # neither the base model nor the run was exported
    assert load_run(tmp_path / "run").engine == "openvino" and len(graphs()) == 1  # the first load exports
    own_cache.joinpath("notes.json").write_text("{}")  # not bertkit's: never counted, never removed
    own_cache.joinpath("stray.bin").write_bytes(b"0" * 1000)
    names = ["bert_cased", "distilbert", "electra"]
    made = {}
    for name in names:
        before = graphs()
        Encoder.from_pretrained(str(tiny_dirs[name]), device="cpu", engine="openvino")
        [made[name]] = graphs() - before
    sizes = {key: sum(p.stat().st_size for p in own_cache.glob(f"{key}.*")) for key in made.values()}
    monkeypatch.setattr(engines, "_GRAPHS", {})
    time.sleep(0.02)
    Encoder.from_pretrained(str(tiny_dirs["bert_cased"]), device="cpu", engine="openvino")  # read: used last
    limit = sizes[made["bert_cased"]] + sizes[made["electra"]] + 2**10
    monkeypatch.setenv("BERTKIT_OPENVINO_CACHE_MB", str(limit / 2**20))
    run_graph = next(iter(graphs() - set(made.values()) - {"notes"}))
    assert engines.evict_graphs(own_cache, keep=made["electra"]) == [run_graph, made["distilbert"]]  # oldest first
    assert graphs() == {made["bert_cased"], made["electra"], "notes"}  # the one read again stays
    assert not list(own_cache.glob(f"{made['distilbert']}.*"))  # its whole set
    monkeypatch.setenv("BERTKIT_OPENVINO_CACHE_MB", "0.001")  # smaller than any graph: a new one still stays
    Encoder.from_pretrained(str(tiny_dirs["roberta"]), device="cpu", engine="openvino")
    assert len(graphs() - {"notes"}) == 1 and made["bert_cased"] not in graphs()
    assert own_cache.joinpath("notes.json").is_file() and own_cache.joinpath("stray.bin").is_file()
    monkeypatch.setenv("BERTKIT_OPENVINO_CACHE_MB", "4G")  # a limit that cannot be read: said, and the graph is kept
    monkeypatch.setattr(engines, "_GRAPHS", {})
    assert Encoder.from_pretrained(str(tiny_dirs["electra"]), device="cpu", engine="openvino").engine == "openvino"
