"""Devices: one `device` option everywhere, `auto` and its refusals, GPU memory planning (token budget, out-of-memory
batches split, one row too big named), runs that say where they ran and load anywhere, Ray actors on GPUs.

The tests marked `gpu` need CUDA and skip saying so elsewhere (CI has no GPU); everything else runs on any CPU, with
torch's CUDA queries replaced where a test needs a GPU's answers. benchmarks/gpu_check.sh runs the `gpu` ones on a
GPU machine and reports each as a check, with the figures it records (`record_property`) and the model it used.
"""

import json
import weakref

import numpy as np
import pytest
import torch
from conftest import run_cli
from test_finetune import sentiment_file, tiny_args

from bertkit import BertVectorizer, Encoder, InputError, TextClassifier
from bertkit.encoder import devices
from bertkit.encoder.defaults import GPU_BATCH_TOKENS, MAX_BATCH_TOKENS
from bertkit.encoder.devices import OutOfDeviceMemory, resolve_device, token_budget
from bertkit.encoder.precision import check_precision
from bertkit.io.readers import read_labelled, sample_path
from bertkit.tasks.load import load_run

HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.gpu
NO_RAY = "Ray is not installed here (the GPU image has none, and its wheel is too large to carry there)"


@pytest.fixture(scope="module")
def sample():
    data = read_labelled(sample_path("reviews.tsv"), "text", "label")
    return data.texts, data.labels


# ---- the option and its refusals -----------------------------------------------------------------------------------
def test_auto_picks_cuda_then_mps_then_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices, "_mps_available", lambda: False)
    assert resolve_device("auto") == resolve_device(None) == torch.device("cpu")
    monkeypatch.setattr(devices, "_mps_available", lambda: True)
    assert resolve_device("auto") == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert resolve_device("auto") == torch.device("cuda", 0)
    assert resolve_device(" CPU ") == resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tpu", "give one of auto, cpu, cuda, cuda:N or mps"),
        ("cuda", "this machine has no CUDA GPU"),
        ("cuda:1", "this machine has no CUDA GPU"),
    ],
)
def test_a_device_that_is_not_there_is_refused_with_what_to_use(spec, message):
    if HAS_CUDA and spec.startswith("cuda"):
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(InputError, match=message):
        resolve_device(spec)


