"""precision='int8': int8 linear layers (per-token activations, smoothed) that keep the vectors (cosine bounds vs
fp32)."""

import importlib.util

import numpy as np
import pytest
import torch
from conftest import run_cli, shared_file
from test_bench import bench
from test_finetune import sentiment_file, tiny_args

from bertkit import EmbedOptions, Encoder, InputError
from bertkit.encoder import precision
from bertkit.encoder.encode import vectors_record
from bertkit.encoder.int8 import (
    ALPHA_GRID,
    CALIBRATION_FILE,
    HARDWARE_INT8,
    PACKED_INT8,
    Calibration,
    Int8Group,
    Int8Linear,
    alpha_errors,
    calibrate,
    calibration_inputs,
    layer_stack,
    packaged_texts,
    quantize_model,
)
from bertkit.tasks.finetune import finetune
from bertkit.tasks.finetuned import FineTunedClassifier

TEXTS = [
    "I love Korea",
    "EU rejects German call to boycott British lamb .",
    "the movie was great",
    "",
    "a much longer sentence with many words so that the padding differs between rows of the batch",
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture
def int8_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "int8"


PATHS = [
    pytest.param(True, False, id="vnni"),
    pytest.param(False, False, id="no-vnni"),
    pytest.param(
        True,
        True,
        id="packed",
        marks=pytest.mark.skipif(
            not (HARDWARE_INT8 and hasattr(torch.ops.onednn, "qlinear_pointwise")),
            reason="oneDNN's int8 linear needs a torch that has it and a CPU with VNNI or AMX (on AVX2 alone its "
            "u8·s8 pair sums saturate at int16: it is never chosen there)",
        ),
    ),
]


@pytest.mark.parametrize(("hardware", "packed"), PATHS)
def test_int8_linear_is_the_hand_computed_int8_product(monkeypatch, hardware, packed):
    """Weights per output channel, input rows asymmetric per row, exact int32 products: computed here by hand. With
    VNNI the products are torch._int_mm's; with AMX oneDNN's int8 linear on prepacked weights (run on any VNNI CPU);
    without VNNI the same int8 values are multiplied in fp32 (on AVX2 _int_mm is ~30× slower than fp32): each gives
    the hand-computed product."""
    from bertkit.encoder import int8 as int8_module

    monkeypatch.setattr(int8_module, "HARDWARE_INT8", hardware)
    monkeypatch.setattr(int8_module, "PACKED_INT8", packed)
    weight = torch.tensor([[0.5, -1.0, 0.25], [2.0, 0.1, -0.3]])
    bias = torch.tensor([0.1, -0.2])
    x = torch.tensor([[1.0, 2.0, -0.5], [0.3, 0.3, 0.9]])
    layer = Int8Linear(Int8Group([weight], [bias], None), 0)
    assert (layer.group.weight_values is None) == hardware
    assert (layer.group.weight_packed is not None) == packed

    w_scale = np.abs(weight.numpy()).max(1) / 127  # [1/127·1.0, 1/127·2.0]
    w_q = np.round(weight.numpy() / w_scale[:, None])
    low, high = x.numpy().min(1, keepdims=True), x.numpy().max(1, keepdims=True)
    middle, scale = (high + low) / 2, (high - low) / 2 / 127
    x_q = np.round((x.numpy() - middle) / scale)
    expected = scale * (x_q @ w_q.T) * w_scale + middle * (w_q * w_scale[:, None]).sum(1) + bias.numpy()
    found = layer(x).numpy()
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-6)
    assert np.abs(found - (x @ weight.T + bias).numpy()).max() < 0.02  # and close to the real product
    assert layer.group.weight_int8.dtype == torch.int8


