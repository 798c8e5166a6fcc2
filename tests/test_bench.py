"""benchmarks/bench.py (`bertkit bench` until 0.x): the printed table has the rows asked for, hand-checkable counts
and FLOPs, and sane numbers. Other tests take the script's functions from here (`from test_bench import bench`)."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench.py"


def load_script():
    """benchmarks/bench.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("bertkit_bench_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = load_script()


def run(capsys, *args):
    """`python benchmarks/bench.py ARGS` in this process: (exit status, stdout, stderr)."""
    try:
        bench.main([str(arg) for arg in args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


TEXTS = [
    "I love Korea",
    "EU rejects German call to boycott British lamb .",
    "the movie was great",
    "a dull , lifeless mess",
    "a visually stunning rumination on love",
    "",
]
HIDDEN, INNER, LAYERS = 384, 1536, 6  # the packaged default model


def columns(header: str, line: str, name: str) -> dict[str, str]:
    """The row's values by header name; robust to columns added after 'way' (the row name may hold spaces)."""
    names = header.replace("min cos", "min_cos").split()[1:]
    values = line[len(name) :].split()
    assert len(values) == len(names), (header, line)
    return dict(zip(names, values))


@pytest.mark.slow
def test_bench_prints_the_table_with_sane_numbers(capsys, tmp_path, hf_default):
    source = tmp_path / "texts.tsv"
    source.write_text("".join(f"{t}\t0\n" for t in TEXTS), encoding="utf-8")
    code, out, err = run(capsys, source, "--text-column", "0", "--no-peers", "--repeats", "1", "--batch-size", "4")
    assert code == 0, err
    lines = out.splitlines()

    counts = [len(hf_default[1](t)["input_ids"]) for t in TEXTS]  # tokens with [CLS]/[SEP], by plain transformers
    assert lines[0].startswith(f"{len(TEXTS)} texts, {sum(counts)} tokens (with specials)")
    assert f"({LAYERS} layers, hidden {HIDDEN})" in lines[0]
    per_token = 2 * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * INNER)
    flops = LAYERS * (per_token * sum(counts) + 4 * HIDDEN * sum(c * c for c in counts))
    facts = re.match(
        r"([\d.]+) GFLOP per sentence on cpu; matmul peak fp32 (\d+) GFLOP/s → bound (\d+) sentences/s", lines[1]
    )
    assert facts, lines[1]
    gflop, peak, bound = float(facts[1]), float(facts[2]), float(facts[3])
    assert gflop == pytest.approx(flops / len(TEXTS) / 1e9, abs=5e-4)
    assert 1 < peak < 1e5  # a real measurement, not a placeholder
    assert bound == pytest.approx(len(TEXTS) * peak * 1e9 / flops, rel=0.02, abs=1)

    header = next(line for line in lines if line.startswith("way"))
    assert "sent/s" in header and "min cos" in header
    assert not any(line.startswith(("tutorial", "sentence-transformers")) for line in lines)  # --no-peers
    fp32_line = next(line for line in lines if re.match(r"bertkit.*\bfp32\b", line))
    name = re.match(r"bertkit[^)]*\)", fp32_line)[0]
    assert "batch 4" in name
    fp32 = columns(header, fp32_line, name)
    speed = float(fp32["sent/s"])
    assert speed > 0
    low, high = (float(x) for x in fp32["range"].split("–"))
    assert low == high == speed  # one repeat: the range is that one measurement
    assert fp32["×ST"] == "-" and fp32["×naive"] == "-"  # no peers timed, no ratios invented
    assert 0 <= float(fp32["bound"].rstrip("%")) <= 100  # below the FLOP bound measured in the same run
    assert float(fp32["max|Δ|"]) == 0 and float(fp32["min_cos"]) == pytest.approx(1, abs=1e-5)  # the reference row
    for line in lines:  # any other bertkit row (bf16, int8, ...) stays close to fp32 or says why it is absent
        if line.startswith("bertkit") and line != fp32_line:
            other_name = re.match(r"bertkit[^)]*\)|bertkit \S+", line)[0]
            if "refused" in line or "skipped" in line:
                continue
            assert float(columns(header, line, other_name)["min_cos"]) >= 0.95, line  # bf16/int8: close, not equal
    assert any(line.startswith("where bertkit fp32's time goes") for line in lines)


@pytest.mark.parametrize("repeats", ["0", "-2"])
def test_bench_bad_repeats_is_one_line(capsys, tmp_path, repeats):
    source = tmp_path / "texts.tsv"
    source.write_text("I love Korea\t1\n", encoding="utf-8")
    code, out, err = run(capsys, source, "--text-column", "0", "--repeats", repeats, "--no-peers")
    assert code == 2 and out == ""
    assert err.startswith("error: --repeats must be at least 1") and err.count("\n") == 1, err


@pytest.mark.slow
def test_bench_bad_repeats_from_a_fresh_process_prints_only_that_line(tmp_path):
    """What a user sees: nothing but the error on stderr, even from imports made on the way (a fresh interpreter)."""
    source = tmp_path / "texts.tsv"
    source.write_text("I love Korea\t1\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(source), "--text-column", "0", "--repeats", "0"],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "error: --repeats must be at least 1 (3 or more for a median worth reporting).\n"


def test_bench_refuses_a_missing_gpu_in_one_line(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    source = tmp_path / "texts.txt"
    source.write_text("one text\nanother text\n")
    code, out, err = run(capsys, source, "--limit", "8", "--repeats", "1", "--no-peers", "--device", "cuda")
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    assert "cuda" in err and "no CUDA GPU" in err