def test_cuda_indices_are_checked_against_the_gpus_there(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(InputError, match="has 2 CUDA GPU"):
        resolve_device("cuda:2")
    with pytest.raises(InputError, match="cuda:N with N a GPU number"):
        resolve_device("cuda:x")


def test_precisions_are_refused_where_they_do_not_run():
    with pytest.raises(InputError, match="int8' is a CPU option.*fp16' or precision='bf16'"):
        check_precision("int8", device=torch.device("cuda", 0))
    with pytest.raises(InputError, match="fp16' runs on a GPU"):
        check_precision("fp16", device=torch.device("cpu"))
    assert check_precision("fp16", device=torch.device("mps")) == "fp16"


COMMANDS = {
    "embed": ["embed", "{texts}", "-o", "{out}/v.npy"],
    "train": ["train", "{reviews}", "-o", "{out}/run", "--text-column", "text", "--label-column", "label"],
    "probe": [
        "probe",
        "{reviews}",
        "--dev",
        "{reviews}",
        "-o",
        "{out}/p",
        "--text-column",
        "text",
        "--label-column",
        "label",
    ],
    "explain": ["explain", "a sentence", "-o", "{out}/page.html"],
    "search": ["search", "{index}", "a query"],
}


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_model_command_refuses_a_missing_gpu_in_one_line_and_writes_nothing(
    command, encoder, tmp_path, monkeypatch, capsys
):
    texts = tmp_path / "texts.txt"
    texts.write_text("one text\nanother text\n")
    index = tmp_path / "index.npz"
    if command == "search":
        from bertkit.io.stream import embed_file

        embed_file(encoder, texts, index)
    values = {"texts": texts, "out": tmp_path / "out", "reviews": sample_path("reviews.tsv"), "index": index}
    args = [part.format(**values) for part in COMMANDS[command]]
    code, out, err = run_cli(monkeypatch, capsys, *args, "--device", "cuda")
    assert code == 2, (out, err)
    assert err.strip().splitlines()[-1].startswith("error: --device cuda: this machine has no CUDA GPU"), err
    assert not (tmp_path / "out").exists()


def test_serve_refuses_a_missing_gpu_before_binding(monkeypatch, capsys):
    if HAS_CUDA:
        pytest.skip("this machine has a CUDA GPU")
    code, _, err = run_cli(monkeypatch, capsys, "serve", "--device", "cuda", "--port", "1")
    assert code == 2 and "error: --device cuda: this machine has no CUDA GPU" in err


def test_quantize_refuses_a_gpu_saying_why(tmp_path, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "quantize", "-o", tmp_path / "q", "--device", "cuda")
    assert code == 2 and "int8" in err and "runs on the CPU only" in err and "fp16 or bf16" in err
    assert not (tmp_path / "q").exists()


def test_the_run_summary_says_where_auto_ran(tmp_path, monkeypatch, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("one text\nanother text\n")
    code, _, err = run_cli(monkeypatch, capsys, "embed", texts, "-o", tmp_path / "v.npy")
    where = "cuda:0" if HAS_CUDA else "cpu, fp32"
    assert code == 0 and f"texts/s on {where}" in err, err


# ---- memory ------------------------------------------------------------------------------------------------------
def test_the_token_budget_follows_free_gpu_memory(encoder, monkeypatch):
    assert token_budget(encoder.model, torch.device("cpu"), 512) == MAX_BATCH_TOKENS
    config = encoder.model.config
    per_token = 4 * (
        (config.num_hidden_layers + 1) * config.hidden_size
        + config.intermediate_size
        + config.num_attention_heads * 512
    )
    free = {"bytes": 8 * 2**30}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free["bytes"], 80 * 2**30))
    gpu = torch.device("cuda", 0)
    assert token_budget(encoder.model, gpu, 512) == GPU_BATCH_TOKENS  # plenty of memory: TEI's default budget
    free["bytes"] = 100 * 2**20
    assert token_budget(encoder.model, gpu, 512) == int(0.5 * 100 * 2**20 / per_token) < GPU_BATCH_TOKENS
    free["bytes"] = 2**20  # almost full
    assert token_budget(encoder.model, gpu, 512) == 512  # still one full-length row


def test_batches_are_sized_for_the_device(encoder, monkeypatch):
    assert encoder._default_batch_size == 32
    planned = encoder.with_options()
    monkeypatch.setattr(planned, "device", torch.device("cuda", 0))
    monkeypatch.setattr(planned.network, "max_batch_tokens", GPU_BATCH_TOKENS)
    rows = planned._default_batch_size
    assert rows == GPU_BATCH_TOKENS  # on a GPU no row limit: the token budget decides
    monkeypatch.setattr(planned, "device", torch.device("cpu"))  # run here what a GPU would be given
    shapes = []
    forward = planned.network.forward_inputs
    monkeypatch.setattr(
        planned.network,
        "forward_inputs",
        lambda inputs: shapes.append(tuple(inputs["input_ids"].shape)) or forward(inputs),
    )
    texts = [f"text {i} " + "word " * (i % 5) for i in range(300)]
    found = planned.embed(texts, batch_size=rows, progress=False)
    np.testing.assert_allclose(found, encoder.embed(texts, progress=False), atol=1e-5)
    # no row limit on a GPU: passes of many more rows than a CPU's 32, each within the token budget
    assert max(rows for rows, _ in shapes) > 32
    assert all(rows * width <= GPU_BATCH_TOKENS for rows, width in shapes)


def _out_of_memory_above(encoder, monkeypatch, rows: int, calls: list):
    """Make the encoder's forward fail as a GPU out of memory does when a batch holds more than `rows` rows."""
    forward = encoder.network.forward_inputs

    def limited(inputs):
        size = inputs["input_ids"].shape[0]
        calls.append((size, size <= rows))
        if size > rows:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(inputs)

    monkeypatch.setattr(encoder.network, "forward_inputs", limited)