def test_both_product_paths_give_the_same_layer_output_at_model_size(monkeypatch):
    from bertkit.encoder import int8 as int8_module

    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(1536, 384, generator=generator), torch.randn(1536, generator=generator)
    x = torch.randn(2, 37, 384, generator=generator) * 3
    outputs = []
    packed = HARDWARE_INT8 and hasattr(torch.ops.onednn, "qlinear_pointwise")  # saturates on AVX2 alone: never used
    paths = [(True, False), (False, False)] + [(True, True)] * packed
    for hardware, packed in paths:
        monkeypatch.setattr(int8_module, "HARDWARE_INT8", hardware)
        monkeypatch.setattr(int8_module, "PACKED_INT8", packed)
        outputs.append(Int8Linear(Int8Group([weight], [bias], None), 0)(x))
    assert outputs[0].shape == (2, 37, 1536)
    for other in outputs[1:]:  # fp32 sums of int products: exact-ish
        torch.testing.assert_close(other, outputs[0], rtol=1e-5, atol=1e-4)


def test_linears_reading_one_tensor_share_one_product_and_each_gets_what_it_alone_would():
    """Query, key and value: one quantisation and one int8 product, each member its own columns, exactly as one
    linear map alone gives them (weights are quantised per output channel, so stacking changes nothing); the product
    is let go once every member has its part."""
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(out, 16, generator=generator) for out in (8, 8, 4)]
    biases = [torch.randn(len(w), generator=generator) for w in weights]
    group = Int8Group(weights, biases, None)
    members = [Int8Linear(group, i) for i in range(3)]
    x = torch.randn(2, 5, 16, generator=generator) * 2
    together = [members[0](x)]
    assert len(group._last) == 1  # kept for key and value
    together += [members[1](x), members[2](x)]
    assert group._last == {}
    for member, weight, bias, got in zip(members, weights, biases, together):
        assert got.shape == (2, 5, len(weight)) and member.out_features == len(weight)
        alone = Int8Linear(Int8Group([weight], [bias], None), 0)
        torch.testing.assert_close(got, alone(x), rtol=1e-6, atol=1e-5)  # up to fp32 summation order
    assert torch.equal(members[0](x), together[0]) and torch.equal(members[0](x * 2), Int8Linear(group, 0)(x * 2))


