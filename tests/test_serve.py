"""`bertkit serve` through real HTTP: a server process on a free loopback port, official clients, limits, lifecycle."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from servers import Server
from sklearn.linear_model import LogisticRegression
from test_finetune import conll_file, tiny_args

KEY = "test-key-0123456789"
TEXTS = [
    "I love Korea",
    "a warm , funny and beautifully acted story about growing up",
    "EU rejects German call to boycott British lamb .",
    "",
    "the movie was great " * 12,
    "Hello",
]
OPTIONS = [
    ("last", "mean"),
    ("last4:sum", "mean"),
    ("all:concat", "cls+max"),
    ("-2", "cls"),
    ("last", "pooler"),
    ("0,3", "max"),
    ("last", "none"),
    ("last4:mean", "none"),
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def run_dirs(tmp_path_factory, tiny_dirs):
    """A feature classifier on bertkit's sample reviews and a tiny fine-tuned tagger, both saved as runs."""
    from bertkit import TextClassifier
    from bertkit.io.readers import sample_path
    from bertkit.tasks.finetune import finetune

    root = tmp_path_factory.mktemp("runs")
    rows = [line.split("\t") for line in sample_path("reviews.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    TextClassifier(classifier=LogisticRegression(C=1.0, max_iter=3000)).fit(
        [r[0] for r in rows], [r[1] for r in rows]
    ).save_pretrained(root / "sentiment")
    train, dev = conll_file(root / "train.txt", n=60), conll_file(root / "dev.txt", n=16, seed=1)
    finetune(
        train,
        dev,
        task="token",
        output_dir=root / "ner",
        model=str(tiny_dirs["bert_cased"]),
        args=tiny_args(num_train_epochs=3, max_length=16),
    )
    return {"sentiment": root / "sentiment", "ner": root / "ner"}


@pytest.fixture(scope="session")
def server(run_dirs):
    server = Server(
        "--run",
        f"sentiment={run_dirs['sentiment']}",
        "--run",
        f"ner={run_dirs['ner']}",
        "--max-inputs",
        "16",
        "--max-body-bytes",
        "100000",
        key=KEY,
    )
    yield server
    assert server.stop() == 0


def error_of(response: httpx.Response) -> tuple[str, str]:
    """(kind, message) of an error answer: bertkit's shape, or OpenAI's under /v1/ (the kind is its `code`)."""
    payload = response.json()
    if isinstance(payload["error"], dict):
        assert set(payload["error"]) == {"message", "type", "param", "code"}, payload
        return payload["error"]["code"], payload["error"]["message"]
    return payload["error_type"], payload["error"]


def expected(encoder, texts, layers, pooling):
    if pooling == "none":
        return [t.vectors for t in encoder.embed_tokens(texts, layers=layers, warn=False)]
    return list(encoder.embed(texts, layers=layers, pooling=pooling, warn=False))


def test_concurrent_mixed_requests_are_batched_and_equal_the_library(server, encoder):
    jobs = [(i, TEXTS[i % len(TEXTS) :] + TEXTS[: i % 3], *OPTIONS[i % len(OPTIONS)]) for i in range(32)]
    batches_before = server.metric("bertkit_batch_size_count")

    def send(job):
        _, texts, layers, pooling = job
        return server.post("/embed", {"inputs": texts, "layers": layers, "pooling": pooling})

    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(send, jobs))
    for (_, texts, layers, pooling), response in zip(jobs, responses):
        assert response.status_code == 200, response.text
        want = expected(encoder, texts, layers, pooling)
        got = response.json()
        assert len(got) == len(texts)
        for row, (g, w) in enumerate(zip(got, want)):
            g = np.asarray(g["vectors"] if pooling == "none" else g, dtype=np.float32)
            assert g.shape == w.shape
            assert np.abs(g - w).max() <= 1e-5, (layers, pooling, row)
        if pooling == "none":
            assert got[0]["tokens"] == encoder.tokenize(texts[0]).tokens[0]
    inputs = sum(len(texts) for _, texts, _, _ in jobs)
    batches = server.metric("bertkit_batch_size_count") - batches_before
    assert 0 < batches < inputs / 2, "concurrent requests were not batched together"
    assert server.metric("bertkit_tokens_total") > 0


