"""`bertkit serve --ray`: the same service as a Ray Serve application, on a real local Ray cluster, through Ray Serve's
HTTP proxy, with the real clients: the same vectors and answers as the library, the same OpenAPI document as
`bertkit serve`, its key and Host checks; a replica killed under load loses no request and comes back; Ctrl-C leaves
nothing behind; every bad input is one line before anything starts."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections import Counter

import httpx
import numpy as np
import pytest
from conftest import run_cli
from servers import Server, free_port
from test_finetune import tiny_args
from test_pairs import COLOURS, pair_file

pytest.importorskip("ray.serve", reason="bertkit serve --ray needs Ray Serve: pip install 'bertkit[ray]'")
psutil = pytest.importorskip("psutil")

KEY = "ray-serve-key-0123456789"
TEXTS = ["I love Korea", "a visually stunning rumination on love", "the plot is a mess"]
DOCUMENTS = ["blue thing", "red thing", "green", "a red red film", "the movie was big"]


def ready_replicas(url: str) -> int:
    try:
        return httpx.get(url + "/health", timeout=5).json().get("replicas", {}).get("ready", 0)
    except (httpx.HTTPError, ValueError):
        return 0


def wait_for_replicas(url: str, count: int, seconds: float) -> float:
    """Seconds until /health says `count` replicas are ready (fails past `seconds`)."""
    started = time.monotonic()
    while ready_replicas(url) != count:
        assert time.monotonic() - started < seconds, f"{count} replicas were not ready within {seconds:.0f} s"
        time.sleep(0.5)
    return time.monotonic() - started


def ray_processes(temp_dir: str) -> list[str]:
    """The processes of the Ray cluster whose session lives in `temp_dir`."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if temp_dir in line:
            found.append(line[:200])
    return found


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    """A tiny pair run that scores texts naming red (served with --run rr=DIR, for Cohere's client)."""
    import tiny_models

    from bertkit.tasks.finetune import finetune

    root = tmp_path_factory.mktemp("ray-serve-run")
    model = str(tiny_models.tiny_bert(root / "bert", extra_words=tuple(COLOURS)))
    arguments = tiny_args(num_train_epochs=2, max_length=24)
    finetune(
        pair_file(root / "s.tsv", scores=True),
        pair_file(root / "sd.tsv", n=32, seed=1, scores=True),
        output_dir=root / "scores",
        task="pair",
        model=model,
        args=arguments,
    )
    return root / "scores"


@pytest.fixture(scope="module")
def cluster(reranker):
    """`bertkit serve --ray --replicas 2 --replica-cpus 1` on its own local Ray cluster (its own temp folder)."""
    temp_dir = tempfile.mkdtemp(prefix="bk-rs-")  # short: Ray's socket paths stay under 108 characters
    env = {"RAY_TMPDIR": temp_dir, "BERTKIT_TEST_KEY": KEY}
    args = ("--ray", "--replicas", "2", "--replica-cpus", "1", "--run", f"rr={reranker}")
    server = Server(*args, key=KEY, env=env, cold=True, timeout=240)
    try:
        wait_for_replicas(server.url, 2, 180)
        yield server, temp_dir
    finally:
        server.stop(timeout=120)


@pytest.mark.slow
def test_the_clients_get_the_librarys_vectors_and_answers_through_ray_serves_proxy(cluster, encoder, reranker):
    import cohere
    from huggingface_hub import InferenceClient, constants
    from openai import OpenAI

    from bertkit.tasks.load import load_run

    server, _ = cluster
    expected = encoder.embed(TEXTS)
    got = server.post("/embed", {"inputs": TEXTS})
    assert got.status_code == 200, got.text
    np.testing.assert_allclose(np.array(got.json()), expected, atol=1e-6, rtol=0)
    openai = OpenAI(base_url=server.url + "/v1", api_key=KEY).embeddings.create(input=TEXTS, model="default")
    np.testing.assert_allclose(np.array([row.embedding for row in openai.data]), expected, atol=1e-6, rtol=0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "is_offline_mode", lambda: False)  # the tests run offline; this server is local
        hub = InferenceClient(server.url, token=KEY).feature_extraction(TEXTS[0])
    np.testing.assert_allclose(np.asarray(hub).reshape(1, -1), expected[:1], atol=1e-6, rtol=0)
    ranked = load_run(reranker).rank("my red film", DOCUMENTS, top_k=3)
    answer = cohere.ClientV2(api_key=KEY, base_url=server.url).rerank(
        model="rr", query="my red film", documents=DOCUMENTS, top_n=3
    )
    assert [r.index for r in answer.results] == [i for i, _ in ranked]
    assert [r.relevance_score for r in answer.results] == pytest.approx([s for _, s in ranked], abs=1e-6)