def test_a_linear_never_changes_its_input_in_place():
    """The residual reads the same tensor (ELECTRA's projected embeddings feed layer 0 unsmoothed): under inference
    mode, whose views keep no base, and for a view of another tensor, with and without smoothing."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(6, 8, generator=generator)
    for smooth in (None, torch.rand(8, generator=generator) + 0.5):
        layer = Int8Linear(Int8Group([weight], [None], smooth), 0)
        for inference in (True, False):
            with torch.inference_mode(inference):
                whole = torch.randn(3, 4, 8, generator=generator)
                x = whole[1:]  # a view
                kept = whole.clone()
                layer(x)
            assert torch.equal(whole, kept), (smooth is None, inference)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert_cased", "distilbert", "electra", "roberta"])
def test_int8_matches_fp32_on_every_architecture(tiny_dirs, int8_cache, name):
    fp32 = Encoder.from_pretrained(str(tiny_dirs[name]))
    int8 = Encoder.from_pretrained(str(tiny_dirs[name]), precision="int8")
    for layers, pooling in (("last", "mean"), ("all:mean", "cls"), ("-2", "max")):
        a = fp32.embed(TEXTS, layers=layers, pooling=pooling, warn=False)
        b = int8.embed(TEXTS, layers=layers, pooling=pooling, warn=False)
        assert a.shape == b.shape and b.dtype == np.float32
        assert np.abs(a - b).max() > 0  # really a different computation, not the fp32 model
        assert cosines(a, b).min() > 0.99
    if fp32.info()["pooler"]:
        np.testing.assert_allclose(int8.embed(TEXTS, pooling="pooler"), fp32.embed(TEXTS, pooling="pooler"), atol=0.05)
    _, stack = layer_stack(int8.network.running)
    quantized = [m for m in stack.modules() if isinstance(m, Int8Linear)]
    plain = [m for m in stack.modules() if isinstance(m, torch.nn.Linear)]
    assert len(quantized) == 6 * len(stack) and plain == []  # every linear map of every layer
    assert len({id(m.group) for m in quantized}) == 4 * len(stack)  # query, key and value: one product
    assert any(isinstance(m, torch.nn.Linear) for m in fp32.model.modules())  # the fp32 model is left as it was
    assert (int8_cache / f"{fp32.fingerprint}.safetensors").is_file()


WORDS = "the a film movie was good bad plot acting thin long story great awful fine , . !".split()  # noqa: SIM905
HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
BATCH_PATHS = [  # (precision, engine, int8 product path): every precision, every engine and every int8 product
    pytest.param("fp32", "torch", None, id="fp32"),
    pytest.param("bf16", "torch", None, id="bf16"),
    *[
        pytest.param(
            name,
            "openvino",
            None,
            id=f"{name}-openvino",
            marks=pytest.mark.skipif(not HAS_OPENVINO, reason="no OpenVINO"),
        )
        for name in ("fp32", "bf16")
    ],
    pytest.param(
        "int8", "torch", "vnni", id="int8-vnni", marks=pytest.mark.skipif(not HARDWARE_INT8, reason="no VNNI or AMX")
    ),
    pytest.param("int8", "torch", "no-vnni", id="int8-no-vnni"),
    pytest.param(
        "int8", "torch", "packed", id="int8-packed", marks=pytest.mark.skipif(not PACKED_INT8, reason="no AMX")
    ),
]


@pytest.mark.parametrize(("precision_name", "engine", "product"), BATCH_PATHS)
def test_a_texts_vectors_do_not_depend_on_what_shares_its_batch(monkeypatch, precision_name, engine, product):
    """At every precision and on every int8 product path, "a film" embedded alone and in random company (shorter
    and longer texts, anywhere in the list) gives the same vector: every layer, so that no layer hides a difference.
    Before a CPU's passes held one padded width at bf16 and int8, bf16 moved 0.004 and int8 up to 0.03 (wider padding
    changes attention's last bits, and rounding turns them into steps)."""
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st

    from bertkit.encoder import int8 as int8_module

    monkeypatch.setattr(int8_module, "HARDWARE_INT8", product != "no-vnni" and HARDWARE_INT8)
    monkeypatch.setattr(int8_module, "PACKED_INT8", product == "packed")
    model = Encoder.from_pretrained(precision=precision_name, engine=engine)
    alone = model.embed(["a film"], layers="all:concat", warn=False)[0]
    text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join)

    @settings(max_examples=8, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(others=st.lists(text, max_size=12), where=st.integers(0, 12))
    @example(others=["the plot was thin and the acting was awful"], where=1)  # padded wider: bf16 moved 0.004
    def alone_and_in_company_agree(others, where):
        where = min(where, len(others))
        batch = [*others[:where], "a film", *others[where:]]
        together = model.embed(batch, layers="all:concat", warn=False)[where]
        np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5)

    alone_and_in_company_agree()


def test_calibration_is_made_once_cached_and_reused(tiny_dirs, int8_cache):
    first = Encoder.from_pretrained(str(tiny_dirs["bert_cased"]), precision="int8")
    cached = int8_cache / f"{first.fingerprint}.safetensors"
    made = cached.stat().st_mtime_ns
    second = Encoder.from_pretrained(str(tiny_dirs["bert_cased"]), precision="int8")
    assert cached.stat().st_mtime_ns == made
    assert [p.name for p in cached.parent.iterdir()] == [cached.name]  # no scratch files left behind
    np.testing.assert_array_equal(first.embed(TEXTS, warn=False), second.embed(TEXTS, warn=False))
    assert second.info()["precision"] == "int8"
    calibration = Calibration.load(cached)
    record = vectors_record(first, EmbedOptions().resolve(first))
    assert calibration.texts == 198 and record["int8_calibration"] == calibration.key
    assert record["precision"] == "int8" and record["fingerprint"] == first.fingerprint
    fp32 = Encoder.from_pretrained(str(tiny_dirs["bert_cased"]))
    assert "int8_calibration" not in vectors_record(fp32, EmbedOptions().resolve(fp32))
    assert calibration.alpha in ALPHA_GRID and first.network.running is not first.model


