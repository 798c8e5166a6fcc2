"""Pair runs served: TEI's /rerank, Cohere's and Jina's /v1/rerank (with the real `cohere` client, v1 and v2), and
/predict with [text, pair] pairs, against a real `bertkit serve` process, equal to the library's own ranking."""

import pytest
import tiny_models
from servers import Server
from test_finetune import sentiment_file, tiny_args
from test_pairs import COLOURS, pair_file

from bertkit.tasks.finetune import finetune
from bertkit.tasks.load import load_run

pytestmark = pytest.mark.slow
KEY = "rerank-key-0123456789"
DOCUMENTS = ["blue thing", "red thing", "green", "a red red film", "the movie was big"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("served-pairs")
    model = str(tiny_models.tiny_bert(root / "bert", extra_words=tuple(COLOURS)))
    options = dict(
        task="pair", model=model, args=tiny_args(num_train_epochs=8, early_stopping_patience=8, max_length=24)
    )
    finetune(
        pair_file(root / "s.tsv", scores=True),
        pair_file(root / "sd.tsv", n=32, seed=1, scores=True),
        output_dir=root / "scores",
        **options,
    )
    finetune(
        pair_file(root / "c.tsv"), pair_file(root / "cd.tsv", n=32, seed=1), output_dir=root / "classes", **options
    )
    finetune(
        sentiment_file(root / "t.tsv", n=32),
        output_dir=root / "text",
        model=model,
        args=tiny_args(num_train_epochs=1),
        dev_share=0.25,
    )
    return root


@pytest.fixture(scope="module")
def server(runs):
    server = Server("--run", f"rr={runs / 'scores'}", "--max-inputs", "8", key=KEY)
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def several(runs):
    server = Server(
        "--run", f"rr={runs / 'scores'}", "--run", f"nli={runs / 'classes'}", "--run", f"sentiment={runs / 'text'}"
    )
    yield server
    assert server.stop() == 0


def test_tei_rerank_equals_the_library(server, runs):
    expected = load_run(runs / "scores").rank("my red film", DOCUMENTS)
    answer = server.post("/rerank", {"query": "my red film", "texts": DOCUMENTS})
    assert answer.status_code == 200, answer.text
    items = answer.json()
    assert [item["index"] for item in items] == [i for i, _ in expected]
    assert [item["score"] for item in items] == pytest.approx([s for _, s in expected], abs=1e-5)
    assert all(set(item) == {"index", "score"} for item in items)
    with_text = server.post("/rerank", {"query": "my red film", "texts": DOCUMENTS, "return_text": True}).json()
    assert [item["text"] for item in with_text] == [DOCUMENTS[i] for i, _ in expected]


def test_tei_rerank_refuses_too_long_pairs_unless_truncate(server):
    long = "red " * 40
    answer = server.post("/rerank", {"query": "red", "texts": ["blue", long]})
    assert answer.status_code == 413 and "texts[1]" in answer.json()["error"]
    cut = server.post("/rerank", {"query": "red", "texts": ["blue", long, "green"], "truncate": True})
    assert cut.status_code == 200 and cut.headers["X-Bertkit-Truncated"] == "1"  # reported, as /embed reports it
    assert cut.headers["X-Bertkit-Truncated-Inputs"] == "1"
    whole = server.post("/v1/rerank", {"model": "rr", "query": "red", "documents": ["blue", "green"]})
    assert whole.headers["X-Bertkit-Truncated"] == "0" and "X-Bertkit-Truncated-Inputs" not in whole.headers
    assert (
        server.post("/v1/rerank", {"model": "rr", "query": "red", "documents": [long]}).headers[
            "X-Bertkit-Truncated-Inputs"
        ]
        == "0"
    )
    too_many = server.post("/rerank", {"query": "red", "texts": ["x"] * 9})
    assert too_many.status_code == 413 and "--max-inputs" in too_many.json()["error"]
    unauthorized = server.post("/rerank", {"query": "red", "texts": ["x"]}, headers={"Authorization": "Bearer no"})
    assert unauthorized.status_code == 401


def test_cohere_clients_rerank_through_v1_and_v2(server, runs):
    import cohere

    expected = load_run(runs / "scores").rank("my red film", DOCUMENTS, top_k=3)
    v1 = cohere.Client(api_key=KEY, base_url=server.url)
    answer = v1.rerank(model="rr", query="my red film", documents=DOCUMENTS, top_n=3, return_documents=True)
    assert [r.index for r in answer.results] == [i for i, _ in expected]
    assert [r.relevance_score for r in answer.results] == pytest.approx([s for _, s in expected], abs=1e-5)
    assert [r.document.text for r in answer.results] == [DOCUMENTS[i] for i, _ in expected]
    structured = v1.rerank(model="rr", query="my red film", documents=[{"text": d} for d in DOCUMENTS])
    assert [r.index for r in structured.results][:3] == [i for i, _ in expected] and structured.results[
        0
    ].document is None
    v2 = cohere.ClientV2(api_key=KEY, base_url=server.url)
    answer = v2.rerank(model="rr", query="my red film", documents=DOCUMENTS, top_n=2)
    assert [r.index for r in answer.results] == [i for i, _ in expected[:2]]
    with pytest.raises(cohere.errors.UnauthorizedError):
        cohere.Client(api_key="wrong", base_url=server.url).rerank(model="rr", query="q", documents=["d"])
    with pytest.raises(cohere.errors.NotFoundError):
        v1.rerank(model="nope", query="q", documents=["d"])


def test_jina_shape_usage_and_a_bad_document(server):
    payload = {"model": "rr", "query": "red", "documents": ["red thing", "blue"], "return_documents": True}
    answer = server.post("/v1/rerank", payload).json()
    assert answer["model"] == "rr" and answer["usage"]["total_tokens"] > 0 and answer["meta"]["billed_units"]
    assert answer["results"][0]["document"] == {"text": "red thing"}
    bad = server.post("/v1/rerank", {**payload, "documents": [{"text": "a", "title": "b"}]})
    assert bad.status_code == 422 and "documents.0: unknown field 'title'" in bad.json()["error"]["message"]


def test_several_runs_need_a_name_and_predict_takes_pairs(several, runs):
    import httpx

    served = {run["name"]: run for run in httpx.get(several.url + "/info").json()["runs"]}
    assert served["rr"]["reranks"] and served["nli"]["reranks"] and not served["sentiment"]["reranks"]
    assert served["rr"]["problem"] == "regression" and served["nli"]["pairs"] and not served["sentiment"]["pairs"]
    unnamed = several.post("/rerank", {"query": "red", "texts": ["red"]})
    assert unnamed.status_code == 422 and "several rerankers" in unnamed.json()["error"]
    assert several.post("/rerank", {"query": "red", "texts": ["red"], "model": "nli"}).status_code == 200
    texts_only = several.post("/rerank", {"query": "red", "texts": ["red"], "model": "sentiment"})
    assert texts_only.status_code == 422 and "does not rerank" in texts_only.json()["error"]

    pairs = [["the movie red", "red is big"], ["a blue film", "red"]]
    predicted = several.post("/predict/nli", {"inputs": pairs}).json()
    assert [p["label"] for p in predicted] == load_run(runs / "classes").predict([tuple(p) for p in pairs]).tolist()
    assert set(predicted[0]) == {"label", "score", "probabilities"}
    scores = several.post("/predict/rr", {"inputs": pairs}).json()
    assert set(scores[0]) == {"score"}
    wrong = several.post("/predict/nli", {"inputs": ["just a text"]})
    assert wrong.status_code == 422 and "pairs" in wrong.json()["error"]
    assert several.post("/predict/sentiment", {"inputs": pairs}).status_code == 422