def test_openai_client_float_and_base64_give_unit_length_library_vectors(server, encoder):
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key=KEY)
    texts = ["I love Korea", "the movie was great"]
    want = encoder.embed(texts)
    want = want / np.linalg.norm(want, axis=1, keepdims=True)  # OpenAI's embeddings have length 1
    for encoding in ("float", "base64", None):  # None: the client asks for base64 and decodes it itself
        options = {"encoding_format": encoding} if encoding else {}
        result = client.embeddings.create(model="default", input=texts, **options)
        got = np.array(
            [
                np.frombuffer(base64.b64decode(d.embedding), "<f4") if encoding == "base64" else d.embedding
                for d in result.data
            ],
            dtype=np.float32,
        )
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(got, want, atol=1e-5)
        assert (
            result.usage.prompt_tokens == result.usage.total_tokens == int(encoder.tokenize(texts).attention_mask.sum())
        )
    for output_type in ("int8", "ubinary", "float16"):  # the client decodes base64 as float32, whatever was asked
        asked = {"extra_body": {"output_type": output_type}}
        floats = client.embeddings.create(model="default", input=texts, encoding_format="float", **asked)
        decoded = client.embeddings.create(model="default", input=texts, **asked)
        want = encoder.embed(texts, normalize_embeddings=True, output_type=output_type)
        for as_float, as_base64, vector in zip(floats.data, decoded.data, want):
            kind = np.float16 if output_type == "float16" else np.float32  # JSON gives a float16 its shortest repr
            np.testing.assert_array_equal(np.asarray(as_base64.embedding, kind), np.asarray(as_float.embedding, kind))
            assert len(as_base64.embedding) == len(vector)  # not the bytes of another type read as float32
            if output_type != "ubinary":  # the library's numbers, within a bucket (batches round differently)
                np.testing.assert_allclose(
                    as_base64.embedding, vector.astype(np.float32), atol=1.0 if output_type == "int8" else 1e-3
                )


@pytest.mark.parametrize(
    "key, call, error_class, code, words",
    [
        (KEY, {"model": "text-embedding-3-small", "input": "x"}, "NotFoundError", "model_not_found", "not served here"),
        (KEY, {"model": "default", "input": [[1, 2]]}, "UnprocessableEntityError", "invalid_input", "token ids"),
        (
            KEY,
            {"model": "default", "input": "x", "dimensions": 7000},
            "UnprocessableEntityError",
            "invalid_input",
            "dimensions=7000",
        ),
        ("wrong-key", {"model": "default", "input": "x"}, "AuthenticationError", "unauthorized", "wrong API key"),
    ],
)
def test_openai_client_errors_carry_the_message(server, key, call, error_class, code, words):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)
    with pytest.raises(getattr(openai, error_class)) as error:
        client.embeddings.create(**call)
    assert words in str(error.value) and words in error.value.message, str(error.value)
    assert error.value.code == code and error.value.type in ("invalid_request_error", "authentication_error")
    if code == "model_not_found":
        assert error.value.param == "model"


def test_huggingface_inference_client_gets_the_library_vector(server, encoder, monkeypatch):
    from huggingface_hub import InferenceClient, constants

    monkeypatch.setattr(constants, "is_offline_mode", lambda: False)  # the tests run offline; this server is local

    got = InferenceClient(server.url, token=KEY).feature_extraction("I love Korea")
    np.testing.assert_allclose(np.asarray(got).reshape(1, -1), encoder.embed(["I love Korea"]), atol=1e-5)


def test_tokenize_answers_in_teis_shape_with_bertkits_ids_beside(server, encoder):
    """TEI's /tokenize: a list per input of {id, text, special, start, stop}; a special token has its name and no
    offsets, any other the input's characters [start, stop). bertkit adds the vocabulary's token, word and type ids."""
    text = "I love Tasteless"
    [tokens] = server.post("/tokenize", {"inputs": text}).json()
    batch = encoder.tokenize(text)
    assert [t["id"] for t in tokens] == batch.input_ids[0].tolist()
    assert [t["token"] for t in tokens] == ["[CLS]", "i", "love", "taste", "##less", "[SEP]"] == batch.tokens[0]
    assert [t["text"] for t in tokens] == ["[CLS]", "I", "love", "Taste", "less", "[SEP]"]
    assert [t["special"] for t in tokens] == [True, False, False, False, False, True]
    assert [(t["start"], t["stop"]) for t in tokens] == [(None, None), (0, 1), (2, 6), (7, 12), (12, 16), (None, None)]
    assert [t["word_id"] for t in tokens] == [None, 0, 1, 2, 2, None] and {t["type_id"] for t in tokens} == {0}
    assert set(tokens[0]) == {"id", "text", "special", "start", "stop", "token", "word_id", "type_id"}
    bare = server.post("/tokenize", {"inputs": [text, "a film"], "add_special_tokens": False}).json()
    assert [[t["text"] for t in row] for row in bare] == [["I", "love", "Taste", "less"], ["a", "film"]]
    long = server.post("/tokenize", {"inputs": ["short", "word " * 600]})
    assert long.headers["X-Bertkit-Truncated"] == "1" and long.headers["X-Bertkit-Truncated-Inputs"] == "1"
    assert len(long.json()[1]) == encoder.max_length