@pytest.mark.slow
def test_the_smoothing_strength_is_the_one_that_keeps_the_calibration_texts_closest(encoder):
    """calibrate() measures every strength on its own texts and keeps the best; the saved file carries it."""
    texts = packaged_texts()[:60]
    feeds = list(calibration_inputs(encoder.model, encoder.tokenizer, texts, encoder.max_length))
    calibration = calibrate(encoder.model, feeds)
    errors = alpha_errors(encoder.model, calibration, feeds, ALPHA_GRID)
    assert calibration.alpha == min(errors, key=errors.get)
    assert max(errors.values()) > min(errors.values()) > 0  # the strength matters, and int8 is not exact
    # the error is what it says: recompute one strength's by hand on the first text alone
    alpha, feed = calibration.alpha, feeds[0]
    with torch.inference_mode():
        reference = encoder.model(**feed, output_hidden_states=True).hidden_states[1:]
        got = quantize_model(encoder.model, calibration, alpha)(**feed, output_hidden_states=True).hidden_states[1:]
    by_hand = np.mean([float((g.mean(1) - r.mean(1)).norm() / r.mean(1).norm()) for g, r in zip(got, reference)])
    assert by_hand == pytest.approx(alpha_errors(encoder.model, calibration, feeds[:1], [alpha])[alpha], rel=1e-4)


def test_quantize_writes_a_copy_whose_own_calibration_is_used(tiny_dirs, int8_cache, tmp_path, monkeypatch, capsys):
    texts = tmp_path / "mine.txt"
    texts.write_text("\n".join(f"sentence {i} about Seoul and Busan" for i in range(40)) + "\n", encoding="utf-8")
    out = tmp_path / "quantized"
    code, stdout, stderr = run_cli(
        monkeypatch, capsys, "quantize", str(tiny_dirs["bert_cased"]), "-o", str(out), "--calibration", str(texts)
    )
    assert code == 0, stderr
    assert "calibrated on 40 texts" in stderr and "cosine to fp32" in stderr and f"--model {out}" in stdout
    assert (out / CALIBRATION_FILE).is_file() and (out / "config.json").is_file()
    own = Encoder.from_pretrained(str(out), precision="int8")
    packaged = Encoder.from_pretrained(str(tiny_dirs["bert_cased"]), precision="int8")
    assert own.fingerprint == packaged.fingerprint  # the same weights ...
    own_record, packaged_record = (vectors_record(e, EmbedOptions().resolve(e)) for e in (own, packaged))
    assert own_record["int8_calibration"] == Calibration.load(out / CALIBRATION_FILE).key
    assert own_record != packaged_record  # ... so caches and runs tell the two int8 variants apart
    assert not np.array_equal(own.embed(TEXTS, warn=False), packaged.embed(TEXTS, warn=False))
    code, _, stderr = run_cli(monkeypatch, capsys, "quantize", str(tiny_dirs["bert_cased"]), "-o", str(out))
    assert code == 2 and "already exists" in stderr


def test_a_foreign_calibration_file_is_refused_by_name(tiny_dirs, tmp_path):
    from safetensors.torch import save_file

    bad = tmp_path / "model"
    bad.mkdir()
    for item in tiny_dirs["bert_cased"].iterdir():
        (bad / item.name).write_bytes(item.read_bytes())
    save_file({"x": torch.zeros(2)}, str(bad / CALIBRATION_FILE))
    with pytest.raises(InputError, match="not a bertkit int8 calibration.*bertkit quantize"):
        Encoder.from_pretrained(str(bad), precision="int8")


