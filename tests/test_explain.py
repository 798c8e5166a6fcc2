"""The explainer page: its JSON views against the library, and the page in a real browser (Debian's chromium)
against a real `bertkit serve` process and an offline `bertkit explain` file."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import warm
from servers import Server as Served
from sklearn.linear_model import LogisticRegression

from bertkit import text_coverage
from bertkit.errors import InputError
from bertkit.explain import page, views
from bertkit.explain.explainer import Explainer, ExplainRequest
from bertkit.io.readers import read_labelled, sample_path
from bertkit.tasks.classify import TextClassifier
from bertkit.tasks.load import load_run

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[1]
KOREA_IDS = [101, 1045, 2293, 4420, 102, 0, 0]
PAGE_DATA = r'<script id="bertkit-data" type="application/json">(.*?)</script>'  # the saved page's JSON


# ---- fixtures --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A small feature run: logistic regression (C=1) on bertkit's sample reviews."""
    data = read_labelled(sample_path("reviews.tsv"), "text", "label", header=True)
    return (
        TextClassifier(classifier=LogisticRegression(C=1.0, max_iter=3000))
        .fit(data.texts, data.labels)
        .save_pretrained(tmp_path_factory.mktemp("runs") / "reviews")
    )


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory):
    """A real `bertkit probe` output: 60 sample reviews to train on, the other 20 to score on, cls and mean."""
    root = tmp_path_factory.mktemp("probe")
    lines = sample_path("reviews.tsv").read_text(encoding="utf-8").splitlines()
    (root / "train.tsv").write_text("\n".join(lines[:61]) + "\n", encoding="utf-8")
    (root / "dev.tsv").write_text("\n".join([lines[0]] + lines[61:]) + "\n", encoding="utf-8")
    warm.run(
        [
            sys.executable,
            "-m",
            "bertkit.cli",
            "probe",
            str(root / "train.tsv"),
            "--dev",
            str(root / "dev.tsv"),
            "--text-column",
            "text",
            "--label-column",
            "label",
            "--poolings",
            "cls,mean",
            "-o",
            str(root / "probe"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return root / "probe"


@pytest.fixture(scope="module")
def tagger_dir(tmp_path_factory, tiny_dirs):
    """A tiny fine-tuned tagger (random tiny BERT, 3 epochs on 60 synthetic CoNLL sentences)."""
    from test_finetune import conll_file, tiny_args

    from bertkit.tasks.finetune import finetune

    root = tmp_path_factory.mktemp("tagger")
    train, dev = conll_file(root / "train.txt", n=60), conll_file(root / "dev.txt", n=16, seed=1)
    finetune(
        train,
        dev,
        task="token",
        output_dir=root / "ner",
        model=str(tiny_dirs["bert_cased"]),
        args=tiny_args(num_train_epochs=3, max_length=16),
    )
    return root / "ner"


@pytest.fixture(scope="module")
def explainer(encoder, run_dir, probe_dir):
    return Explainer.from_paths(encoder=encoder, run_dirs=[f"reviews={run_dir}", str(probe_dir)])


# ---- views against the library (fast) ---------------------------------------------------------------------------
def test_token_table_is_the_cli_table_padded(encoder):
    view = views.tokenization(encoder, "I love Korea", pad_to=7)
    assert [r["id"] for r in view["rows"]] == KOREA_IDS
    assert [r["mask"] for r in view["rows"]] == [1, 1, 1, 1, 1, 0, 0]
    assert [r["token"] for r in view["rows"]] == ["[CLS]", "i", "love", "korea", "[SEP]", "[PAD]", "[PAD]"]
    assert view["coverage"]["message"] == text_coverage(encoder.tokenizer, ["I love Korea"]).message()
    korean = views.tokenization(encoder, "한국어 문장입니다")
    assert korean["coverage"]["poor"] and "jamo" in korean["coverage"]["message"]


def test_model_view_equals_encoder_forward_and_attention_rows_sum_to_one(encoder):
    text = "a visually stunning rumination on love"
    implementation = encoder.model.config._attn_implementation
    view = views.through_model(encoder, text, pad_to=12, layer="all", attention_layer="all", head="all")
    batch = encoder.tokenize([text], max_length=12, padding="max_length")
    states = encoder.forward(batch).hidden_states
    assert view["n_states"] == encoder.num_layers + 1 and len(view["vectors"]) == view["n_states"]
    for i, state in enumerate(states):
        assert np.allclose(view["vectors"][str(i)], state[0].numpy(), atol=1e-4)
        assert np.allclose(view["norms"][i], state[0].norm(dim=-1).numpy(), atol=1e-3)
    attention = np.array(view["attention"]["3"]["5"])
    assert attention.shape == (12, 12)
    assert np.allclose(attention.sum(axis=1), 1.0, atol=1e-3)
    real = int(batch.attention_mask.sum())
    assert np.allclose(attention[:, real:], 0.0, atol=1e-6)  # nobody attends to [PAD]
    with torch.inference_mode():  # plain transformers with eager attention gives the same weights
        eager = views.attention_weights(encoder, batch)
    assert np.allclose(eager[2][0, 5].numpy(), attention, atol=1e-4)
    assert encoder.model.config._attn_implementation == implementation  # the shared model is left as it was
    picked = views.through_model(encoder, text, layer=2, attention_layer=1, head=0)
    assert list(picked["vectors"]) == ["2"] and list(picked["attention"]) == ["1"]
    with pytest.raises(InputError, match="layer 9"):
        views.through_model(encoder, text, layer=9)
    with pytest.raises(InputError, match="at most 16"):
        views.through_model(encoder, text, attention_layer="all", head="all", max_maps=16)


def test_the_explain_file_holds_every_layer_and_head_and_no_path(tmp_path, run_dir, monkeypatch, capsys):
    from conftest import run_cli

    output = tmp_path / "explain.html"
    code, _, err = run_cli(monkeypatch, capsys, "explain", "I love Korea", "--run", str(run_dir), "-o", output)
    assert code == 0, err
    html = output.read_text(encoding="utf-8")
    data = json.loads(re.search(PAGE_DATA, html, re.DOTALL)[1])
    model, heads = data["result"]["model"], data["info"]["heads"]
    assert len(model["vectors"]) == data["info"]["hidden_states"]  # the file switches layers with no server
    assert [len(by_head) for by_head in model["attention"].values()] == [heads] * data["info"]["layers"]
    assert str(run_dir) not in html
    assert data["result"]["predictions"]["reviews"]["attribution"]["texts"][0]["words"] == ["I", "love", "Korea"]
    args = ("explain", "I love Korea", "--run", str(run_dir), "--no-attributions", "-o", output, "--overwrite")
    assert run_cli(monkeypatch, capsys, *args)[0] == 0
    data = json.loads(re.search(PAGE_DATA, output.read_text(encoding="utf-8"), re.DOTALL)[1])
    assert "attribution" not in data["result"]["predictions"]["reviews"]


def test_sentence_vector_is_encoder_embed_and_cosine_is_right(encoder):
    view = views.sentence_vector(encoder, "I love Korea", "last4:sum", "cls+mean", compare="I hate it")
    expected = encoder.embed(["I love Korea", "I hate it"], layers="last4:sum", pooling="cls+mean")
    assert view["dim"] == expected.shape[1] == 2 * encoder.hidden_size
    assert np.allclose(view["vector"], expected[0], atol=1e-4)
    a, b = expected
    assert view["cosine"] == pytest.approx(float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)), abs=1e-4)
    with pytest.raises(InputError, match="not a valid layer spec"):
        views.sentence_vector(encoder, "I love Korea", "bogus")


@pytest.mark.slow
def test_explain_puts_every_panel_and_keeps_errors_in_their_panel(explainer, run_dir, probe_dir):
    result = explainer.explain(ExplainRequest(**{"text": "I love Korea", "layers": "bogus", "layer": 2}))
    assert "not a valid layer spec" in result["sentence"]["error"]
    assert [r["id"] for r in result["tokenization"]["rows"]] == KOREA_IDS[:5]
    run = TextClassifier.from_pretrained(run_dir)
    probabilities = run.predict_proba(["I love Korea"])[0]
    assert result["predictions"]["reviews"]["label"] == run.classes_[probabilities.argmax()]
    assert result["predictions"]["reviews"]["probability"] == f"{probabilities.max():.4f}"
    sits = result["map"]
    assert "sample reviews" in sits["source"] and sits["n"] == 80
    assert sum(len(g["x"]) for g in sits["groups"]) == 80
    record = json.loads((probe_dir / "probe.json").read_text())
    best = max(record["rows"], key=lambda r: r["score"])
    shown = result["probes"]["probe"]
    assert shown["best"] == {
        "pooling": best["pooling"],
        "layers": best["choice"],
        "score": round(100 * best["score"], 1),
    }
    assert len(shown["rows"]) == len(record["rows"]) and {s["pooling"] for s in shown["series"]} == {"cls", "mean"}
    for bad, words in [
        ({"text": ""}, "empty"),
        ({"text": "x" * 100_000}, "100,000 characters"),
        ({"text": "a", "compare": "  "}, "compare is empty"),
        ({"text": "a", "attributions": "yes"}, "attributions="),
    ]:
        with pytest.raises(InputError, match=words):
            ExplainRequest(**bad)
    assert "attribution" not in result["predictions"]["reviews"]  # asked for only


def test_attributions_are_asked_for_and_are_the_library_s(explainer, encoder):
    from bertkit import attribute_prediction, attribute_similarity

    settings = {"text": "I love Korea", "compare": "I hate Korea", "layers": "last", "pooling": "cls"}
    result = explainer.explain(ExplainRequest(**{**settings, "attributions": True}))
    expected = attribute_similarity(encoder, "I love Korea", "I hate Korea", layers="last", pooling="cls")
    assert result["sentence"]["attribution"] == expected.to_dict()
    assert result["sentence"]["attribution"]["score"] == pytest.approx(result["sentence"]["cosine"], abs=1e-4)
    predicted = attribute_prediction(explainer.runs["reviews"], "I love Korea").to_dict()
    assert result["predictions"]["reviews"]["attribution"] == predicted
    assert explainer.work_tokens(ExplainRequest(**{**settings, "attributions": True})) > 20 * explainer.work_tokens(
        ExplainRequest(**settings)
    )


def test_offline_page_inlines_everything():
    html = page.offline_page({"model": "m"}, {"text": "</script><script>alert(1)</script>"})
    assert "</script><script>alert" not in html
    plotly = page._script_safe(page.static_text("plotly.min.js"))
    assert plotly in html  # inlined whole; its own links (plotly.com in the mode bar) are never fetched at load
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html.replace(plotly, ""))
    assert html.count("</script>") == 3  # data, plotly.js and page.js each end once; the text cannot end one early
    assert "the visual guide, saved" in html and "live" not in html.replace(plotly, "").split("<script")[0]
    assert "displayModeBar: false" in page.static_text("page.js")  # plotly's tool bar covered chart titles