def test_an_out_of_memory_batch_is_split_and_gives_the_same_vectors(encoder, monkeypatch):
    texts = [f"sentence number {i} " + "word " * (i % 7) for i in range(23)]
    expected = encoder.embed(texts, batch_size=16, progress=False)
    one_at_a_time = encoder.with_options(concurrent_batches=1)
    calls: list[tuple[int, bool]] = []
    _out_of_memory_above(one_at_a_time, monkeypatch, 3, calls)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    found = one_at_a_time.embed(texts, batch_size=16, progress=False)
    np.testing.assert_allclose(found, expected, atol=1e-5)
    first = calls[0][0]
    assert first > 3 and not calls[0][1] and calls[1][0] == first // 2  # the pass that did not fit, then its halves
    assert sum(size for size, ran in calls if ran) == len(texts)  # every row once, none twice


def test_a_failed_pass_frees_its_tensors_before_its_halves_run(monkeypatch):
    """Found for the GPU check: the halves of a failed pass ran inside its `except` block, whose traceback held the
    pass's tensors (on a GPU its activations), so the halves ran short of memory too."""
    from bertkit.encoder.runner import Row, Runner

    failed, held_during_halves = [], []

    def forward(inputs):
        rows = inputs["input_ids"].shape[0]
        if rows > 2:
            activations = torch.ones(rows, 8)
            failed.append(weakref.ref(activations))
            raise torch.cuda.OutOfMemoryError("CUDA out of memory.")
        held_during_halves.append(any(ref() is not None for ref in failed))
        return inputs["input_ids"]

    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    runner = Runner(forward, 0, torch.device("cpu"), 10_000, concurrent=1)
    assert len(list(runner.passes([Row([1] * 5, [0] * 5) for _ in range(4)]))) == 2
    assert held_during_halves == [False, False]


def test_a_row_too_big_alone_is_named_with_its_tokens_and_the_stream_is_resumable(encoder, tmp_path, monkeypatch):
    from bertkit.io.stream import embed_file

    source = tmp_path / "texts.txt"
    source.write_text("".join(f"short text {i}\n" for i in range(6)) + "a much longer text " * 20 + "\n")
    one_at_a_time = encoder.with_options(concurrent_batches=1)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    forward = one_at_a_time.network.forward_inputs

    def too_long_fails(inputs):
        if inputs["input_ids"].shape[1] > 40:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory.")
        return forward(inputs)

    with pytest.raises(OutOfDeviceMemory) as caught:
        monkeypatch.setattr(one_at_a_time.network, "forward_inputs", too_long_fails)
        one_at_a_time.embed(["fits", "a much longer text " * 20], progress=False)
    assert caught.value.row == 1 and caught.value.tokens == 82
    output = tmp_path / "v.npz"
    with pytest.raises(InputError, match=r"texts.txt, line 7: 82 tokens do not fit in the memory of cpu even alone"):
        embed_file(one_at_a_time, source, output, chunk_rows=3)
    monkeypatch.setattr(one_at_a_time.network, "forward_inputs", forward)
    embed_file(one_at_a_time, source, output, chunk_rows=3)  # the same call resumes and completes
    np.testing.assert_allclose(
        np.load(output)["vectors"], encoder.embed(source.read_text().splitlines(), progress=False), atol=1e-5
    )


def test_serve_on_a_gpu_runs_one_pass_at_a_time(encoder, monkeypatch, caplog):
    from bertkit.serve.service import Service
    from bertkit.serve.settings import ServeSettings

    on_gpu = encoder.with_options(concurrent_batches=2)
    monkeypatch.setattr(on_gpu, "device", torch.device("cuda", 0))
    service = Service(on_gpu, settings=ServeSettings(concurrent_batches=2))
    assert service.concurrent_batches == 1 and service.encoder.runner().concurrent == 1
    assert "one pass runs at a time" in caplog.text


