import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the suite checks bertkit's behaviours on torch, the engine every install has; test_engines.py runs OpenVINO's
os.environ.setdefault("BERTKIT_ENGINE", "torch")
# in a pytest-xdist worker (`-n 2`: two on two cores) one torch thread, for it and the commands it starts: two pools
# of two threads each on two cores made the suite slower than one process. Commands that ask for two threads (the
# servers' --threads 2) then share the cores with the other worker: OpenMP threads that wait passively, rather than
# spinning, keep that sharing cheap (the schemathesis test took 150 s beside the int8 and engine tests, 50 s so)
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# bertkit's own cache (embeddings, int8 calibrations, OpenVINO graphs) in a folder of this run, removed after it: the
# suite writes only under temporary folders. The xdist workers and the commands they start inherit it.
if not os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("BERTKIT_CACHE"):
    import atexit
    import shutil
    import tempfile

    os.environ["BERTKIT_CACHE"] = tempfile.mkdtemp(prefix="bertkit-cache-")
    atexit.register(shutil.rmtree, os.environ["BERTKIT_CACHE"], True)
sys.path.insert(0, str(Path(__file__).parent))

if sys.version_info < (3, 11, 8):
    # CPython before 3.11.8 keeps ast.parse's recursion count in one per-interpreter global (gh-106905): when a
    # garbage collection in the middle of a parse runs Python code and another thread parses meanwhile, the first
    # ends in "SystemError: AST constructor recursion depth mismatch" (seen once in CI, in the schemathesis test,
    # where hypothesis parses sources to describe lambdas while other threads of this process run). One at a time.
    import ast
    import functools
    import threading

    _parse, _parse_lock = ast.parse, threading.Lock()

    @functools.wraps(_parse)
    def _parse_one_at_a_time(*args, **kwargs):
        with _parse_lock:
            return _parse(*args, **kwargs)

    ast.parse = _parse_one_at_a_time

import tiny_models  # noqa: E402

try:  # generated-input tests: a quick profile for every run, a long one on demand (--hypothesis-profile=long)
    from hypothesis import settings

    settings.register_profile("ci", max_examples=40)
    settings.register_profile("long", max_examples=2000)
    settings.load_profile("ci")
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    pass

# BERTKIT_LONG_TESTS=1: the fault tests at full strength (more kills, a longer soak); CI runs the short form
LONG_TESTS = os.environ.get("BERTKIT_LONG_TESTS", "") == "1"

SHARED_DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


# the files that take longest (in one process, 2026-12-05: 20-85 s each), first, so that two workers end together
LONGEST_FIRST = ("ray", "test_serve_faults", "test_docs", "test_explain", "test_gpu_check", "test_notebooks")
LONGEST_FIRST += ("test_finetune", "test_serve", "test_stream", "test_wheel", "test_serve_fuzz", "test_finetune_engine")
LONGEST_FIRST += ("test_static",)


# measured promises of latency: with the box to themselves (a neighbouring worker's load is not the server's)
ALONE = ("test_serve_heavy", "test_serve_ray")  # the Ray Serve kill test: 16 clients, 30 s, a replica restarting


def file_group(nodeid: str) -> str:
    """The group of a test under `-n 2 --dist loadfile`: its file, one for the Ray files (one Ray head for them)."""
    name = Path(nodeid.split("::")[0]).stem
    return "ray" if name.startswith("test_ray") else name


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's `loadfile` with the Ray files as one, in the collection's order (the longest first), and the
    ALONE files last, once every other worker is idle.

    A scheduler of our own rather than `--dist loadgroup`, whose groups pytest 9.2 drops (pytest-xdist issue 1386)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def __init__(self, config, log=None) -> None:
            super().__init__(config, log)
            self.waiting: set = set()  # workers that wait for the others before taking an ALONE file

        def _split_scope(self, nodeid: str) -> str:
            return file_group(nodeid)

        def _reschedule(self, node) -> None:
            # an ALONE file is next only when nothing else is left: the others finish their queues and leave (a
            # worker runs its last test only once told what follows), then the asking worker takes it
            others = [other for other in self.assigned_work if other is not node]
            if not node.shutting_down and self.workqueue and next(iter(self.workqueue)) in ALONE and others:
                for other in others:
                    if not other.shutting_down:
                        other.shutdown()
                self.waiting.add(node)
                return
            super()._reschedule(node)

        def remove_node(self, node):
            crashed = super().remove_node(node)
            for waiting in list(self.waiting):
                self.waiting.discard(waiting)
                self._reschedule(waiting)
            return crashed

    config.option.loadscopereorder = False  # (3.8) xdist would order the files by their number of tests
    return ByFile(config, log)