# what a sentence may hold that a <script> element or JSON.parse could take for its own (issue 60)
TRICKY = "a <!-- b </script> <script>c ]]> d &amp; \u2028e\u2029 </SCRIPT "


def test_the_saved_page_s_data_is_valid_json_whatever_the_text_holds():
    data = {"info": {"model": "m"}, "result": {"text": TRICKY, "words": TRICKY.split()}}
    block = re.search(PAGE_DATA, page.offline_page(data["info"], data["result"]), re.DOTALL)[1]
    assert json.loads(block) == data  # what the page's JSON.parse reads: `<\!--` was no JSON escape
    assert not re.search(r"</script|<!--|<script|[<>&\u2028\u2029]", block, re.IGNORECASE)
    script = "const s = '</script><!-- <script>', t = `</Script >`;"  # the inlined scripts: cannot end early either
    assert not re.search(r"</script|<!--", page._script_safe(script), re.IGNORECASE)
    assert page._script_safe("a < b && c </p>") == "a < b && c </p>"  # and are otherwise left as they are


@pytest.mark.slow
def test_tagger_prediction_is_its_predict_and_it_has_no_map(encoder, tagger_dir):
    explainer = Explainer.from_paths(encoder=encoder, run_dirs=[f"ner={tagger_dir}"])
    text = "EU rejects German call to boycott British lamb ."
    result = explainer.explain(ExplainRequest(text=text))
    expected = load_run(tagger_dir).predict([text])[0]
    shown = result["predictions"]["ner"]
    assert shown["kind"] == "tagger" and explainer.info()["runs"] == {"ner": "tagger"}
    assert [(e["type"], e["start"], e["end"]) for e in shown["entities"]] == [
        (e.type, e.char_start, e.char_end) for e in expected
    ]
    assert "No feature-classifier run is loaded" in result["map"]["note"] and "error" not in result["map"]


