"""bf16 only where the CPU does it natively (cosine bound vs fp32), and the throughput benchmark's arithmetic."""

import numpy as np
import pytest
from test_bench import bench

import bertkit.encoder.precision as precision
from bertkit import Encoder, InputError

RAW_MEAN, compare, cosines, forward_flops = bench.RAW_MEAN, bench.compare, bench.cosines, bench.forward_flops
matmul_peak_gflops, naive_loop, parse_precisions = bench.matmul_peak_gflops, bench.naive_loop, bench.parse_precisions
run_benchmark = bench.run_benchmark

TEXTS = ["I love Korea", "EU rejects German call to boycott British lamb .", "the movie was great", ""]


def test_bf16_is_refused_without_native_support(monkeypatch):
    monkeypatch.setattr(precision, "fast_bf16_cpu", lambda: False)
    with pytest.raises(InputError, match="no native bf16.*precision='fp32'"):
        Encoder.from_pretrained(precision="bf16")
    with pytest.raises(InputError, match="precision='fp16'"):
        Encoder.from_pretrained(precision="fp16")


def test_bf16_autocast_path_stays_close_to_fp32(monkeypatch, tiny_dirs):
    monkeypatch.setattr(precision, "fast_bf16_cpu", lambda: True)  # tiny model: cheap even where bf16 is emulated
    fp32 = Encoder.from_pretrained(str(tiny_dirs["bert_cased"]))
    bf16 = Encoder.from_pretrained(str(tiny_dirs["bert_cased"]), precision="bf16")
    a, b = fp32.embed(TEXTS), bf16.embed(TEXTS)
    assert b.dtype == np.float32
    assert 0 < np.abs(a - b).max() < 0.1  # really computed in bf16, and close
    assert compare(a, b)[1] >= 0.999


@pytest.mark.skipif(not precision.fast_bf16_cpu(), reason="this CPU has no native bf16 (AMX / AVX512-BF16)")
def test_bf16_default_model_cosine_bound(encoder):
    bf16 = encoder.with_options(precision="bf16")
    assert compare(encoder.embed(TEXTS), bf16.embed(TEXTS))[1] >= 0.9999


def test_forward_flops_by_hand(tiny_dirs):
    encoder = Encoder.from_pretrained(str(tiny_dirs["bert_cased"]))  # 2 layers, hidden 32, intermediate 64
    per_token = 2 * (4 * 32 * 32 + 2 * 32 * 64)
    assert forward_flops(encoder, [5, 3]) == 2 * (per_token * 8 + 4 * 32 * (25 + 9))


def test_matmul_peak_is_measured():
    assert 1 < matmul_peak_gflops(sizes=(256,), repeats=1) < 1e5


def test_naive_loop_matches_bertkit(encoder):
    np.testing.assert_allclose(naive_loop(encoder, TEXTS), encoder.embed(TEXTS, RAW_MEAN), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_run_benchmark_prints_the_table(encoder):
    lines = []
    rows = run_benchmark(encoder, TEXTS * 5, repeats=1, batch_size=8, echo=lines.append)
    text = "\n".join(lines)
    assert "GFLOP per sentence" in text and "bound" in text and "where bertkit fp32's time goes" in text
    fp32 = next(r for r in rows if r.name.startswith("bertkit fp32"))
    assert len(fp32.seconds) == 1 and fp32.seconds[0] > 0
    np.testing.assert_allclose(fp32.vectors, encoder.embed(TEXTS * 5, RAW_MEAN), atol=1e-5, rtol=0)
    naive = next(r for r in rows if r.name.startswith("tutorial"))
    assert compare(fp32.vectors, naive.vectors)[0] < 1e-5


def test_parse_precisions_keeps_fp32_as_the_reference():
    assert parse_precisions("bf16, int8") == ("fp32", "bf16", "int8")
    assert parse_precisions("int8,fp32,int8") == ("fp32", "int8")
    assert parse_precisions("fp16") == ("fp32", "fp16")  # a GPU's; on a CPU its row says why it is refused
    with pytest.raises(InputError, match="precision 'fp8': valid values are fp32, bf16, fp16, int8"):
        parse_precisions("fp32,fp8")


@pytest.mark.slow
def test_run_benchmark_puts_int8_beside_fp32_with_its_fidelity(encoder, monkeypatch, tmp_path):
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path))
    lines = []
    rows = run_benchmark(
        encoder, TEXTS * 5, repeats=1, batch_size=8, include_peers=False, precisions="int8", echo=lines.append
    )
    assert [r.name.split(" (")[0] for r in rows] == [
        "bertkit fp32",
        "bertkit int8 per-token, smoothed",
    ]  # bf16 not asked
    fp32, int8 = rows
    found = cosines(fp32.vectors, int8.vectors)
    assert 0.99 <= found.min() < 1 - 1e-7  # close to fp32, and really computed another way
    lines = "\n".join(lines).splitlines()
    header = next(line for line in lines if line.startswith("way"))
    assert header.split()[-2:] == ["cos_p1", "cos_med"]
    row = next(line for line in lines if line.startswith("bertkit int8"))
    assert float(row.split()[-1]) == pytest.approx(np.median(found), abs=1e-5)
    assert float(row.split()[-3]) == pytest.approx(found.min(), abs=1e-5)
