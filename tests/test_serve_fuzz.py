"""`bertkit serve` fuzzed from its own OpenAPI document: schemathesis against a real server process.

Every operation of `/openapi.json` gets generated requests, valid and invalid (schemathesis' examples, coverage and
fuzzing phases), and every answer is held to: no 5xx; status, content type, headers and body as the document
publishes them; a schema-valid request served, or refused only for what a JSON schema cannot say (a layer this model
lacks, an input too long with truncate=false, a run that is not served); a schema-invalid one refused with a 4xx;
and every error the service's JSON shape (OpenAI's under /v1/), without tracebacks or paths.

Every check schemathesis has runs (`--checks all`: positive data accepted, negative data refused, undeclared methods
405 with an Allow header, ...), and two of bertkit's own. Quick profile (CI): up to 40 generated requests per
operation in the fuzzing phase, besides the coverage phase's boundary cases (over 1,000 requests, which the last
test counts). Long profile, thousands per operation, with a
tally of the answers by operation, phase, kind of data and status (`-s` shows it):

    BERTKIT_FUZZ_EXAMPLES=2000 .venv/bin/pytest -q -s tests/test_serve_fuzz.py

The tests after the fuzzer pin what it found, one by one.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import httpx
import pytest
import schemathesis
from schemathesis.checks import CHECKS as SCHEMATHESIS_CHECKS
from schemathesis.checks import load_all_checks
from schemathesis.config import CheckConfig
from servers import Server

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("BERTKIT_FUZZ_EXAMPLES", "40"))
MIN_REQUESTS = 1000  # the bar for one run
MAX_INPUTS, MAX_BODY = 16, 100_000
LEAKS = ("Traceback", "site-packages", "/tmp/", 'File "')
# Schema-valid requests that the service may still refuse: what a JSON schema cannot say. A 422 of this kind
# names the option at fault; anything else refused (a validation_error, an empty list...) is a schema that
# promises more than the server takes.
SEMANTIC_422_WORDS = ("layers", "pooling", "dimensions", "pairs", "output=", "question", "doc_stride")


TALLY: Counter = Counter()  # (operation, phase, positive/negative, status) -> answers


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The service with a served reranker (a tiny pair regressor), so that /rerank and /v1/rerank really rank, a
    question-answering run (an untrained head: the shapes are what is fuzzed), so that /predict/qa really answers, and
    a vector index, so that /search really searches."""
    import tiny_models
    from test_finetune import tiny_args
    from test_pairs import COLOURS, pair_file

    from bertkit.tasks.finetune import finetune

    root = tmp_path_factory.mktemp("fuzz-runs")
    model = str(tiny_models.tiny_bert(root / "bert", extra_words=tuple(COLOURS)))
    finetune(
        pair_file(root / "train.tsv", n=32, scores=True),
        output_dir=root / "rr",
        task="pair",
        model=model,
        args=tiny_args(num_train_epochs=1, max_length=24),
        dev_share=0.25,
    )
    save_untrained_qa_run(model, root / "qa")
    runs = ("--run", f"rr={root / 'rr'}", "--run", f"qa={root / 'qa'}", "--index", f"reviews={reviews_index(root)}")
    server = Server("--max-inputs", str(MAX_INPUTS), "--max-body-bytes", str(MAX_BODY), *runs)
    yield server
    assert server.stop() == 0, server.output()[-3000:]
    if TALLY:
        print(f"\nschemathesis: {sum(TALLY.values())} requests")
        for (label, phase, mode, status), count in sorted(TALLY.items()):
            print(f"  {label:24} {phase:9} {mode:9} {status}  {count}")


def reviews_index(root):
    """An index of bertkit's sample reviews embedded by the served (packaged) model, so that /search really searches."""
    from bertkit import Encoder, build_index
    from bertkit.io.readers import read_labelled, sample_path
    from bertkit.io.stream import embed_file

    (root / "reviews.txt").write_text("\n".join(read_labelled(sample_path("reviews.tsv"), "text", "label").texts))
    embed_file(Encoder.from_pretrained(), root / "reviews.txt", root / "reviews.npz", output_type="int8")
    build_index(root / "reviews.npz", root / "reviews.index")
    return root / "reviews.index"