@pytest.mark.slow
def test_the_openapi_document_the_key_and_the_host_checks_are_bertkit_serves(cluster, reranker, monkeypatch):
    from bertkit.serve.app import build_app
    from bertkit.serve.settings import ServeSpec

    server, _ = cluster
    monkeypatch.setenv("BERTKIT_TEST_KEY", KEY)
    plain, _ = build_app(ServeSpec(runs=(f"rr={reranker}",), api_key_env="BERTKIT_TEST_KEY"))
    document = httpx.get(server.url + "/openapi.json", headers=server.headers, timeout=30)
    assert document.status_code == 200 and document.json() == json.loads(json.dumps(plain.openapi()))
    missing = httpx.post(server.url + "/embed", json={"inputs": "x"}, timeout=30)
    assert missing.status_code == 401 and "missing API key" in missing.json()["error"]
    wrong = httpx.post(server.url + "/embed", json={"inputs": "x"}, headers={"Authorization": "Bearer no"}, timeout=30)
    assert wrong.status_code == 401
    foreign = httpx.get(server.url + "/info", headers={**server.headers, "Host": "evil.example"}, timeout=30)
    assert foreign.status_code == 403 and foreign.json()["error_type"] == "host_not_allowed"
    huge = httpx.post(server.url + "/embed", content=b"x" * 2_000_001, headers=server.headers, timeout=30)
    assert huge.status_code == 413 and "--max-body-bytes" in huge.json()["error"]  # refused at the ingress
    page = httpx.get(server.url + "/", timeout=30)  # the explainer page, through the proxy and the ingress
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html") and "<html" in page.text
    health = httpx.get(server.url + "/health", timeout=30).json()  # no key needed, and it counts the replicas
    assert health["status"] == "ok" and health["replicas"] == {"ready": 2, "wanted": 2}


@pytest.mark.slow
def test_a_replica_killed_under_load_loses_no_request_and_comes_back(cluster, encoder):
    """16 keep-alive clients for 30 s; one model replica SIGKILLed after 8 s: every request is answered (200, or 503
    with Retry-After), none hangs, every vector is the library's, and Ray Serve has two replicas again within 30 s."""
    server, _ = cluster
    expected = {text: vector for text, vector in zip(TEXTS, encoder.embed(TEXTS))}
    outcomes, wrong, stop = Counter(), [], time.monotonic() + 30

    def client(number: int) -> None:
        with httpx.Client(headers=server.headers, timeout=30) as session:  # one connection, kept alive
            while time.monotonic() < stop:
                text = TEXTS[number % len(TEXTS)]
                try:
                    answer = session.post(server.url + "/embed", json={"inputs": text})
                except httpx.HTTPError as error:
                    outcomes[type(error).__name__] += 1
                    continue
                retry = answer.status_code == 503 and "retry-after" in answer.headers
                outcomes["503 with Retry-After" if retry else str(answer.status_code)] += 1
                if answer.status_code == 200 and np.abs(np.array(answer.json()[0]) - expected[text]).max() > 1e-6:
                    wrong.append(text)

    clients = [threading.Thread(target=client, args=(n,)) for n in range(16)]
    for thread in clients:
        thread.start()
    time.sleep(8)
    replicas = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "ServeReplica:bertkit:bertkit-model" in " ".join(p.info["cmdline"] or [])
    ]
    assert len(replicas) == 2
    replicas[0].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    for thread in clients:
        thread.join(60)
    assert not any(thread.is_alive() for thread in clients), "a request hung"
    assert set(outcomes) <= {"200", "503 with Retry-After"} and outcomes["200"] > 100, outcomes
    assert not wrong
    back = wait_for_replicas(server.url, 2, max(1, 30 - (time.monotonic() - killed)) + 1)
    print(f"{dict(outcomes)}; two replicas again {time.monotonic() - killed:.0f} s after the kill ({back:.0f})")


