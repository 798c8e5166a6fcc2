"""The service app in-process (Starlette's TestClient): batches split by the token budget, a crashed batch, errors."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from bertkit.serve import ServeSettings, create_app
from bertkit.serve.security import authorized


def test_bearer_check_is_exact():
    assert authorized(b"Bearer k3y", b"k3y") and authorized(b"bearer k3y", b"k3y")
    assert not authorized(b"Bearer k3", b"k3y") and not authorized(b"k3y", b"k3y") and not authorized(None, b"k3y")
    assert not authorized(b"Basic k3y", b"k3y")


@pytest.mark.slow
def test_a_request_larger_than_the_batch_budget_runs_in_several_passes_and_equals_embed(encoder):
    texts = [f"sentence number {i} " + "about a movie " * (i % 7) for i in range(40)]
    counted = encoder.with_options(concurrent_batches=1)
    padded: list[int] = []
    real_forward = counted.network.forward_inputs

    def forward(inputs):
        padded.append(int(inputs["attention_mask"].numel()))
        return real_forward(inputs)

    counted.network.forward_inputs = forward
    app = create_app(counted, settings=ServeSettings(max_batch_tokens=64))
    with TestClient(app) as client:
        response = client.post("/embed", json={"inputs": texts, "layers": "last4:concat", "pooling": "cls+mean"})
        assert response.status_code == 200
        np.testing.assert_allclose(
            np.asarray(response.json(), dtype=np.float32),
            encoder.embed(texts, layers="last4:concat", pooling="cls+mean"),
            atol=1e-5,
        )
    assert len(padded) >= 10 and max(padded) <= 64  # 40 inputs of 5-30 tokens under a 64-token padded budget
    assert encoder.runner().max_batch_tokens != 64  # the server's budget is its own copy's, not the caller's encoder's


def test_every_model_call_runs_on_the_one_model_thread(encoder):
    """Each thread running torch keeps its own OpenMP team; turns handed to whichever thread of asyncio's pool was free
    made one client's requests 1.5x slower (52-54 against 77-84 requests/s, benchmarks/serve.py at c=1)."""
    import threading

    watched = encoder.with_options(concurrent_batches=1)
    threads: set[str] = set()
    real_forward = watched.network.forward_inputs

    def forward(inputs):
        threads.add(threading.current_thread().name)
        return real_forward(inputs)

    watched.network.forward_inputs = forward
    with TestClient(create_app(watched)) as client:
        for k in range(12):
            assert client.post("/embed", json={"inputs": [f"request {k}"]}).status_code == 200
            assert client.post("/tokenize", json={"inputs": f"request {k}"}).status_code == 200
    assert len(threads) == 1 and next(iter(threads)).startswith("bertkit-model"), threads


@pytest.mark.slow
def test_a_crashed_batch_fails_its_request_with_json_and_the_server_keeps_serving(encoder):
    flaky = encoder.with_options(concurrent_batches=1)
    poison = flaky.tokenizer.convert_tokens_to_ids("boycott")
    real_forward = flaky.network.forward_inputs

    def forward(inputs):
        if (inputs["input_ids"] == poison).any():
            raise RuntimeError("/secret/path/model.bin exploded")
        return real_forward(inputs)

    flaky.network.forward_inputs = forward
    with TestClient(create_app(flaky), raise_server_exceptions=False) as client:
        failed = client.post("/embed", json={"inputs": ["EU rejects German call to boycott British lamb ."]})
        assert failed.status_code == 500
        assert failed.json()["error_type"] == "internal_error" and "/secret" not in failed.text
        fine = client.post("/embed", json={"inputs": ["I love Korea"]})
        assert fine.status_code == 200
        np.testing.assert_allclose(
            np.asarray(fine.json(), dtype=np.float32), encoder.embed(["I love Korea"]), atol=1e-5
        )
        assert client.get("/health").json() == {"status": "ok"}
        assert "bertkit_failed_batches_total 1.0" in client.get("/metrics").text


def test_the_openapi_document_bounds_with_json_schema_keywords(encoder):
    """A bound written in pydantic's own words ("le") is no bound to a client or a schema tool."""
    document = create_app(encoder).openapi()
    found: list[str] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            found.extend(f"{where}.{k}" for k in ("le", "ge", "lt", "gt", "multiple_of") if k in node)
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for k, value in enumerate(node):
                walk(value, f"{where}.{k}")

    walk(document, "")
    assert not found, found
    dimensions = document["components"]["schemas"]["EmbedRequest"]["properties"]["dimensions"]["anyOf"][0]
    assert (dimensions["minimum"], dimensions["maximum"]) == (1, 8064)  # the widest vector of the packaged model


def test_the_openapi_document_gives_the_layer_grammar_as_a_pattern(encoder):
    """Issue 61 (9): `layers` is published with the parser's grammar; a spec it allows is served or its range said."""
    from bertkit.encoder.layers import LAYERS_PATTERN

    app = create_app(encoder)
    schemas = app.openapi()["components"]["schemas"]
    for body in ("EmbedRequest", "EmbedAllRequest", "OpenAIEmbeddingRequest"):
        layers = schemas[body]["properties"]["layers"]
        assert (layers["type"], layers["pattern"], layers["default"]) == ("string", LAYERS_PATTERN, "last"), body
    with TestClient(app) as client:
        answer = client.post("/embed", json={"inputs": ["a film"], "layers": " LAST2 : Mean "})
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(answer.json(), encoder.embed(["a film"], layers="last2:mean"), atol=1e-5)
        lacking = client.post("/embed", json={"inputs": ["a film"], "layers": "0,9"})  # the pattern's, not the model's
        assert lacking.status_code == 422 and "layer 9 does not exist" in lacking.text, lacking.text
        blank = client.post("/embed", json={"inputs": ["a film"], "layers": ""})
        assert blank.status_code == 422 and "not a valid layer spec" in blank.text, blank.text