def test_long_input_is_truncated_and_says_so_or_refused_by_index(server, encoder):
    long = "the movie was great and " * 200
    response = server.post("/embed", {"inputs": ["short", long]})
    assert response.headers["X-Bertkit-Truncated"] == "1" and response.headers["X-Bertkit-Truncated-Inputs"] == "1"
    np.testing.assert_allclose(
        np.asarray(response.json(), dtype=np.float32), encoder.embed(["short", long], warn=False), atol=1e-5
    )
    refused = server.post("/embed", {"inputs": ["short", long], "truncate": False})
    assert refused.status_code == 413
    length = len(encoder.tokenize(long, truncation=False).tokens[0])
    assert f"inputs[1] has {length} tokens" in refused.json()["error"]


def test_predict_serves_a_feature_classifier_and_a_tagger_like_their_own_predict(server, run_dirs, encoder):
    from bertkit import load_run

    texts = ["a warm and funny story", "a dull lifeless mess"]
    classifier = load_run(run_dirs["sentiment"], cache=None)
    got = server.post("/predict/sentiment", {"inputs": texts}).json()
    probabilities = classifier.predict_proba(texts)
    for row, prediction in zip(probabilities, got):
        assert prediction["label"] == classifier.classes_[row.argmax()]
        by_label = {p["label"]: p["score"] for p in prediction["probabilities"]}
        assert by_label == pytest.approx(dict(zip(classifier.classes_, row.tolist())), abs=1e-5)
    text = "EU rejects the German movie in New York ."
    tagger = load_run(run_dirs["ner"])
    [entities] = tagger.predict([text])
    [served] = server.post("/predict/ner", {"inputs": text}).json()
    assert [(e["type"], e["text"], e["start"], e["end"]) for e in served["entities"]] == [
        (e.type, e.text, e.char_start, e.char_end) for e in entities
    ]
    for e in served["entities"]:
        assert text[e["start"] : e["end"]] == e["text"] and 0 < e["score"] <= 1
    info = httpx.get(server.url + "/info", headers=server.headers).json()
    assert {r["name"]: r["kind"] for r in info["runs"]} == {"sentiment": "features", "ner": "finetuned-token"}
    assert info["hidden_size"] == 384 and info["max_length"] == encoder.max_length and "path" not in info