@pytest.mark.slow
def test_a_replica_larger_than_the_cluster_is_refused_before_anything_is_deployed(cluster):
    server, temp_dir = cluster
    import subprocess

    address = re.search(r"Ray cluster at (\S+?);", server.output()).group(1)
    env = {**os.environ, "RAY_TMPDIR": temp_dir}
    command = [sys.executable, "-m", "bertkit.cli", "serve", "--ray", "--address", address, "--replica-cpus", "64"]
    done = subprocess.run([*command, "--port", str(free_port())], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0
    assert "--replica-cpus 64: the cluster's largest node has 2 CPUs; a replica must fit on one." in done.stderr
    assert ready_replicas(server.url) == 2  # the running application is untouched


@pytest.mark.slow
def test_ctrl_c_stops_the_application_and_the_cluster_it_started_and_nothing_else(cluster):
    """Last in the module: SIGINT to the cluster's server (its in-flight requests drain, then its Ray goes)."""
    server, temp_dir = cluster
    assert ray_processes(temp_dir)
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(120) == 0, server.output()[-2000:]
    assert "bertkit serve --ray: stopped." in server.output()
    deadline = time.monotonic() + 30
    while ray_processes(temp_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not ray_processes(temp_dir), ray_processes(temp_dir)


@pytest.mark.parametrize(
    "args, message",
    [
        (("--ray", "--replicas", "0"), "--replicas 0"),
        (("--ray", "--autoscale", "3:1"), "--autoscale 3:1: give MIN:MAX replicas, 1 ≤ MIN ≤ MAX"),
        (("--ray", "--replica-cpus", "0"), "--replica-cpus 0: give more than 0"),
        (("--replicas", "2"), "add --ray to use them"),
    ],
)
def test_bad_ray_flags_are_one_line_before_anything_starts(args, message, monkeypatch, capsys):
    code, _, err = run_cli(monkeypatch, capsys, "serve", *args)
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err


def test_without_ray_serve_the_flag_names_the_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray.serve", None)
    code, _, err = run_cli(monkeypatch, capsys, "serve", "--ray")
    assert code != 0 and "bertkit serve --ray needs Ray Serve: pip install 'bertkit[ray]'." in err


def test_print_config_writes_what_serve_deploy_reads_and_builds_the_same_application(monkeypatch, capsys, tmp_path):
    from ray.serve.schema import ServeDeploySchema

    from bertkit.serve.cluster import application

    monkeypatch.chdir(tmp_path)
    args = ("--ray", "--autoscale", "1:4", "--replica-cpus", "0.5", "--max-inputs", "16", "--print-config")
    code, out, err = run_cli(monkeypatch, capsys, "serve", *args, "--port", "8099", "--api-key-env", "HOME")
    assert code == 0, err
    config = ServeDeploySchema.model_validate(json.loads(out))  # what `serve deploy` and KubeRay validate
    assert config.http_options.host == "127.0.0.1" and config.http_options.port == 8099
    (app,) = config.applications
    assert app.import_path == "bertkit.serve.cluster:application" and app.route_prefix == "/"
    assert app.args["service"]["settings"]["max_inputs"] == 16 and app.args["service"]["api_key_env"] == "HOME"
    assert os.environ["HOME"] not in out  # the key is named, never written
    built = application(app.args)
    model = built._bound_deployment.init_args[0]._bound_deployment
    assert model.name == "bertkit-model" and model.ray_actor_options["num_cpus"] == 0.5
    assert model._deployment_config.autoscaling_config.max_replicas == 4