def save_untrained_qa_run(model: str, directory) -> None:
    """A QA run of the tiny model with a random span head, written as `bertkit finetune --task qa` writes one."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from bertkit.encoder.models import quiet_transformers
    from bertkit.tasks.qa import FineTunedQA

    with quiet_transformers():
        network = AutoModelForQuestionAnswering.from_pretrained(model)
    record = {"task": "qa", "data": {"negatives": True, "doc_stride": 8}}
    FineTunedQA(network, AutoTokenizer.from_pretrained(model), 24, record).save_pretrained(directory)


@pytest.fixture(scope="module")
def api(server):
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    schema.config.generation.update(max_examples=EXAMPLES, database="none")
    schema.config.update(request_timeout=120)
    # an oversized list of texts (maxItems) is refused with 413, as --max-inputs says
    schema.config.checks.negative_data_rejection = CheckConfig(
        expected_statuses=["400", "404", "405", "413", "415", "422"]
    )
    # a schema-valid request is served, or refused for what a JSON schema cannot say (documented on every route: an
    # input too long with truncate=false 413, a run not served 404, a layer this model lacks 422);
    # schema_valid_is_served below holds each refusal to its reason
    schema.config.checks.positive_data_acceptance = CheckConfig(expected_statuses=["2xx", "404", "413", "422"])
    return schema


if not hasattr(pytest.Function, "_nodeid"):
    # schemathesis 4.32's from_fixture renames the running test (for its report) through `Function._nodeid`, which
    # pytest 9.2 no longer has; read the id, ignore the renaming (each operation is still reported as a subtest)
    pytest.Function._nodeid = property(lambda self: self.nodeid, lambda self, value: None)

schema = schemathesis.pytest.from_fixture("api")


def json_error_shape(ctx, response, case) -> None:
    """Every 4xx/5xx is JSON in the service's error shape: OpenAI's under /v1/, else {error, error_type}."""
    if response.status_code < 400:
        return
    assert response.headers.get("content-type", [""])[0].startswith("application/json"), response.headers
    body = json.loads(response.content)
    if case.path.startswith("/v1/"):
        assert isinstance(body, dict) and set(body) == {"error"}, body
        error = body["error"]
        assert set(error) == {"message", "type", "param", "code"}, body
        assert isinstance(error["message"], str) and error["message"] and isinstance(error["code"], str), body
    else:
        assert isinstance(body, dict) and set(body) == {"error", "error_type"}, body
        assert isinstance(body["error"], str) and body["error"] and isinstance(body["error_type"], str), body
    text = response.content.decode("utf-8")
    assert not any(leak in text for leak in LEAKS), text


def schema_valid_is_served(ctx, response, case) -> None:
    """A request the document calls valid is served (2xx), or refused for a reason a JSON schema cannot state."""
    if case.meta is None or not case.meta.generation.mode.is_positive or response.status_code < 400:
        return
    body = json.loads(response.content)
    error = body.get("error")
    kind, message = (error["code"], error["message"]) if isinstance(error, dict) else (body.get("error_type"), error)
    allowed = (
        (response.status_code == 413 and kind in ("input_too_long", "payload_too_large"))
        or (response.status_code == 404 and kind in ("unknown_run", "no_reranker"))
        or (response.status_code == 422 and kind in ("not_a_reranker", "model_required"))
        or (
            response.status_code == 422
            and kind == "invalid_input"
            and case.path != "/explain"
            and any(word in message for word in SEMANTIC_422_WORDS)
        )
    )
    assert allowed, f"schema-valid request refused: {response.status_code} {kind}: {message}"


load_all_checks()
CHECKS = [*SCHEMATHESIS_CHECKS.get_all(), json_error_shape, schema_valid_is_served]  # --checks all, and bertkit's


@schema.parametrize()
def test_every_operation_answers_as_its_schema_says(case):
    response = case.call(timeout=120)
    meta = case.meta
    TALLY[
        case.operation.label,
        meta.phase.name.value if meta else "-",
        meta.generation.mode.value if meta else "-",
        response.status_code,
    ] += 1
    case.validate_response(response, checks=CHECKS)


def test_the_fuzzer_sent_enough_requests():
    """Runs after the fuzzer (same module): at least MIN_REQUESTS requests, every operation among them."""
    if not TALLY:
        pytest.skip("the fuzzer did not run in this session (e.g. -k selected this test alone)")
    assert sum(TALLY.values()) >= MIN_REQUESTS, sum(TALLY.values())
    assert {label for label, *_ in TALLY} >= {
        "POST /embed",
        "POST /rerank",
        "POST /v1/rerank",
        "POST /search",
        "GET /health",
    }


# ---- what the fuzzer found, pinned -------------------------------------------------------------------------------
def document(server) -> dict:
    return httpx.get(server.url + "/openapi.json").json()


def operation(server, path: str, method: str = "POST"):
    return schemathesis.openapi.from_dict(document(server))[path][method]


def body_schema(server, path: str) -> dict:
    """The JSON schema of a route's request body, its `$ref` (FastAPI's components) followed."""
    doc = document(server)
    schema = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def test_every_route_publishes_its_request_body_and_answers(server):
    """Before: /explain had no request body, /health, /info and /explain `{}` answers, /metrics a JSON answer."""
    paths = document(server)["paths"]
    for path in ("/embed", "/embed_all", "/tokenize", "/predict/{run}", "/v1/embeddings", "/explain", "/search"):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body, path
        assert paths[path]["post"]["responses"]["200"]["content"]["application/json"]["schema"], path
    for path in ("/health", "/info", "/explain/info"):
        assert paths[path]["get"]["responses"]["200"]["content"]["application/json"]["schema"].get("$ref"), path
    assert list(paths["/metrics"]["get"]["responses"]["200"]["content"]) == ["text/plain"]
    assert paths["/metrics"]["get"]["responses"]["403"]["content"]["application/json"]


def test_an_empty_list_of_texts_is_refused_by_the_schema_too(server):
    """Before: `{"inputs": []}` was schema-valid and refused (422 invalid_input); the schema now says minItems 1
    and maxItems --max-inputs."""
    inputs = body_schema(server, "/embed")["properties"]["inputs"]
    array = next(o for o in inputs["anyOf"] if o.get("type") == "array")
    assert (array["minItems"], array["maxItems"]) == (1, MAX_INPUTS)
    assert server.post("/embed", {"inputs": []}).status_code == 422


@pytest.mark.parametrize(
    "path, body, status",
    [
        ("/v1/embeddings", {"input": "a", "model": "gpt"}, 404),
        ("/v1/embeddings", b"{", 400),
        ("/v1/embeddings", {"input": [[1, 2]], "model": "default"}, 422),
        ("/predict/nope", {"inputs": "a"}, 404),
        ("/embed", {"inputs": ["a"] * (MAX_INPUTS + 1)}, 413),
    ],
)
def test_errors_are_documented_in_their_own_shape(server, path, body, status):
    """Before: 404 was undocumented on /predict/{run} and /v1/embeddings, and /v1 errors (OpenAI's shape)
    were documented as bertkit's {error, error_type}."""
    response = server.post(path, body)
    assert response.status_code == status
    template = "/predict/{run}" if path.startswith("/predict/") else path
    operation(server, template).validate_response(response)


def test_v1_only_documents_the_model_names_it_serves(server):
    model = body_schema(server, "/v1/embeddings")["properties"]["model"]
    assert set(model["enum"]) >= {"default", "bertkit"}
    for name in model["enum"]:
        assert server.post("/v1/embeddings", {"input": "a", "model": name}).status_code == 200


def test_metrics_are_documented_as_text(server):
    response = httpx.get(server.url + "/metrics")
    operation(server, "/metrics", "GET").validate_response(response)
    assert "bertkit_queue_requests" in response.text


@pytest.mark.parametrize(
    "raw", [b'{"text": "a", "layer": 1e400}', b'{"text": "a", "layer": NaN}', b'{"text": "a\\ud800"}']
)
def test_explain_refuses_what_is_not_json_with_400(server, raw):
    response = server.post("/explain", raw)
    assert response.status_code == 400 and response.json()["error_type"] == "invalid_json", response.text


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_method_a_route_does_not_take_is_405(server, method):
    response = httpx.request(method, server.url + "/embed", json={"inputs": "a"})
    assert response.status_code == 405 and response.json()["error_type"], response.text


def test_a_question_answering_run_answers_in_hugging_faces_shape(server):
    """A QA run answers `{"inputs": {question, context}, "parameters": {...}}` as the document says; other runs and
    other bodies are refused with a line that names the question."""
    body = {"inputs": {"question": "which colour?", "context": "the red movie was good"}, "parameters": {"top_k": 2}}
    response = server.post("/predict/qa", body)
    assert response.status_code == 200 and 1 <= len(response.json()) <= 2, response.text
    operation(server, "/predict/{run}").validate_response(response)
    one = server.post("/predict/qa", {"inputs": body["inputs"]})
    assert set(one.json()) == {"answer", "score", "start", "end"}
    for path, refused in (("/predict/rr", body), ("/predict/qa", {"inputs": "the red movie"})):
        answer = server.post(path, refused)
        assert answer.status_code == 422 and "question" in answer.json()["error"], answer.text