def test_every_endpoint_but_health_needs_the_key(server):
    assert httpx.get(server.url + "/health").status_code == 200
    for method, path in [
        ("GET", "/info"),
        ("GET", "/metrics"),
        ("POST", "/embed"),
        ("POST", "/v1/embeddings"),
        ("POST", "/tokenize"),
        ("POST", "/predict/sentiment"),
    ]:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            response = httpx.request(method, server.url + path, headers=headers, content=b'{"inputs": "x"}')
            assert response.status_code == 401, (path, headers)
            assert error_of(response)[0] == "unauthorized"
            assert response.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "path, body, status, error_type, words",
    [
        ("/embed", b'{"inputs": ["a"', 400, "invalid_json", "not valid JSON"),
        ("/embed", {"inputs": 5}, 422, "validation_error", "inputs: must be a string or a list of strings, not int"),
        ("/embed", {"inputs": ["a", 3]}, 422, "validation_error", "inputs.1: must be a string, not int"),
        ("/embed", {"inputs": ["a"], "truncate": "yes"}, 422, "validation_error", "truncate"),
        ("/embed", {"input": ["a"]}, 422, "validation_error", "input: unknown field"),
        ("/embed", {"inputs": []}, 422, "invalid_input", "empty list"),
        ("/embed", {"inputs": ["a"] * 17}, 413, "too_many_inputs", "at most 16"),
        ("/embed", {"inputs": ["word " * 30000]}, 413, "payload_too_large", "larger than 100000 bytes"),
        ("/predict/nope", {"inputs": ["a"]}, 404, "unknown_run", "served runs: ner, sentiment"),
        ("/embed", {"inputs": ["a"], "layers": "last99:sum"}, 422, "invalid_input", "layer -8 does not exist"),
        ("/embed", {"inputs": ["a"], "layers": "lastx"}, 422, "invalid_input", "not a valid layer spec"),
        ("/embed", {"inputs": ["a"], "pooling": "avg"}, 422, "invalid_input", "unknown pooling 'avg'"),
        ("/embed", {"inputs": ["a"], "layers": "-2", "pooling": "pooler"}, 422, "invalid_input", "pooler"),
        ("/v1/embeddings", {"input": [[1, 2]], "model": "default"}, 422, "invalid_input", "token ids"),
        (
            "/v1/embeddings",
            {"input": [["a", "b"]], "model": "default"},
            422,
            "validation_error",
            "input: must be a string or a list of strings, not list",  # not "a valid integer": no token ids taken
        ),
        ("/nowhere", {"inputs": ["a"]}, 404, "not_found", "no endpoint /nowhere"),
    ],
)
def test_bad_requests_get_one_clear_json_error(server, path, body, status, error_type, words):
    response = server.post(path, body)
    assert response.status_code == status, response.text
    kind, message = error_of(response)
    assert kind == error_type and words in message, response.text
    assert "Traceback" not in response.text and "/tmp" not in response.text and "site-packages" not in response.text


def test_a_request_whose_client_left_is_dropped_before_the_model(server):
    dropped = server.metric("bertkit_dropped_total")
    busy = threading.Thread(target=server.post, args=("/embed", {"inputs": ["the movie was great " * 100] * 16}))
    busy.start()
    time.sleep(0.2)  # the big request is in the model; the next one waits in the queue
    with pytest.raises(httpx.TimeoutException):
        server.post("/embed", {"inputs": ["gone before its turn"] * 4}, timeout=0.3)
    busy.join()
    deadline = time.time() + 10
    while server.metric("bertkit_dropped_total") <= dropped and time.time() < deadline:
        time.sleep(0.1)
    assert server.metric("bertkit_dropped_total") == dropped + 1


def test_overload_answers_429_at_once_and_keeps_serving():
    server = Server("--max-queue-tokens", "64")
    try:
        body = {"inputs": ["a warm , funny and beautifully acted story about growing up"] * 8}
        with ThreadPoolExecutor(24) as pool:
            responses = list(pool.map(lambda _: server.post("/embed", body), range(48)))
        codes = [r.status_code for r in responses]
        assert set(codes) == {200, 429}, codes
        refused = next(r for r in responses if r.status_code == 429)
        assert error_of(refused)[0] == "overloaded" and int(refused.headers["Retry-After"]) >= 1
        assert server.metric("bertkit_rejected_total") == codes.count(429)
        assert server.post("/embed", {"inputs": "still here"}).status_code == 200
    finally:
        assert server.stop() == 0


def test_sigterm_finishes_requests_in_flight_and_exits_0(encoder):
    server = Server()
    texts = ["the movie was great and the actors were good " * 4] * 32
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(server.post, "/embed", {"inputs": texts}) for _ in range(8)]
        time.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        responses = [f.result() for f in futures]
    assert [r.status_code for r in responses] == [200] * 8
    np.testing.assert_allclose(
        np.asarray(responses[-1].json(), dtype=np.float32)[:1], encoder.embed(texts[:1]), atol=1e-5
    )
    # an impatient operator repeats the signal while the process tears down: still a clean exit
    deadline = time.time() + 60
    while server.process.poll() is None and time.time() < deadline:
        server.process.send_signal(signal.SIGTERM)
        time.sleep(0.005)
    assert server.stop() == 0
    assert "Application shutdown complete" in server.output()