# ---- the page in a real browser (slow) -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(run_dir):
    served = Served("--run", f"reviews={run_dir}")
    yield served
    served.stop()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install chromium` (.ci/run installs it)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


class Watched:
    """A page with its console errors, page errors and requests recorded."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def update(self, action) -> None:
        """Do `action` (typing, choosing) and wait until the page has drawn the answer to it."""
        before = self.page.evaluate("window.bertkit ? window.bertkit.seq : 0")
        action()
        self.page.wait_for_function(
            "n => window.bertkit.seq > n && document.body.dataset.done === String(window.bertkit.seq)",
            arg=before,
            timeout=60_000,
        )

    def cells(self, row: str) -> list[str]:
        return self.page.locator(f"#tokens-table tr.{row} td").all_inner_texts()

    def heatmap(self) -> list:
        return self.page.evaluate("document.getElementById('heatmap').data[0].z")

    def layout_problems(self) -> list[str]:
        """Every shown chart whose figure spills out of its box or its panel, and every two charts' boxes that meet."""
        return self.page.evaluate(LAYOUT_PROBLEMS)


LAYOUT_PROBLEMS = """() => {
  const box = (e) => e.getBoundingClientRect(), name = (e) => e.id || e.className;
  const inside = (a, b) => a.left >= b.left - 1 && a.right <= b.right + 1 && a.top >= b.top - 1
    && a.bottom <= b.bottom + 1;
  const meet = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const charts = [...document.querySelectorAll('.chart')].filter((c) => c.offsetParent !== null && box(c).width > 0);
  const problems = [];
  charts.forEach((c, i) => {
    const figure = c.querySelector('.main-svg');
    if (figure && !inside(box(figure), box(c))) problems.push(`the figure of ${name(c)} spills out of its box`);
    if (!inside(box(c), box(c.closest('.panel')))) problems.push(`${name(c)} spills out of its panel`);
    charts.slice(i + 1).forEach((d) => { if (meet(box(c), box(d))) problems.push(`${name(c)} meets ${name(d)}`); });
  });
  return problems;
}"""


@pytest.fixture
def live(browser, server):
    watched = Watched(browser)
    watched.update(lambda: watched.page.goto(server.url + "/"))
    yield watched
    watched.page.close()


@pytest.mark.slow
def test_typing_a_sentence_with_padding_shows_the_guide_table(live):
    live.update(lambda: (live.page.fill("#pad", "7"), live.page.fill("#text", "I love Korea")))
    assert live.cells("ids") == [str(i) for i in KOREA_IDS]
    assert live.cells("mask") == ["1", "1", "1", "1", "1", "0", "0"]
    assert live.cells("tokens") == ["[CLS]", "i", "love", "korea", "[SEP]", "[PAD]", "[PAD]"]
    assert live.page.locator("#panel-tokens .error").is_hidden()
    live.update(lambda: live.page.fill("#compare", "I hate Korea"))
    assert "cosine" in live.page.locator("#cosine").inner_text()
    assert live.errors == []


@pytest.mark.slow
def test_changing_the_layer_redraws_the_heatmap_with_that_layers_vectors(live, encoder):
    live.update(lambda: (live.page.fill("#pad", ""), live.page.fill("#text", "I love Korea")))
    last = live.heatmap()
    live.update(lambda: live.page.select_option("#layer", "2"))
    second = live.heatmap()
    batch = encoder.tokenize(["I love Korea"])
    states = encoder.forward(batch).hidden_states
    assert np.allclose(second, states[2][0].numpy(), atol=1e-3)
    assert np.allclose(last, states[-1][0].numpy(), atol=1e-3)
    assert not np.allclose(second, last, atol=1e-2)
    before = live.page.evaluate("document.getElementById('attention').data[0].z")
    live.update(lambda: live.page.select_option("#head", "7"))
    assert live.page.evaluate("document.getElementById('attention').data[0].z") != before
    assert live.errors == []


@pytest.mark.slow
def test_prediction_panel_says_what_bertkit_predict_says(live, run_dir):
    text = "a dull , lifeless mess that goes nowhere"
    live.update(lambda: live.page.fill("#text", text))
    card = live.page.locator('.prediction[data-run="reviews"]')
    shown = (card.locator(".label").inner_text(), card.locator(".probability").inner_text())
    cli = warm.run(
        [sys.executable, "-m", "bertkit.cli", "predict", str(run_dir), text],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    row = next(csv.DictReader(io.StringIO(cli.stdout), delimiter="\t"))
    assert shown == (row["label"], row["probability"])
    assert card.locator(".why").count() == 0  # attributions are asked for: the page stays quick without them
    live.update(lambda: live.page.check("#attributions"))
    attribution = live.page.evaluate("window.bertkit.result.predictions.reviews.attribution")
    assert attribution["target"] == f"probability of {row['label']!r}"
    assert f"{attribution['score']:.4f}" == row["probability"]  # the score attributed is the one predicted
    assert_strip_is_the_json(card.locator(".why"), attribution)
    assert live.errors == []


def assert_strip_is_the_json(strip, attribution: dict) -> None:
    """The heat strip shows each text's words with the JSON's scores, in order."""
    rows = strip.locator(".heat")
    assert rows.count() == len(attribution["texts"])
    for k, text in enumerate(attribution["texts"]):
        words = rows.nth(k).locator(".word")
        assert words.all_inner_texts() == text["words"]
        shown = [float(words.nth(i).get_attribute("data-score")) for i in range(words.count())]
        assert shown == pytest.approx(text["word_scores"], rel=1e-9, abs=1e-12)
    assert "raised the score" in strip.locator(".legend").inner_text()


@pytest.mark.slow
def test_bad_input_shows_a_message_in_every_panel(live):
    live.update(lambda: live.page.fill("#text", ""))
    for panel in ("tokens", "model", "sentence", "map", "prediction", "probe"):
        assert "empty" in live.page.locator(f"#panel-{panel} .error").inner_text()
    live.update(lambda: live.page.fill("#text", "이 영화 재미없네요"))
    coverage = live.page.locator("#coverage")
    assert "jamo" in coverage.inner_text() and coverage.get_attribute("class") == "warning"
    live.update(lambda: live.page.fill("#text", "word " * 20_000))
    assert "100,000 characters" in live.page.locator("#panel-model .error").inner_text()
    live.update(lambda: (live.page.fill("#text", "I love Korea"), live.page.fill("#layers", "last9:sum")))
    assert "does not exist" in live.page.locator("#panel-sentence .error").inner_text()
    assert live.cells("ids")[:5] == [str(i) for i in KOREA_IDS[:5]]  # the other panels still draw
    live.update(lambda: live.page.fill("#layers", "last"))
    assert live.page.locator("#panel-sentence .error").is_hidden()
    # the browser logs each 422 answer as a failed resource; nothing else may reach the console
    assert [e for e in live.errors if "status of 422" not in e] == []
    assert "Traceback" not in live.page.content()


@pytest.mark.slow
def test_explain_file_opens_offline_with_no_network(browser, run_dir, probe_dir, tagger_dir, tmp_path):
    output = tmp_path / "explain.html"
    warm.run(
        [
            sys.executable,
            "-m",
            "bertkit.cli",
            "explain",
            "I love Korea",
            "--run",
            str(run_dir),
            "--run",
            str(probe_dir),
            "--run",
            f"ner={tagger_dir}",
            "--max-length",
            "7",
            "--compare",
            "I hate Korea",
            "-o",
            str(output),
        ],
        check=True,
        timeout=180,
        capture_output=True,
    )
    watched = Watched(browser)
    watched.page.goto(output.as_uri())
    watched.page.wait_for_function("document.body.dataset.updated === 'offline'", timeout=60_000)
    assert watched.cells("ids") == [str(i) for i in KOREA_IDS]
    assert watched.cells("mask") == ["1", "1", "1", "1", "1", "0", "0"]
    assert watched.page.locator("#text").is_disabled()
    before = watched.heatmap()
    watched.page.select_option("#layer", "1")
    assert watched.heatmap() != before
    rows = json.loads((probe_dir / "probe.json").read_text())["rows"]
    assert watched.page.locator('.probe[data-probe="probe"] table tr').count() == len(rows) + 1
    entities = load_run(tagger_dir).predict(["I love Korea"])[0]
    assert watched.page.locator('.prediction[data-run="ner"] mark').count() == len(entities)
    assert (
        watched.page.locator('.prediction[data-run="ner"] .tagged')
        .inner_text()
        .replace("\n", "")
        .startswith("I love Korea"[: entities[0].char_start] if entities else "I love Korea")
    )
    result = watched.page.evaluate("window.bertkit.result")  # attributions by default: the cosine's, both texts
    assert result["sentence"]["attribution"]["score"] == pytest.approx(result["sentence"]["cosine"], abs=1e-4)
    assert [t["text"] for t in result["sentence"]["attribution"]["texts"]] == ["I love Korea", "I hate Korea"]
    assert_strip_is_the_json(watched.page.locator("#cosine-attribution"), result["sentence"]["attribution"])
    assert_strip_is_the_json(
        watched.page.locator('.prediction[data-run="reviews"] .why'), result["predictions"]["reviews"]["attribution"]
    )
    ner = result["predictions"]["ner"]  # a tagger's first entity is attributed, where it finds one
    assert ("attribution" in ner) == bool(entities)
    if entities:
        assert ner["attribution"]["target"].endswith(f"entity {entities[0].text!r}")
        assert_strip_is_the_json(watched.page.locator('.prediction[data-run="ner"] .why'), ner["attribution"])
    assert watched.requests and all(url.split(":", 1)[0] in ("file", "data", "blob") for url in watched.requests)
    assert watched.errors == []
    watched.page.close()


@pytest.mark.slow
def test_the_saved_page_of_a_text_with_comment_and_script_marks_draws(browser, tmp_path, monkeypatch, capsys):
    from conftest import run_cli

    output = tmp_path / "explain.html"
    code, _, err = run_cli(monkeypatch, capsys, "explain", TRICKY, "--no-attributions", "-o", output)
    assert code == 0, err
    watched = Watched(browser)
    watched.page.goto(output.as_uri())
    assert watched.errors == []  # a JSON.parse of the data would throw here, and the page would stay blank
    watched.page.wait_for_function("document.body.dataset.updated === 'offline'", timeout=60_000)
    assert watched.page.evaluate("window.bertkit.result.settings.text") == TRICKY
    tokens = watched.cells("tokens")
    assert {"<", "!", "-", "/", "script", ">", "]", "&"} <= set(tokens) and tokens[:2] == ["[CLS]", "a"]
    assert "script" in watched.page.locator("#words").inner_text()
    assert len(watched.heatmap()) == len(tokens)  # the inlined plotly.js drew too
    assert watched.errors == []
    watched.page.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, words",
    [
        (
            [
                "",
            ],
            "text is empty",
        ),
        (["hi", "--layers", "bogus"], "--layers bogus is not a valid layer spec"),  # refused where it enters
        (["hi", "--max-length", "2"], "--max-length 2: give a whole number of at least 3"),
    ],
)
def test_explain_command_refuses_bad_options_with_one_line(tmp_path, args, words):
    output = tmp_path / "explain.html"
    done = warm.run(
        [sys.executable, "-m", "bertkit.cli", "explain", *args, "-o", str(output)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr
    assert not output.exists()


@pytest.mark.slow
def test_the_page_of_a_server_with_a_key_asks_for_it_once_and_sends_it(browser, run_dir):
    served = Served(
        "--run", f"reviews={run_dir}", "--api-key-env", "BERTKIT_PAGE_KEY", env={"BERTKIT_PAGE_KEY": "page-key-123"}
    )
    try:
        watched = Watched(browser)
        watched.page.goto(served.url + "/")
        watched.page.locator("#key-form").wait_for(state="visible", timeout=60_000)
        watched.page.fill("#api-key", "not-the-key")
        watched.page.click("#key-submit")
        watched.page.wait_for_function(
            "document.getElementById('key-message').textContent.includes('refused')", timeout=60_000
        )
        watched.update(lambda: (watched.page.fill("#api-key", "page-key-123"), watched.page.click("#key-submit")))
        assert watched.cells("tokens")[0] == "[CLS]" and watched.page.locator("#key-form").is_hidden()
        assert watched.page.evaluate("sessionStorage.getItem('bertkit-api-key')") == "page-key-123"
        watched.page.reload()  # the tab keeps the key: no second prompt
        watched.page.wait_for_function(
            "window.bertkit && window.bertkit.seq > 0 && document.body.dataset.done === String(window.bertkit.seq)",
            timeout=60_000,
        )
        assert watched.page.locator("#key-form").is_hidden()
        assert [e for e in watched.errors if "status of 401" not in e] == []
        watched.page.close()
    finally:
        served.stop()


# ---- the README's pictures ----------------------------------------------------------------------------------------
SCREENSHOTS = [
    "page.png",
    "tokens.png",
    "model.png",
    "sentence.png",
    "map.png",
    "prediction.png",
    "probe.png",
    "tokens-korean.png",
    "bad-layer-spec.png",
]


@pytest.mark.slow
def test_the_readme_pictures_come_from_a_documented_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python benchmarks/explain_page.py --screenshots docs/explain" in readme
    shown = set(re.findall(r"docs/explain/([\w-]+\.png)", readme))
    assert shown <= set(SCREENSHOTS), shown - set(SCREENSHOTS)
    usage = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "explain_page.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "--screenshots DIR" in usage


@pytest.mark.slow
def test_the_screenshot_command_writes_every_picture_into_the_folder_it_is_given(browser, tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "explain_page.py"), "--screenshots", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(SCREENSHOTS)
    assert all(p.stat().st_size > 1000 for p in tmp_path.iterdir())


# ---- pairs ---------------------------------------------------------------------------------------------------------
def test_a_pair_is_one_input_with_its_segments_and_separator(encoder):
    view = views.tokenization(encoder, "how old are you?", pair="I am six.")
    batch = encoder.tokenize(["how old are you?"], ["I am six."])
    assert view["rows"] == batch.table(0)
    assert [r["token"] for r in view["rows"]][:7] == ["[CLS]", "how", "old", "are", "you", "?", "[SEP]"]
    assert view["separators"] == [6, 11] and view["pair_words"] == ["I", "am", "six."]
    assert view["segments"] == [{"type_id": 0, "first": 0, "last": 6}, {"type_id": 1, "first": 7, "last": 11}]
    single = views.tokenization(encoder, "how old are you?")
    assert single["segments"] == [{"type_id": 0, "first": 0, "last": 6}] and single["pair"] is None


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory):
    """A tiny pair regressor (the colour pairs of test_pairs)."""
    import tiny_models
    from test_finetune import tiny_args
    from test_pairs import COLOURS, pair_file

    from bertkit.tasks.finetune import finetune

    root = tmp_path_factory.mktemp("pair-run")
    model = str(tiny_models.tiny_bert(root / "bert", extra_words=tuple(COLOURS)))
    finetune(
        pair_file(root / "train.tsv", scores=True),
        pair_file(root / "dev.tsv", n=32, seed=1, scores=True),
        task="pair",
        output_dir=root / "rr",
        model=model,
        args=tiny_args(num_train_epochs=4, max_length=24),
    )
    return root / "rr"


def test_a_pair_run_is_scored_on_the_pair_and_asks_for_one(encoder, pair_dir):
    explainer = Explainer.from_paths(encoder=encoder, run_dirs=[f"rr={pair_dir}"])
    assert explainer.info()["runs"] == {"rr": "pair regressor"}
    without = explainer.explain(ExplainRequest("my red film"))
    assert "type a second text under" in without["predictions"]["rr"]["error"]
    answer = explainer.explain(ExplainRequest("my red film", pair="a red red film"))
    expected = load_run(pair_dir).predict([("my red film", "a red red film")])[0]
    assert answer["predictions"]["rr"] == {
        "kind": "score",
        "pair": "a red red film",
        "score": round(float(expected), 4),
    }
    assert answer["tokenization"]["separators"] and answer["model"]["tokens"][-1] == "[SEP]"


@pytest.mark.slow
def test_the_page_shows_a_pair_and_a_served_pair_runs_score(browser, pair_dir, tmp_path):
    served = Served("--run", f"rr={pair_dir}")
    watched = Watched(browser)
    try:
        watched.update(lambda: watched.page.goto(served.url + "/"))
        watched.update(
            lambda: (watched.page.fill("#text", "my red film"), watched.page.fill("#pair", "a red red film"))
        )
        assert watched.cells("type-ids") == ["0"] * 5 + ["1"] * 5  # [CLS] my red film [SEP] | a red red film [SEP]
        assert watched.cells("tokens")[4] == "[SEP]" and watched.cells("tokens")[-1] == "[SEP]"
        assert watched.page.locator("#tokens-table td.segment-b").count() == 5 * 6  # six rows of the table
        assert "[SEP] at 4 and 9" in watched.page.locator("#segments").inner_text()
        score = watched.page.locator('.prediction[data-run="rr"] .score').inner_text()
        expected = load_run(pair_dir).predict([("my red film", "a red red film")])[0]
        assert float(score) == pytest.approx(float(expected), abs=1e-4)
        watched.page.screenshot(path=str(tmp_path / "pair.png"), full_page=False)
        assert watched.errors == []
    finally:
        watched.page.close()
        served.stop()


def test_the_default_pooling_is_the_model_s_own_as_embed_s(tmp_path):
    """A CLS-pooled model: the page's sentence vector is the one `Encoder.embed` (and `/embed`) gives by default."""
    import shutil

    from bertkit import Encoder
    from bertkit.encoder.models import default_model_dir

    folder = shutil.copytree(default_model_dir(), tmp_path / "cls-model")
    config = json.loads((folder / "1_Pooling" / "config.json").read_text())
    config.update(pooling_mode_cls_token=True, pooling_mode_mean_tokens=False)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(config))
    encoder = Encoder.from_pretrained(str(folder), device="cpu")
    explainer = Explainer(encoder)
    assert explainer.info()["pooling"] == "cls"
    result = explainer.explain(ExplainRequest(text="I love Korea"))
    assert result["sentence"]["pooling"] == "cls" and result["settings"]["pooling"] == "cls"
    np.testing.assert_allclose(result["sentence"]["vector"], encoder.embed(["I love Korea"])[0], atol=1e-4)
    mean = explainer.explain(ExplainRequest(text="I love Korea", pooling="mean"))["sentence"]["vector"]
    assert not np.allclose(mean, result["sentence"]["vector"], atol=1e-3)