# ---- records: where a run ran, and it loads anywhere ---------------------------------------------------------------
def test_feature_runs_record_their_device_and_load_on_another(sample, tmp_path):
    texts, labels = sample
    classifier = TextClassifier(BertVectorizer(layers="last", device="cpu"), cv=3).fit(texts, labels)
    classifier.save_pretrained(tmp_path / "run")
    config = tmp_path / "run" / "bertkit.json"
    record = json.loads(config.read_text())
    assert record["device"] == "cpu"
    record["device"] = "cuda:0 (NVIDIA H100 80GB HBM3)"  # as a GPU machine writes it
    config.write_text(json.dumps(record))
    loaded = load_run(tmp_path / "run", device="auto")
    assert loaded.vectorizer_.encoder_.device == resolve_device("auto")
    np.testing.assert_allclose(loaded.predict_proba(texts), classifier.predict_proba(texts), atol=1e-4)


def test_fine_tuned_runs_record_their_device_and_load_on_another(tiny_dirs, tmp_path):
    from bertkit.tasks.finetune import finetune

    train = sentiment_file(tmp_path / "train.tsv", n=24)
    tuned = finetune(train, None, args=tiny_args(), output_dir=tmp_path / "run", model=str(tiny_dirs["bert_cased"]))
    record = json.loads((tmp_path / "run" / "bertkit.json").read_text())
    assert record["device"] == devices.describe(resolve_device("auto"))
    texts = ["a good film", "a bad one"]
    reloaded = load_run(tmp_path / "run", device="cpu")
    np.testing.assert_allclose(reloaded.predict_proba(texts), tuned.predict_proba(texts), atol=1e-4)


# ---- Ray --------------------------------------------------------------------------------------------------------
def test_ray_plans_gpu_actors_from_the_gpus_there():
    pytest.importorskip("ray", reason=NO_RAY)
    from bertkit.ray.dataset import plan_resources

    plan = plan_resources(16, 16, 1, cluster_gpus=4, gpus_per_actor=1)
    assert (plan.actors, plan.gpus_per_actor, plan.cpus_per_actor, plan.device) == (4, 1.0, 1.0, "cuda")
    shared = plan_resources(8, 8, 1, cluster_gpus=1, gpus_per_actor=0.5)
    assert (shared.actors, shared.gpus_per_actor) == (2, 0.5)
    assert plan_resources(2, 2, 1).device == "cpu" and plan_resources(2, 2, 1).gpus_per_actor == 0
    with pytest.raises(InputError, match="the Ray cluster has no GPUs; leave it out for CPU actors"):
        plan_resources(2, 2, 1, cluster_gpus=0, gpus_per_actor=1)
    with pytest.raises(InputError, match="3 actor.*1 GPUs need more than the cluster's 2 GPUs"):
        plan_resources(16, 16, 1, actors=3, cluster_gpus=2, gpus_per_actor=1)


def test_gpu_actors_are_a_ray_option(tmp_path, monkeypatch, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("one\n")
    code, _, err = run_cli(monkeypatch, capsys, "embed", texts, "-o", tmp_path / "v.npy", "--gpus-per-actor", "1")
    assert code == 2 and "--gpus-per-actor applies to --engine ray" in err
    code, _, err = run_cli(
        monkeypatch, capsys, "embed", texts, "-o", tmp_path / "out", "--engine", "ray", "--device", "cuda"
    )
    assert code == 2 and "--gpus-per-actor" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "v.npy").exists()