def pytest_collection_modifyitems(config, items):
    """The longest files first; tests marked `gpu` skip, with the reason, where torch sees no CUDA GPU."""
    import torch

    rank = {name: index for index, name in enumerate(LONGEST_FIRST)} | {name: 1000 for name in ALONE}
    items.sort(key=lambda item: rank.get(file_group(item.nodeid), len(LONGEST_FIRST)))

    if torch.cuda.is_available():
        return
    build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU; torch {torch.__version__} ({build}) sees none here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def shared_file(*parts: str) -> Path:
    """A file from ../shared/data; when absent, skip saying why, except in CI (CI=true/1/yes), where it is a failure."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.is_file():
        reason = f"shared data {path} is absent (set BERTKIT_DATA to the folder holding sst2/ and conll2003/)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{reason}; in CI the data must be there, so this is a failure, not a skip")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def encoder():
    from bertkit import Encoder

    return Encoder.from_pretrained()


@pytest.fixture(scope="session")
def hf_default():
    """Plain transformers model + tokenizer for the packaged default, the reference for equality tests."""
    from transformers import AutoModel, AutoTokenizer

    from bertkit.encoder.models import default_model_dir

    path = default_model_dir()
    model = AutoModel.from_pretrained(path)
    model.eval()
    return model, AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="session", autouse=True)
def ray_temp_dir():
    """Ray's sessions (the test head's and a job's own local cluster) go in a folder of this run, removed after it.

    A short name: Ray's socket paths must stay under 108 characters."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="bertkit-ray-")
    os.environ["RAY_TMPDIR"] = folder
    yield
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {
        "bert_cased": tiny_models.tiny_bert(root / "bert_cased", cased=True),
        "distilbert": tiny_models.tiny_distilbert(root / "distilbert"),
        "electra": tiny_models.tiny_electra(root / "electra"),
        "roberta": tiny_models.tiny_roberta(root / "roberta"),
    }


def run_cli(monkeypatch, capsys, *args):
    """Run `bertkit ARGS` in this process: (exit code, stdout, stderr)."""
    from bertkit import cli

    monkeypatch.setattr(sys, "argv", ["bertkit", *map(str, args)])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    captured = capsys.readouterr()
    return exit_info.value.code or 0, captured.out, captured.err


LOAD_LOG = "BERTKIT_TEST_LOAD_LOG"  # where test_ray.record_loads logs each model load in a Ray worker


@pytest.fixture(scope="session")
def head(tmp_path_factory):
    """A Ray head on 127.0.0.1 with 2 CPUs (`ray start --head --block`, stopped by its pid), and this test
    process connected to it with a worker hook that logs every model load; one for the session (a head takes ~9 s to
    start and stop)."""
    import signal
    import socket
    import subprocess
    import time

    ray = pytest.importorskip("ray", reason="the Ray engine needs the extra: pip install 'bertkit[ray]'")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("loads") / "loads.txt"
    log.touch()
    head_log, deadline = log.with_name("head.log"), time.monotonic() + 120
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ray"),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            "--num-cpus=2",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        stdout=head_log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        while "Ray runtime started" not in head_log.read_text():  # wait until the head says it runs
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"`ray start --head` did not start: {head_log.read_text()[-2000:]}")
            time.sleep(0.2)
        from bertkit.ray.files import connect

        connect(address)  # sets token mode the way `bertkit embed --address` does; then reconnect with the hook
        ray.shutdown()
        ray.init(
            address=address,
            log_to_driver=False,
            runtime_env={
                "worker_process_setup_hook": "test_ray.record_loads",
                "env_vars": {LOAD_LOG: str(log), "PYTHONPATH": str(Path(__file__).parent)},
            },
        )
        yield {"address": address, "loads": log}
    finally:
        ray.shutdown()
        os.killpg(process.pid, signal.SIGTERM)  # --block: the head's processes stop with it
        try:
            process.wait(timeout=1)
        except subprocess.TimeoutExpired:  # a graceful stop takes Ray ~30 s (5 s never sufficed); nothing is kept
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