@pytest.mark.slow
def test_a_fine_tuned_classifier_runs_int8_and_quantize_calibrates_the_run(
    tiny_dirs, tmp_path, int8_cache, monkeypatch, capsys, caplog
):
    data, dev = sentiment_file(tmp_path / "train.tsv", n=96), sentiment_file(tmp_path / "dev.tsv", n=32, seed=1)
    finetune(
        data,
        dev,
        task="text",
        output_dir=tmp_path / "run",
        model=str(tiny_dirs["bert_cased"]),
        args=tiny_args(num_train_epochs=2),
    )
    texts = [line.split("\t")[0] for line in dev.read_text().splitlines()]
    fp32 = FineTunedClassifier.from_pretrained(tmp_path / "run")
    int8 = FineTunedClassifier.from_pretrained(tmp_path / "run", precision="int8")
    assert "fine-tuned and evaluated at fp32 and is now used at int8" in caplog.text
    p, q = fp32.predict_proba(texts), int8.predict_proba(texts)
    assert 0 < np.abs(p - q).max() < 0.05 and (p.argmax(1) == q.argmax(1)).mean() >= 0.9
    assert any(isinstance(m, Int8Linear) for m in int8.network.running.modules())
    assert isinstance(int8.network.running.classifier, torch.nn.Linear)  # the head stays fp32
    code, _, stderr = run_cli(
        monkeypatch, capsys, "quantize", str(tmp_path / "run"), "-o", str(tmp_path / "q"), "--calibration", str(dev)
    )
    assert code == 0, stderr
    assert "same label as fp32 on" in stderr and (tmp_path / "q" / "bertkit.json").is_file()
    assert not (tmp_path / "q" / "checkpoint").exists()
    code, stdout, stderr = run_cli(
        monkeypatch, capsys, "predict", str(tmp_path / "q"), "good movie", "--precision", "int8"
    )
    assert code == 0 and ("pos" in stdout or "neg" in stdout)


def test_a_fine_tuned_run_without_its_own_calibration_calibrates_once_and_reuses_it(
    tiny_dirs, tmp_path, int8_cache, monkeypatch
):
    from bertkit.encoder import int8
    from bertkit.encoder.engines import weights_digest

    data = sentiment_file(tmp_path / "train.tsv", n=32)
    finetune(data, None, task="text", output_dir=tmp_path / "run", model=str(tiny_dirs["bert_cased"]), args=tiny_args())
    assert not (tmp_path / "run" / CALIBRATION_FILE).exists()
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return calibrate(*args, **kwargs)

    monkeypatch.setattr(int8, "calibrate", counted)
    texts = [line.split("\t")[0] for line in data.read_text().splitlines()]
    first = FineTunedClassifier.from_pretrained(tmp_path / "run", precision="int8", device="cpu")
    second = FineTunedClassifier.from_pretrained(tmp_path / "run", precision="int8", device="cpu")
    assert len(calls) == 1
    assert [p.name for p in int8_cache.iterdir()] == [f"{weights_digest(first.model)}.safetensors"]
    np.testing.assert_array_equal(first.predict_proba(texts), second.predict_proba(texts))


def test_int8_needs_torch_int8_products(monkeypatch):
    monkeypatch.delattr(torch, "_int_mm")
    with pytest.raises(InputError, match=r"needs torch's int8 matrix product \(torch >= 2.2"):
        precision.check_precision("int8")
    with pytest.raises(InputError, match="valid values are fp32, bf16, fp16, int8"):
        precision.check_precision("fp8")
    with pytest.raises(InputError, match="'fp16' runs on a GPU"):
        precision.check_precision("fp16")


@pytest.mark.slow
def test_int8_default_model_keeps_the_vectors_on_sst2_and_conll(encoder, int8_cache):
    """The issue's fidelity targets on real sentences, in and out of the calibration's domain."""
    sst2 = [line.split("\t")[0] for line in shared_file("sst2", "dev.tsv").read_text().splitlines()[:400]]
    blocks = shared_file("conll2003", "dev.txt").read_text().split("\n\n")
    conll = [
        " ".join(line.split()[0] for line in block.splitlines() if line.strip() and "DOCSTART" not in line)
        for block in blocks[:400]
    ]
    int8 = encoder.with_options(precision="int8")
    for texts in (sst2, [t for t in conll if t]):
        a, b = encoder.embed(texts), int8.embed(texts)
        found = cosines(a, b)
        assert found.min() >= 0.99 and np.median(found) >= 0.999
        assert bench.compare(a, b)[1] == pytest.approx(found.min(), abs=1e-5)
        assert np.median(found) < 1 - 1e-7  # and not an fp32 run in disguise