def test_an_idle_keep_alive_connection_outlives_the_clients(server):
    """httpx drops an idle connection after 5 s; the server keeps it longer, so it never closes one under a request."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", "/info", headers=server.headers)
        first = connection.getresponse()
        assert first.status == 200 and first.read()
        socket_before = connection.sock
        time.sleep(6)  # past uvicorn's default keep-alive of 5 s: a server that closed it makes the next request fail
        connection.request("GET", "/info", headers=server.headers)
        second = connection.getresponse()
        assert second.status == 200 and second.read() and connection.sock is socket_before
    finally:
        connection.close()


def test_openai_dimensions_and_the_embed_options_match_the_library(server, encoder):
    """OpenAI's `dimensions` (text-embedding-3 style) is honoured: the first N numbers, then unit length."""
    from openai import OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key=KEY)
    texts = ["I love Korea", "the movie was great"]
    result = client.embeddings.create(model="default", input=texts, dimensions=128)
    got = np.array([d.embedding for d in result.data], dtype=np.float32)
    np.testing.assert_allclose(got, encoder.embed(texts, truncate_dim=128, normalize_embeddings=True), atol=1e-5)
    extra = {"prompt": "query: ", "output_type": "int8", "truncation_direction": "left"}
    int8 = client.embeddings.create(model="default", input=texts, encoding_format="float", extra_body=extra)
    expected = encoder.embed(
        texts, normalize_embeddings=True, prompt="query: ", output_type="int8", truncation_direction="left"
    )
    assert [d.embedding for d in int8.data] == expected.tolist()
    answer = server.post("/embed", {"inputs": texts, "dimensions": 64, "normalize": True, "output_type": "binary"})
    assert (
        answer.status_code == 200
        and answer.json()
        == encoder.embed(texts, truncate_dim=64, normalize_embeddings=True, output_type="binary").tolist()
    )
    too_wide = server.post("/embed", {"inputs": texts, "dimensions": 999})
    assert too_wide.status_code == 422
    assert too_wide.json()["error"] == "dimensions=999: these vectors have 384 numbers; give 1 to 384."  # its name
    wide = server.post("/embed", {"inputs": texts, "layers": "last4:concat", "dimensions": 999})  # 1,536 numbers
    assert wide.status_code == 200
    np.testing.assert_allclose(wide.json(), encoder.embed(texts, layers="last4:concat", truncate_dim=999), atol=1e-5)
    openai_named = server.post("/v1/embeddings", {"model": "default", "input": "x", "dimensions": 999})
    assert openai_named.json()["error"]["param"] == "dimensions"
    unknown = server.post("/embed", {"inputs": texts, "prompt_name": "query"})
    assert unknown.status_code == 422 and "prompt_name='query'" in unknown.json()["error"]


def test_tei_similarity_is_the_cosine_of_the_vectors(server, encoder):
    sentences = ["I love Korea", "the movie was great", "EU rejects German call"]
    answer = server.post("/similarity", {"inputs": {"source_sentence": "Korea is great", "sentences": sentences}})
    assert answer.status_code == 200, answer.text
    vectors = encoder.embed(["Korea is great", *sentences], normalize_embeddings=True)
    np.testing.assert_allclose(answer.json(), vectors[1:] @ vectors[0], atol=1e-5)
    bad = server.post("/similarity", {"inputs": {"source_sentence": "x", "sentences": []}})
    assert bad.status_code == 422


def test_a_server_dies_with_the_process_that_started_it(tmp_path):
    """Issue 45: after pytest was stopped with SIGTERM, a test's `bertkit serve` child ran on for 20 minutes. The
    suite's one helper starts servers that the kernel kills when their starter ends, however it ends."""
    starter = tmp_path / "starter.py"
    starter.write_text(
        f"import sys, time\nsys.path.insert(0, {str(Path(__file__).parent)!r})\nfrom servers import Server\n"
        "print(Server(wait=False).process.pid, flush=True)\ntime.sleep(600)\n"
    )
    for ending in (signal.SIGTERM, signal.SIGKILL):
        parent = subprocess.Popen([sys.executable, str(starter)], stdout=subprocess.PIPE, text=True)
        server_pid = int(parent.stdout.readline())
        parent.send_signal(ending)
        parent.wait(30)
        deadline = time.time() + 30
        while Path(f"/proc/{server_pid}").exists() and time.time() < deadline:
            status = Path(f"/proc/{server_pid}/status").read_text(errors="replace")
            if "\nState:\tZ" in status:  # ended, waiting for its new parent to reap it
                break
            time.sleep(0.1)
        else:
            assert not Path(f"/proc/{server_pid}").exists(), f"the server outlived its starter ({ending.name})"