# ---- on a GPU ------------------------------------------------------------------------------------------------------
# Each records its figures before asserting, so a failed check still says by how much; `model` is 'default' (what the
# packaged model's package points to: gpu_check.sh names it), or 'tiny' (tests/tiny_models.py).
@pytest.fixture
def no_tf32():
    """fp32 on the GPU as fp32 (TF32 matrix products would differ from the CPU in the 3rd decimal)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.fixture(scope="module")
def cpu_encoder():
    """The default model on the CPU: the reference (the session's `encoder` is on the GPU where there is one)."""
    return Encoder.from_pretrained(device="cpu")


def largest_difference(found, expected) -> float:
    return float(np.abs(np.asarray(found, dtype=np.float64) - np.asarray(expected, dtype=np.float64)).max())


def smallest_cosine(found: np.ndarray, expected: np.ndarray) -> float:
    return float(((found * expected).sum(1) / np.linalg.norm(found, axis=1) / np.linalg.norm(expected, axis=1)).min())


@gpu
def test_gpu_fp32_vectors_equal_the_cpu_and_plain_transformers(
    cpu_encoder, hf_default, sample, no_tf32, record_property
):
    texts = sample[0]
    raw = {"pooling": "mean", "normalize_embeddings": False, "progress": False}  # what plain transformers gives
    found = Encoder.from_pretrained(device="cuda").embed(texts, **raw)
    model, tokenizer = hf_default
    model = model.to("cuda")
    try:
        with torch.inference_mode():
            inputs = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt").to("cuda")
            states = model(**inputs).last_hidden_state
            mask = inputs["attention_mask"].unsqueeze(-1).float()
            reference = ((states * mask).sum(1) / mask.sum(1)).cpu().numpy()
    finally:
        model.to("cpu")
    record_property("check", "fp32 on the GPU = the CPU and = plain transformers on the GPU (TF32 off), 1e-4")
    record_property("model", "default")
    record_property("max_abs_vs_cpu", largest_difference(found, cpu_encoder.embed(texts, **raw)))
    record_property("max_abs_vs_transformers", largest_difference(found, reference))
    np.testing.assert_allclose(found, cpu_encoder.embed(texts, **raw), atol=1e-4)
    np.testing.assert_allclose(found, reference, atol=1e-4)


@gpu
def test_gpu_vectors_do_not_depend_on_the_batch_size(sample, no_tf32, record_property):
    texts = sample[0]
    on_gpu = Encoder.from_pretrained(device="cuda")
    planned = on_gpu.embed(texts, progress=False)  # the token budget's batches
    differences = {
        size: largest_difference(on_gpu.embed(texts, batch_size=size, progress=False), planned) for size in (1, 7, 64)
    }
    record_property("check", "fp32 on the GPU: batches of 1, 7, 64 rows = the token budget's batches, 1e-5")
    record_property("model", "default")
    record_property("max_abs_by_batch_size", differences)
    assert max(differences.values()) <= 1e-5, differences


@gpu
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_gpu_half_precision_vectors_keep_the_direction(sample, precision, record_property):
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip(f"{torch.cuda.get_device_name()} has no bf16")
    texts = sample[0]
    full = Encoder.from_pretrained(device="cuda").embed(texts, progress=False)
    half = Encoder.from_pretrained(device="cuda", precision=precision).embed(texts, progress=False)
    record_property("check", f"{precision} on the GPU (half weights): cosine to fp32 >= 0.999")
    record_property("model", "default")
    record_property("min_cos", smallest_cosine(half, full))
    assert smallest_cosine(half, full) >= 0.999


@gpu
def test_gpu_chunks_tokenized_ahead_give_the_vectors_of_one_chunk(sample, no_tf32, record_property):
    texts = sample[0] * 3
    on_gpu = Encoder.from_pretrained(device="cuda")
    on_gpu._chunk_texts = None
    whole = on_gpu.embed_with_report(texts, progress=False)
    on_gpu._chunk_texts = 37  # many chunks, each tokenized while the one before runs
    chunked = on_gpu.embed_with_report(texts, progress=False)
    record_property("check", "fp32 on the GPU: texts tokenized in chunks ahead of the passes = one chunk, 1e-5")
    record_property("model", "default")
    record_property("max_abs", largest_difference(chunked.vectors, whole.vectors))
    assert largest_difference(chunked.vectors, whole.vectors) <= 1e-5
    assert chunked.report.coverage == whole.report.coverage
    assert chunked.report.truncated_rows == whole.report.truncated_rows


@gpu
def test_gpu_int8_is_refused_in_one_line(record_property):
    record_property("check", "int8 on the GPU is refused in one line")
    with pytest.raises(InputError, match="int8' is a CPU option"):
        Encoder.from_pretrained(device="cuda", precision="int8")


@gpu
def test_gpu_out_of_memory_batches_are_split_under_a_real_memory_cap(no_tf32, monkeypatch, record_property):
    """torch's allocator capped (set_per_process_memory_fraction: past the cap it fails as a full card does) below
    what the planned passes take: they are split, the run completes, and the vectors are the uncapped ones."""
    on_gpu = Encoder.from_pretrained(device="cuda")
    device = on_gpu.device
    sentence = "a long and winding sentence about a film, its actors and its music "
    texts = [f"review {i}: " + sentence * 8 for i in range(256)]  # about 120 tokens each: two planned passes
    expected = on_gpu.embed(texts, progress=False)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    on_gpu.embed(texts, progress=False)
    working = torch.cuda.max_memory_allocated(device) - before  # the largest planned pass's memory
    torch.cuda.empty_cache()
    cap = torch.cuda.memory_reserved(device) + working // 4
    passes: list[tuple[int, bool]] = []  # (rows, ran) of every forward pass under the cap
    forward = on_gpu.network.forward_inputs

    def counted(inputs):
        try:
            out = forward(inputs)
        except torch.cuda.OutOfMemoryError:
            passes.append((inputs["input_ids"].shape[0], False))
            raise
        passes.append((inputs["input_ids"].shape[0], True))
        return out

    monkeypatch.setattr(on_gpu.network, "forward_inputs", counted)
    record_property("check", "out of GPU memory under a real cap: the passes split, the run completes, same vectors")
    record_property("model", "default")
    record_property("planned_pass_mib", round(working / 2**20, 1))
    record_property("cap_above_reserved_mib", round(working / 4 / 2**20, 1))
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(device).total_memory, device)
    try:
        found = on_gpu.embed(texts, progress=False)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        torch.cuda.empty_cache()
        record_property("passes_failed", sum(1 for _, ran in passes if not ran))
        record_property("passes_run", sum(1 for _, ran in passes if ran))
        record_property("largest_pass_run_rows", max((rows for rows, ran in passes if ran), default=0))
    record_property("max_abs_vs_uncapped", largest_difference(found, expected))
    assert any(not ran for _, ran in passes), "the cap did not bite: no pass ran out of memory"
    assert sum(rows for rows, ran in passes if ran) == len(texts)  # every row once
    np.testing.assert_allclose(found, expected, atol=1e-4)