def test_a_cached_calibration_changed_in_place_is_found_and_made_again(tiny_dirs, tmp_path, monkeypatch, caplog):
    import json
    import struct

    from bertkit.encoder import int8
    from bertkit.errors import DamagedFileError

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    encoder = Encoder.from_pretrained(str(tiny_dirs["bert_cased"]), device="cpu", engine="torch")
    made = int8.calibration_for(encoder.model, encoder.tokenizer, encoder.max_length, None, "tiny")
    cached = int8.cache_dir() / "tiny.safetensors"
    data = bytearray(cached.read_bytes())
    header = 8 + struct.unpack("<Q", data[:8])[0]
    assert json.loads(json.loads(data[8:header])["__metadata__"]["bertkit"])["digest"] == made.key
    data[header : header + 8] = struct.pack("<2f", 1e6, 1e6)  # a maximum changed, the file the same size
    cached.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match="damaged"):
        Calibration.load(cached)
    calibrations = []
    real = int8.calibrate
    monkeypatch.setattr(int8, "calibrate", lambda *a: calibrations.append(1) or real(*a))
    again = int8.calibration_for(encoder.model, encoder.tokenizer, encoder.max_length, None, "tiny")
    assert calibrations == [1] and "damaged" in caplog.text and "calibrating again" in caplog.text
    assert again.key == made.key and Calibration.load(cached).key == made.key


KINDS = {
    "AMX": {"amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx2"},
    "VNNI + BF16": {"avx512_bf16", "avx512_vnni", "avx2"},
    "VNNI": {"avx512_vnni", "avx2"},
    "AVX2": {"avx2"},
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_auto_is_the_fastest_precision_measured_faithful_on_each_cpu_kind(kind, monkeypatch):
    flags = KINDS[kind]
    assert precision.cpu_kind(flags) == kind
    measured = precision.MEASURED[kind]
    faithful = {p: speed for p, (speed, cosine) in measured.items() if cosine >= 0.99 and speed > 1}
    if "bf16" in faithful and not flags & {"amx_bf16", "avx512_bf16"}:
        del faithful["bf16"]
    expected = max(faithful, key=faithful.get) if faithful else "fp32"
    chosen, reason = precision.fastest_faithful(flags=flags)
    assert chosen == expected and reason.startswith(kind), reason
    assert {"AMX": "bf16", "VNNI + BF16": "int8", "VNNI": "int8", "AVX2": "fp32"}[kind] == chosen  # the docs' table
    if chosen != "fp32":  # a precision that loses the direction is never chosen, however fast
        speed, _ = measured[chosen]
        monkeypatch.setitem(precision.MEASURED, kind, {**measured, chosen: (speed, 0.98)})
        assert precision.fastest_faithful(flags=flags)[0] != chosen
    assert precision.fastest_faithful(torch.device("cuda"), flags)[0] == "fp16"


def test_auto_resolves_where_the_precision_enters_and_keeps_the_direction_here(monkeypatch, capsys):
    from bertkit.io.readers import read_labelled, sample_path

    chosen = precision.fastest_faithful()[0]
    texts = read_labelled(sample_path("reviews.tsv"), "text", "label").texts
    auto = Encoder.from_pretrained(precision="auto")
    assert auto.precision == chosen and vectors_record(auto, EmbedOptions().resolve(auto))["precision"] == chosen
    exact = Encoder.from_pretrained().embed(texts, normalize_embeddings=True)
    cosines = (auto.embed(texts, normalize_embeddings=True) * exact).sum(1)
    assert cosines.min() >= precision.FAITHFUL, cosines.min()
    code, out, err = run_cli(monkeypatch, capsys, "env")
    assert code == 0 and f"fastest faithful precision  {chosen} on the cpu" in out, err
    with pytest.raises(InputError, match="valid values are fp32, bf16, fp16, int8, auto"):
        Encoder.from_pretrained(precision="fastest")
