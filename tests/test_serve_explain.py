"""POST /explain inside the service (Starlette's TestClient): through the one queue like every model call, under its
admission control, and with a small answer unless more is asked for (up to a cap)."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from bertkit import Encoder
from bertkit.explain import views
from bertkit.serve import ServeSettings, create_app
from bertkit.serve.runs import ServedRun
from bertkit.tasks.runs import KIND_TEXT

pytestmark = pytest.mark.slow


class GatedRun:
    """A fine-tuned-classifier look-alike that records the thread of each call and can be held at a gate."""

    classes_ = np.array(["neg", "pos"])

    def __init__(self):
        self.threads: list[str] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()

    def predict_proba(self, texts):
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        self.gate.wait(10)
        return np.tile([0.25, 0.75], (len(texts), 1))


def recording(encoder: Encoder) -> tuple[Encoder, list[str]]:
    """A fresh Encoder on the same loaded model whose forward passes record their thread."""
    copy = encoder.with_options(concurrent_batches=1)
    threads: list[str] = []
    real = copy.forward

    def forward(batch):
        threads.append(threading.current_thread().name)
        return real(batch)

    copy.forward = forward
    return copy, threads


def test_explain_and_predict_wait_in_the_one_queue_and_run_off_the_event_loop(encoder):
    """The explainer's model call waits behind a predict that holds the model, then runs on the queue's worker."""
    model, forwards = recording(encoder)
    run = GatedRun()
    app = create_app(model, {"clf": ServedRun("clf", KIND_TEXT, run)})
    with TestClient(app) as client:
        run.gate.clear()
        answers: list = []
        held = threading.Thread(target=lambda: answers.append(client.post("/predict/clf", json={"inputs": ["a"]})))
        held.start()
        assert run.entered.wait(30)  # the model is held inside the first predict
        explain = {"text": "I love Korea"}
        waiting = threading.Thread(target=lambda: answers.append(client.post("/explain", json=explain)))
        waiting.start()
        time.sleep(0.5)
        assert not forwards and len(run.threads) == 1  # the explainer waits in the queue, not beside the predict
        run.gate.set()
        held.join()
        waiting.join()
        assert [a.status_code for a in answers] == [200, 200], answers[-1].text
        assert answers[1].json()["predictions"]["clf"]["label"] == "pos"
        assert client.post("/embed", json={"inputs": ["I love Korea"]}).status_code == 200
    assert len(run.threads) == 2 and forwards
    # the one model thread (encoder/threads.py: MODEL_CALLS), never the event loop itself
    assert {name.rsplit("_", 1)[0] for name in run.threads + forwards} == {"bertkit-model"}, run.threads + forwards


def test_explain_answers_429_with_retry_after_when_the_queue_is_full(encoder):
    run = GatedRun()
    app = create_app(encoder, {"clf": ServedRun("clf", KIND_TEXT, run)}, ServeSettings(max_queue_tokens=64))
    with TestClient(app) as client:
        run.gate.clear()
        answers: list[int] = []
        busy = threading.Thread(
            target=lambda: answers.append(client.post("/predict/clf", json={"inputs": "x"}).status_code)
        )
        busy.start()
        assert run.entered.wait(30)  # the model thread is held inside the first predict
        queued = threading.Thread(
            target=lambda: answers.append(client.post("/predict/clf", json={"inputs": ["y" * 400]}).status_code)
        )
        queued.start()
        deadline = time.time() + 30
        while "bertkit_queue_requests 1.0" not in client.get("/metrics").text and time.time() < deadline:
            time.sleep(0.01)
        try:
            refused = client.post("/explain", json={"text": "I love Korea"})
        finally:
            run.gate.set()
            busy.join()
            queued.join()
        assert refused.status_code == 429, refused.text[:300]
        assert refused.json()["error_type"] == "overloaded" and int(refused.headers["Retry-After"]) >= 1
        assert answers == [200, 200]
        assert client.post("/explain", json={"text": "I love Korea"}).status_code == 200


def test_explain_sends_one_layer_and_the_mean_attention_unless_asked_and_caps_what_is_asked(encoder):
    app = create_app(encoder)
    last = str(encoder.num_layers)
    with TestClient(app) as client:
        small = client.post("/explain", json={"text": "a visually stunning rumination on love"})
        model = small.json()["model"]
        assert list(model["vectors"]) == [last] and model["attention"].keys() == {last}
        assert list(model["attention"][last]) == ["mean"]
        assert len(small.content) < 60_000
        batch = encoder.tokenize(["a visually stunning rumination on love"])
        with torch.inference_mode():
            heads = views.attention_weights(encoder, batch)[-1][0]
        assert np.allclose(model["attention"][last]["mean"], heads.mean(dim=0).numpy(), atol=1e-4)

        asked = client.post(
            "/explain", json={"text": "I love Korea", "layer": [0, 2], "attention_layer": "all", "head": 3}
        ).json()["model"]
        assert list(asked["vectors"]) == ["0", "2"]
        assert list(asked["attention"]) == [str(i) for i in range(1, encoder.num_layers + 1)]
        assert all(list(by_head) == ["3"] for by_head in asked["attention"].values())
        every_head = client.post("/explain", json={"text": "I love Korea", "head": "all"}).json()["model"]
        assert len(every_head["attention"][last]) == encoder.model.config.num_attention_heads

        capped = client.post("/explain", json={"text": "I love Korea", "attention_layer": "all", "head": "all"})
        assert capped.status_code == 200  # the other panels still draw
        assert f"at most {views.MAX_ATTENTION_MAPS}" in capped.json()["model"]["error"]
        assert "rows" in capped.json()["tokenization"]
        too_many = client.post("/explain", json={"text": "I love Korea", "layer": "all"}).json()["model"]
        assert f"at most {views.MAX_VECTOR_LAYERS}" in too_many["error"]
        wrong = client.post("/explain", json={"text": "I love Korea", "head": "max"}).json()["model"]
        assert "'all', 'mean'" in wrong["error"]
        for bad, words in [  # the request model refuses what is not the page's JSON, before any work
            ({"text": "a", "colour": 1}, "colour"),
            ({}, "text"),
            ({"text": "a", "attributions": "yes"}, "attributions"),
            ({"text": "   "}, "text"),
        ]:
            refused = client.post("/explain", json=bad)
            assert refused.status_code == 422 and words in refused.json()["error"], refused.text[:300]


def nested(depth: int, inner: str = "1") -> str:
    """JSON text of `depth` lists inside each other around `inner`."""
    return "[" * depth + inner + "]" * depth


def test_a_deeply_nested_field_is_a_422_that_names_it_and_the_server_keeps_serving(encoder):
    """Issue 60: 400 to 1000 lists deep in a field the explainer echoes were a 500 (RecursionError while answering)."""
    app = create_app(encoder, {"clf": ServedRun("clf", KIND_TEXT, GatedRun())})
    json_body = {"content-type": "application/json"}
    with TestClient(app, raise_server_exceptions=False) as client:
        for field in ("pad_to", "layer", "head", "attention_layer"):
            for depth in (400, 1000):
                body = f'{{"text": "I love Korea", "{field}": {nested(depth)}}}'
                refused = client.post("/explain", content=body, headers=json_body)
                assert refused.status_code == 422, refused.text[:300]
                message = refused.json()["error"]
                assert message.startswith(f"{field}: ") and "\n" not in message and len(message) < 200, message
                assert "[[" not in message  # says the depth, not the value
        shallow = client.post("/explain", json={"text": "I love Korea", "layer": [[[0]]]})  # the panel says it
        assert shallow.status_code == 200 and "error" in shallow.json()["model"]
        # every route that reads a body, every one of its fields: the same 422
        schema = app.openapi()
        posts = [(path, ops["post"]) for path, ops in schema["paths"].items() if "post" in ops]
        assert {"/embed", "/v1/embeddings", "/explain", "/predict/{run}"} <= {path for path, _ in posts}
        for path, operation in posts:
            reference = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            fields = schema["components"]["schemas"][reference.rsplit("/", 1)[1]]["properties"]
            for field in fields:
                body = f'{{"{field}": {nested(1000, "{}")}}}'
                answer = client.post(path.replace("{run}", "clf"), content=body, headers=json_body)
                assert answer.status_code == 422, (path, field, answer.text[:300])
                said = answer.json()["error"]
                said = said["message"] if path.startswith("/v1/") else said
                assert said.startswith(f"{field}: ") and "\n" not in said, (path, said)
        assert client.post("/embed", content=nested(1000), headers=json_body).status_code == 422  # not an object
        assert client.get("/health").json() == {"status": "ok"}
        assert client.post("/explain", json={"text": "I love Korea"}).status_code == 200


def test_the_error_answer_never_echoes_a_deep_value_of_another_face_s_route(encoder):
    """A route of another face (`create_app(routers=...)`) reads its body its own way: the shared error answer still
    shows nothing of a value nested past Python's recursion limit."""
    from fastapi import APIRouter
    from fastapi.exceptions import RequestValidationError

    deep: list = []
    for _ in range(5000):
        deep = [deep]
    router = APIRouter()

    @router.post("/named")
    def named() -> None:
        error = {"type": "literal_error", "loc": ("body", "model"), "msg": "Input should be 'default'", "input": deep}
        raise RequestValidationError([error])

    with TestClient(create_app(encoder, routers=[router]), raise_server_exceptions=False) as client:
        refused = client.post("/named", json={})
        assert refused.status_code == 422, refused.text[:300]
        assert refused.json()["error"] == "model: Input should be 'default'."
    from bertkit.serve.web import MAX_NESTING, nested_deeper

    assert nested_deeper(deep) and not nested_deeper([[1]], 2) and nested_deeper([[1]], 1)
    assert not nested_deeper({"a": [{"b": 1}]}, 3) and nested_deeper({"a": [{"b": {}}]}, 3)
    assert not nested_deeper("[[[", 0) and not nested_deeper([0] * 100, 1) and nested_deeper([0, [], 0], 1)
    edge = json.loads(nested(MAX_NESTING))
    assert not nested_deeper(edge) and nested_deeper([edge]) and not nested_deeper([edge], MAX_NESTING + 1)
