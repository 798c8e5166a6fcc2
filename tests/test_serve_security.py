"""`bertkit serve` against a local attacker, through real HTTP on a free loopback port: Host names (DNS rebinding),
browser origins (CORS), JSON-only bodies (form posts), the page without the key, and answers without paths."""

from __future__ import annotations

import json
import re

import httpx
import numpy as np
import pytest
from servers import Server
from sklearn.linear_model import LogisticRegression
from test_serve import KEY

from bertkit.records import new_record

pytestmark = pytest.mark.slow

ALLOWED_ORIGIN = "http://localhost:3000"


@pytest.fixture(scope="module")
def keyed():
    """A server with an API key, one more Host name and one admitted web origin."""
    server = Server("--allow-host", "bertkit.test", "--allow-origin", ALLOWED_ORIGIN, key=KEY)
    yield server
    assert server.stop() == 0


def test_a_host_that_is_not_this_server_is_refused(keyed):
    port = keyed.port
    for host in (
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        f"[::1]:{port}",
        "localhost",
        "bertkit.test",
        f"bertkit.test:{port}",
    ):
        response = httpx.get(keyed.url + "/info", headers={**keyed.headers, "Host": host})
        assert response.status_code == 200, (host, response.text)
    for host in (f"attacker.example:{port}", "attacker.example", f"localhost:{port + 1}", f"127.0.0.1.nip.io:{port}"):
        response = httpx.get(keyed.url + "/health", headers={"Host": host})
        assert response.status_code == 403, host
        assert response.json()["error_type"] == "host_not_allowed" and "--allow-host" in response.json()["error"]