@gpu
def test_a_run_trained_on_the_gpu_predicts_the_same_on_the_cpu(sample, tmp_path, no_tf32, record_property):
    texts, labels = sample
    classifier = TextClassifier(BertVectorizer(layers="last", device="cuda"), cv=3).fit(texts, labels)
    classifier.save_pretrained(tmp_path / "run")
    on_cpu = load_run(tmp_path / "run", device="cpu")
    record_property("check", "a feature classifier trained on the GPU predicts the same on the CPU, 1e-4")
    record_property("model", "default")
    record_property("max_abs_proba", largest_difference(on_cpu.predict_proba(texts), classifier.predict_proba(texts)))
    assert json.loads((tmp_path / "run" / "bertkit.json").read_text())["device"].startswith("cuda:")
    np.testing.assert_allclose(on_cpu.predict_proba(texts), classifier.predict_proba(texts), atol=1e-4)


@gpu
def test_fine_tuning_on_the_gpu_with_fp16_loads_on_the_cpu(tiny_dirs, tmp_path, record_property):
    from bertkit.tasks.finetune import finetune

    train = sentiment_file(tmp_path / "train.tsv", n=48)
    tuned = finetune(
        train,
        None,
        args=tiny_args(num_train_epochs=2, mixed_precision="fp16"),
        output_dir=tmp_path / "run",
        model=str(tiny_dirs["bert_cased"]),
        device="cuda",
    )
    record = json.loads((tmp_path / "run" / "bertkit.json").read_text())
    texts = ["a good film", "a bad one"]
    on_cpu = load_run(tmp_path / "run", device="cpu")
    record_property("check", "a run fine-tuned on the GPU in fp16, saved there, predicts the same on the CPU, 1e-3")
    record_property("model", "tiny")
    record_property("max_abs_proba", largest_difference(on_cpu.predict_proba(texts), tuned.predict_proba(texts)))
    assert record["device"].startswith("cuda:") and record["args"]["mixed_precision"] == "fp16"
    np.testing.assert_allclose(on_cpu.predict_proba(texts), tuned.predict_proba(texts), atol=1e-3)


