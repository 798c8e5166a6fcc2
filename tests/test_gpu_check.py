"""benchmarks/gpu_check.sh, the one call that proves bertkit on a GPU machine, kept from rotting on CPUs: its dry run
takes every step at tiny sizes and writes the same files; the packaged model survives its fp16 trip; the summary
turns a failed test or a step past its time into FAIL lines and a failing exit status."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import shared_file

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
STEPS = ["install", "environment", "models", "pytest", "benchmark"]
CHECKS = {  # the GPU checks the dry run reports, skipped on a CPU
    "test_gpu_fp32_vectors_equal_the_cpu_and_plain_transformers",
    "test_gpu_vectors_do_not_depend_on_the_batch_size",
    "test_gpu_half_precision_vectors_keep_the_direction[fp16]",
    "test_gpu_half_precision_vectors_keep_the_direction[bf16]",
    "test_gpu_out_of_memory_batches_are_split_under_a_real_memory_cap",
    "test_fine_tuning_on_the_gpu_with_fp16_loads_on_the_cpu",
    "test_amp_fine_tuning_on_the_gpu_learns_and_resumes",
    "test_serve_on_the_gpu_answers_with_the_cpu_vectors",
}


@pytest.fixture
def gpu_models():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_models

        yield gpu_models
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.slow
def test_the_dry_run_takes_every_step_and_writes_the_log_and_the_figures(tmp_path):
    shared_file("sst2", "train.tsv")
    out = tmp_path / "out"
    # nothing carried, as in CI: no wheels (a skip), the default model a MiniLM-shaped one with random weights
    env = dict(os.environ, PYTHON=sys.executable, BERTKIT_GPU_CARRY=str(tmp_path / "nothing-carried"))
    done = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", str(out)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert sorted(path.name for path in out.iterdir()) == [
        "bench.json",
        "gpu_check.json",
        "gpu_check.log",
        "pytest.xml",
    ]
    log = (out / "gpu_check.log").read_text()
    assert log == done.stdout
    assert "SKIP  step install: 0s no wheels in gpu_carry/wheels" in log
    assert log.splitlines()[-1].startswith("==== PASS: 4 passed, 0 failed,")

    report = json.loads((out / "gpu_check.json").read_text())
    assert report["mode"] == "dry-run" and report["result"] == "PASS" and report["device"].startswith("cpu")
    assert {"python", "torch", "transformers", "sentence-transformers", "numpy"} <= set(report["versions"])
    assert report["models"]["default"].startswith("MiniLM-shaped (1x384, random weights")
    assert report["models"]["base"] == "BERT-base-shaped (1x768, random weights)"
    assert [s["step"] for s in report["steps"]] == STEPS
    assert [s["status"] for s in report["steps"]] == ["SKIP", "PASS", "PASS", "PASS", "PASS"]
    imports = {r["name"]: r["status"] for r in report["environment"] if r["name"].startswith("import ")}
    assert imports["import bertkit"] == imports["import bertkit.serve.app"] == "PASS"
    assert {r["name"] for r in report["environment"]} >= {"torch", "transformers", "scikit-learn", "fastapi"}
    checks = {c["test"]: c for c in report["checks"]}
    assert set(checks) >= CHECKS
    if not torch.cuda.is_available():
        assert all(checks[name]["status"] == "SKIP" and "needs a CUDA GPU" in checks[name]["note"] for name in CHECKS)
    bench = report["benchmark"]
    assert {row["model"] for row in bench["embedding"]} == {"default (1x384)", "base-shaped (1x768)"}
    assert len(bench["embedding"]) == 2 * 2 * 8 and [row["way"] for row in bench["finetuning"]] == [  # models, corpora
        "transformers Trainer (fp32)",
        "bertkit finetune (fp32)",
    ]
    servers = {row["server"].split(" (")[0].split(" --")[0]: row for row in bench["serving"]}
    assert set(servers) == {"bertkit serve", "naive FastAPI + sentence-transformers"}, bench["serving"]
    assert all(
        row["per_second"] > 0 and row["errors"] == 0 and row["p99_ms"] >= row["p50_ms"] for row in servers.values()
    )
    fp32 = [row for row in bench["embedding"] if row["way"] == "bertkit fp32"]
    assert all(row["min_cos"] >= 0.9999 and row["per_second"] > 0 for row in fp32)
    # the printed table, as benchmarks/gpu.py prints it on a GPU
    lines = log.splitlines()
    for model in ("default (1x384)", "base-shaped (1x768)"):
        for corpus in ("SST-2 train (16)", "synthetic (8)"):
            prefix = f"{model} / {corpus} / "
            rows = {re.split(r"\s{2,}", line[len(prefix) :])[0]: line for line in lines if line.startswith(prefix)}
            # tokenization alone, the naive loop, sentence-transformers at 3 batch sizes, bertkit at 3 precisions
            assert len(rows) == 8, rows
            for way, line in rows.items():
                # texts/s, range, x ST, x naive, min cos, GiB and GPU busy (both '-' on a CPU)
                if way.startswith("bertkit fp16"):
                    assert "refused here" in line and "runs on a GPU" in line
                elif way.startswith("bertkit bf16"):
                    assert "refused here" in line or float(line.split()[-3]) >= 0.99
                elif way.startswith("bertkit tokenization"):
                    assert float(line[len(prefix) + len(way) :].split()[0]) > 0 and line.split()[-3] == "-"
                else:  # naive loop, sentence-transformers and bertkit fp32: the same vectors
                    assert float(line.split()[-3]) >= 0.9999, line
    trainer = next(line for line in lines if line.startswith("transformers Trainer (fp32)"))
    ours = next(line for line in lines if line.startswith("bertkit finetune (fp32)"))
    # examples/s, range, x Trainer, dev accuracy, GiB (- on a CPU)
    assert float(trainer.split()[-3]) == 1.0 and float(ours.split()[-3]) > 0
    assert 0 <= float(trainer.split()[-2]) <= 1 and 0 <= float(ours.split()[-2]) <= 1 and ours.split()[-1] == "-"
    assert report["targets"] == [{"target": "speed targets", "status": "SKIP", "figure": bench["targets"][0]["figure"]}]


def test_the_packaged_model_travels_in_fp16_and_comes_back_as_fp32(gpu_models, tmp_path):
    from safetensors.torch import load_file

    from bertkit.encoder.models import default_model_dir

    gpu_models.pack_default_model(tmp_path / "carried")
    assert (tmp_path / "carried" / "model.safetensors").stat().st_size < 0.51 * (
        default_model_dir() / "model.safetensors"
    ).stat().st_size
    back = gpu_models.unpack_default_model(tmp_path / "carried", tmp_path / "back")
    original, returned = load_file(default_model_dir() / "model.safetensors"), load_file(back / "model.safetensors")
    assert original.keys() == returned.keys()
    for name, tensor in original.items():
        assert returned[name].dtype == tensor.dtype
        torch.testing.assert_close(returned[name], tensor, rtol=1e-3, atol=1e-4)
    for name in gpu_models.MODEL_FILES:
        assert (back / name).read_bytes() == (default_model_dir() / name).read_bytes()


def test_a_failed_check_and_a_step_past_its_time_fail_the_summary(gpu_models, tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    (work / "steps.tsv").write_text("install\t0\t2.5\t120\t\npytest\t124\t210.0\t210\t\n")
    (work / "models.json").write_text(json.dumps({"default": {"label": "a model"}}))
    (out / "pytest.xml").write_text(
        '<testsuites><testsuite name="pytest"><testcase classname="tests.test_gpu" name="test_one" time="1.5">'
        '<properties><property name="check" value="one check"/><property name="model" value="default"/>'
        '<property name="min_cos" value="0.9981"/></properties>'
        '<failure message="assert 0.9981 &gt;= 0.999">trace</failure></testcase></testsuite></testsuites>'
    )
    assert gpu_models.summary(out, work, "gpu", 0.0) == 1
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["result"] == "FAIL"
    assert report["steps"][1] == {
        "step": "pytest",
        "status": "FAIL",
        "seconds": 210.0,
        "limit_s": 210,
        "note": "timed out after 210s",
    }
    assert report["checks"] == [
        {
            "check": "one check",
            "test": "test_one",
            "status": "FAIL",
            "seconds": 1.5,
            "model": "a model",
            "figures": {"min_cos": 0.9981},
            "note": "assert 0.9981 >= 0.999",
        }
    ]
    printed = capsys.readouterr().out
    assert "FAIL  one check: min_cos=0.998; assert 0.9981 >= 0.999 [a model]" in printed
    assert "FAIL  step pytest: 210s timed out after 210s" in printed