def test_cross_origin_requests_are_refused_unless_admitted_and_then_get_cors(keyed):
    body = json.dumps({"inputs": "I love Korea"})
    json_headers = {**keyed.headers, "Content-Type": "application/json"}
    refused = httpx.post(
        keyed.url + "/embed", content=body, headers={**json_headers, "Origin": "http://attacker.example"}
    )
    assert refused.status_code == 403 and refused.json()["error_type"] == "origin_not_allowed"
    assert "--allow-origin http://attacker.example" in refused.json()["error"]
    assert "access-control-allow-origin" not in refused.headers
    own = httpx.post(keyed.url + "/embed", content=body, headers={**json_headers, "Origin": keyed.url})
    assert own.status_code == 200
    admitted = httpx.post(keyed.url + "/embed", content=body, headers={**json_headers, "Origin": ALLOWED_ORIGIN})
    assert admitted.status_code == 200 and admitted.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    preflight = {
        "Origin": ALLOWED_ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    answer = httpx.options(keyed.url + "/embed", headers=preflight)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    allowed = answer.headers["access-control-allow-headers"].lower()
    assert (
        "authorization" in allowed
        and "content-type" in allowed
        and "POST" in answer.headers["access-control-allow-methods"]
    )
    hostile = httpx.options(keyed.url + "/embed", headers={**preflight, "Origin": "http://attacker.example"})
    assert hostile.status_code == 403 and "access-control-allow-origin" not in hostile.headers


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
def test_a_body_that_is_not_json_is_refused_with_415(keyed, content_type):
    headers = {**keyed.headers, **({"Content-Type": content_type} if content_type else {})}
    for path in ("/embed", "/explain", "/v1/embeddings"):
        response = httpx.post(keyed.url + path, content=b'{"inputs": "x", "text": "x"}', headers=headers)
        assert response.status_code == 415, (path, content_type, response.text)
        message = response.json()["error"]["message"] if path.startswith("/v1/") else response.json()["error"]
        assert "Content-Type: application/json" in message
    charset = httpx.post(
        keyed.url + "/embed",
        content=b'{"inputs": "x"}',
        headers={**keyed.headers, "Content-Type": "application/json; charset=utf-8"},
    )
    assert charset.status_code == 200


def test_the_page_loads_without_the_key_and_its_script_sends_it(keyed):
    page = httpx.get(keyed.url + "/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"] and 'id="key-form"' in page.text
    for name in ("page.js", "page.css", "plotly.min.js"):
        assert httpx.get(f"{keyed.url}/explain/static/{name}").status_code == 200, name
    script = httpx.get(keyed.url + "/explain/static/page.js").text
    assert "sessionStorage" in script and '"Bearer "' in script
    assert httpx.get(keyed.url + "/explain/info").status_code == 401  # the data still needs the key
    assert httpx.post(keyed.url + "/", json={"inputs": "x"}).status_code == 401  # POST / is TEI's /embed
    assert httpx.get(keyed.url + "/explain/info", headers=keyed.headers).status_code == 200


# ---- answers carry names, not paths ------------------------------------------------------------------------------
SECRET = "a secret training sentence"


@pytest.fixture(scope="module")
def absolute(tmp_path_factory):
    """A model, a feature run that records its training file, and a probe record, all given by absolute paths."""
    from bertkit import TextClassifier
    from bertkit.encoder.models import default_model_dir

    root = tmp_path_factory.mktemp("private-place").resolve()
    train = root / "data" / "train.tsv"
    train.parent.mkdir()
    rows = [(f"{SECRET} number {i}, {'great' if i % 2 else 'awful'}", "pos" if i % 2 else "neg") for i in range(20)]
    train.write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
    data = {"train": str(train), "text_column": "text", "label_column": "label", "header": True}
    run = (
        TextClassifier(classifier=LogisticRegression(C=1.0, max_iter=3000))
        .fit([t for t, _ in rows], [y for _, y in rows])
        .save_pretrained(root / "runs" / "secret", extra={"data": data})
    )
    model = default_model_dir().resolve()
    probe = root / "probe"
    probe.mkdir()
    facts = {
        "model": str(model),
        "train": str(train),
        "dev": str(root / "data" / "dev.tsv"),
        "train_rows": 20,
        "dev_rows": 5,
        "hidden_size": 384,
    }
    record = new_record(  # as `bertkit probe` writes it
        "probe",
        task="text",
        metric="accuracy",
        secondary_metric="macro_f1",
        facts=facts,
        rows=[{"pooling": "mean", "choice": "last", "dim": 384, "score": 0.8, "secondary": 0.7}],
    )
    (probe / "probe.json").write_text(json.dumps(record), encoding="utf-8")
    return {"root": root, "model": model, "run": run.resolve(), "train": train, "probe": probe}


def get_answers(server: Server) -> dict[str, str]:
    """Every GET route the server lists (and its page, docs and static files), by path: their answers' text."""
    spec = httpx.get(server.url + "/openapi.json").json()
    paths = {p for p, methods in spec["paths"].items() if "get" in methods and "{" not in p}
    paths |= {"/", "/docs", "/openapi.json", "/explain/static/page.js", "/explain/static/page.css"}
    return {path: httpx.get(server.url + path).text for path in sorted(paths)}


def test_no_answer_carries_a_path(absolute):
    server = Server(
        "--model", str(absolute["model"]), "--run", f"secret={absolute['run']}", "--run", f"probe={absolute['probe']}"
    )
    try:
        answers = get_answers(server)
        assert {"/info", "/explain/info", "/health", "/metrics"} <= set(answers)
        explained = server.post("/explain", {"text": "I love Korea", "map_run": "secret"})
        assert explained.status_code == 200
        answers["POST /explain"] = explained.text
        answers["POST /predict/secret"] = server.post("/predict/secret", {"inputs": "great"}).text
        leaks = [str(absolute[k]) for k in ("root", "model", "run", "train", "probe")] + [str(absolute["model"].parent)]
        for where, text in answers.items():
            for leak in leaks:
                assert leak not in text, f"{where} holds {leak}"
            assert not re.search(r"/(tmp|home|root|usr|site-packages)/", text.replace("\\/", "/")), where
        info = httpx.get(server.url + "/explain/info").json()
        assert info["model"] == httpx.get(server.url + "/info").json()["model"] == absolute["model"].name
        result = explained.json()
        assert result["map"]["source"] == "20 evenly spaced rows of run secret's training file"
        assert SECRET not in explained.text  # the training sentences stay on the server without --map-texts
        assert result["probes"]["probe"]["facts"]["train"] == "train.tsv"
        assert result["probes"]["probe"]["facts"]["model"] == absolute["model"].name
    finally:
        assert server.stop() == 0


def test_map_texts_shows_the_training_sentences_when_asked(absolute):
    server = Server("--run", f"secret={absolute['run']}", "--map-texts")
    try:
        result = server.post("/explain", {"text": "I love Korea"}).json()
        shown = [t for group in result["map"]["groups"] for t in group["text"]]
        assert len(shown) == 20 and all(t.startswith(SECRET) for t in shown)
        np.testing.assert_array_equal(sorted(g["label"] for g in result["map"]["groups"]), ["neg", "pos"])
    finally:
        assert server.stop() == 0


def test_every_serve_setting_is_a_generated_flag_checked_in_one_place(monkeypatch, capsys):
    """`bertkit serve`'s limits, access and map flags are made of `ServeSettings`' fields (help, metavar, repeatable
    tuples) and checked by their one constructor, before the port is bound or the model loads."""
    import dataclasses

    from conftest import run_cli

    from bertkit.serve.settings import ServeSettings

    code, out, _ = run_cli(monkeypatch, capsys, "serve", "--help")
    flags = [
        (f.metadata["flag"] or "--" + f.name.replace("_", "-")).split("/")[0]
        for f in dataclasses.fields(ServeSettings)
        if f.metadata.get("help")
    ]
    assert code == 0 and len(flags) == 9 and all(flag in out for flag in flags), out
    assert ServeSettings(allow_hosts=("A.test", "b.test")).allow_hosts == ("a.test", "b.test")
    code, _, err = run_cli(monkeypatch, capsys, "serve", "--max-inputs", "0", "--port", "1")
    assert code == 2 and "--max-inputs 0: give a whole number of at least 1." in err, err
    code, _, err = run_cli(monkeypatch, capsys, "serve", "--allow-origin", "ftp://x/y", "--port", "1")
    assert code == 2 and "--allow-origin 'ftp://x/y'" in err, err