@gpu
def test_amp_fine_tuning_on_the_gpu_learns_and_resumes(tiny_dirs, tmp_path, record_property):
    from bertkit.tasks.finetune import finetune

    data = sentiment_file(tmp_path / "train.tsv", n=128)
    args = tiny_args(num_train_epochs=8, early_stopping_patience=8, mixed_precision="fp16")
    options = dict(model=str(tiny_dirs["bert_cased"]), args=args, dev_share=0.25, device="cuda")

    def interrupt(state):
        if state.global_step == 30:  # mid-way through epoch 3 (96 training rows, 12 batches an epoch)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune(data, output_dir=tmp_path / "run", callbacks=[interrupt], **options)
    checkpoint = tmp_path / "run.partial" / "checkpoint-30"
    saved = sorted(path.name for path in checkpoint.iterdir()) if checkpoint.is_dir() else []
    finetune(data, output_dir=tmp_path / "run", resume=True, **options)
    record = json.loads((tmp_path / "run" / "bertkit.json").read_text())
    losses = [entry["train_loss"] for entry in record["training"]["history"]]
    record_property("check", "fp16 fine-tuning on the GPU learns (loss falls) and resumes from a mid-epoch checkpoint")
    record_property("model", "tiny")
    record_property("train_loss_by_epoch", [round(loss, 4) for loss in losses])
    record_property("dev_accuracy", record["metrics"].get("accuracy"))
    record_property("checkpoint_files", saved)
    assert "trainer_state.json" in saved, saved
    assert record["device"].startswith("cuda:") and record["args"]["mixed_precision"] == "fp16"
    assert len(losses) == 8 and losses[-1] < 0.5 * losses[0], losses


@gpu
def test_serve_on_the_gpu_answers_with_the_cpu_vectors(cpu_encoder, sample, record_property):
    import httpx
    from servers import Server

    texts = list(sample[0][:16])
    server = Server("--device", "cuda", "--max-inputs", "64")
    try:
        info = httpx.get(server.url + "/info", timeout=30).json()
        answer = server.post("/embed", {"inputs": texts})
    finally:
        code = server.stop()
    assert answer.status_code == 200, answer.text
    found = np.asarray(answer.json(), dtype=np.float32)
    record_property("check", "bertkit serve --device cuda: /embed answers the CPU's vectors, 1e-4")
    record_property("model", "default")
    record_property("device", info["device"])
    record_property("max_abs_vs_cpu", largest_difference(found, cpu_encoder.embed(texts, progress=False)))
    assert info["device"].startswith("cuda:") and info["concurrent_batches"] == 1 and code == 0
    np.testing.assert_allclose(found, cpu_encoder.embed(texts, progress=False), atol=1e-4)


@gpu
def test_ray_actors_on_a_gpu_embed_what_the_cpu_embeds(cpu_encoder, tmp_path, no_tf32, record_property):
    pytest.importorskip("ray", reason=NO_RAY)
    import pyarrow.parquet as pq
    import ray

    from bertkit.ray import embed_files

    texts = [f"text number {i} " + "more " * (i % 9) for i in range(300)]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # Ray finds the GPU
    try:
        summary = embed_files(str(tmp_path / "in.txt"), tmp_path / "out", gpus_per_actor=1)
    finally:
        ray.shutdown()
    assert summary.resources.device == "cuda" and summary.resources.actors == torch.cuda.device_count()
    table = pq.read_table(tmp_path / "out" / "in").sort_by("id")
    found = np.stack(table.column("vector").to_numpy(zero_copy_only=False))
    record_property("check", "Ray actors on the GPU embed what the CPU embeds, 1e-4")
    record_property("model", "default")
    record_property("max_abs_vs_cpu", largest_difference(found, cpu_encoder.embed(texts, progress=False)))
    np.testing.assert_allclose(found, cpu_encoder.embed(texts, progress=False), atol=1e-4)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["files"]["in"]["device"] == "cuda"
