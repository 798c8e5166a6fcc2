"""Extractive question answering: SQuAD readers and their errors, the official v2.0 scores on hand-made cases,
run_qa's windows and labels on the one window rule, fine-tuning (resumed), answers equal to plain transformers'
logits with run_qa's post-processing, top_k across windows, the command line, the HTTP service with Hugging Face's
client, and the explainer page in a real browser."""

from __future__ import annotations

import json
import random
import threading
import time

import httpx
import numpy as np
import pytest
import tiny_models
import torch
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_explain import browser  # noqa: F401  (the module's Chromium, for the page test)
from test_finetune import tiny_args

from bertkit.errors import InputError
from bertkit.io.squad import read_squad
from bertkit.tasks.finetune import finetune
from bertkit.tasks.finetune.prepare import span_labels
from bertkit.tasks.load import load_run
from bertkit.tasks.qa import qa_windows
from bertkit.tasks.squad import normalize_answer, squad_scores, token_f1

COLOURS = ["red", "blue", "green"]
FILLER = ["the", "movie", "was", "great", "a", "film", "is", "big", "good", "bad", "I", "love", "Korea"]
QUESTION = "which colour ?"
MAX_LENGTH = 32


def qa_records(n: int, seed: int = 0, negatives: float = 0.25, long_every: int = 3) -> list[dict]:
    """Contexts of filler words naming one colour (the answer), or none (unanswerable); every `long_every`-th context
    is long enough to need several windows of MAX_LENGTH tokens."""
    rng = random.Random(seed)
    records = []
    for i in range(n):
        words = [
            rng.choice(FILLER) for _ in range(rng.randint(4, 9) + (40 if long_every and i % long_every == 0 else 0))
        ]
        answers: dict = {"text": [], "answer_start": []}
        if rng.random() >= negatives:
            k = rng.randrange(len(words) + 1)
            words.insert(k, rng.choice(COLOURS))
            start = len(" ".join(words[:k])) + (1 if k else 0)
            answers = {"text": [words[k]], "answer_start": [start]}
        records.append({"id": f"q{seed}-{i}", "question": QUESTION, "context": " ".join(words), "answers": answers})
    return records


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def as_squad(records: list[dict]) -> dict:
    """The same questions in SQuAD v2.0's nested layout (one paragraph per question)."""
    paragraphs = []
    for r in records:
        answers = [{"text": t, "answer_start": s} for t, s in zip(r["answers"]["text"], r["answers"]["answer_start"])]
        qa = {"id": r["id"], "question": r["question"], "answers": answers, "is_impossible": not answers}
        paragraphs.append({"context": r["context"], "qas": [qa]})
    return {"version": "v2.0", "data": [{"title": "colours", "paragraphs": paragraphs}]}


@pytest.fixture(scope="module")
def coloured(tmp_path_factory):
    words = (*COLOURS, "which", "colour", "?")
    return str(tiny_models.tiny_bert(tmp_path_factory.mktemp("qa-model") / "bert", extra_words=words))


@pytest.fixture(scope="module")
def qa_run(coloured, tmp_path_factory):
    """A tiny QA run fine-tuned on SQuAD v2 JSON (unanswerable questions included), interrupted and resumed."""
    root = tmp_path_factory.mktemp("qa")
    train = root / "train.json"
    train.write_text(json.dumps(as_squad(qa_records(96))), encoding="utf-8")
    dev = write_jsonl(root / "dev.jsonl", qa_records(24, seed=1))
    options = dict(task="qa", model=coloured, args=tiny_args(num_train_epochs=4, max_length=MAX_LENGTH))

    def interrupt(state):
        if state.global_step == 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        finetune(train, dev, output_dir=root / "run", callbacks=[interrupt], **options)
    assert (root / "run.partial" / "checkpoint-20").is_dir() and not (root / "run" / "bertkit.json").exists()
    finetune(train, dev, output_dir=root / "run", resume=True, **options)
    return root / "run"


@pytest.fixture(scope="module")
def qa(qa_run):
    return load_run(qa_run)


# ---- reading SQuAD ---------------------------------------------------------------------------------------------
def test_squad_json_and_flat_jsonl_read_the_same_questions(tmp_path):
    records = qa_records(12, negatives=0.4, long_every=0)
    nested = tmp_path / "v2.json"
    nested.write_text(json.dumps(as_squad(records), indent=1), encoding="utf-8")
    flat = write_jsonl(tmp_path / "flat.jsonl", records)
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(records), encoding="utf-8")
    read = [read_squad(path) for path in (nested, flat, listed)]
    keep = lambda data: [(e.id, e.question, e.context, e.answers) for e in data.examples]  # noqa: E731
    assert keep(read[0]) == keep(read[1]) == keep(read[2])
    assert read[0].negatives and any(not e.answerable for e in read[0].examples)
    example = next(e for e in read[0].examples if e.answerable)
    (text, start), *_ = example.answers
    assert example.context[start : start + len(text)] == text


def test_is_impossible_makes_a_question_unanswerable_whatever_its_plausible_answers(tmp_path):
    context = "the red film"
    qas = [
        {"id": "a", "question": "q?", "answers": [{"text": "red", "answer_start": 4}]},
        {
            "id": "b",
            "question": "q?",
            "answers": [],
            "plausible_answers": [{"text": "film", "answer_start": 8}],
            "is_impossible": True,
        },
    ]
    path = tmp_path / "v2.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}), encoding="utf-8")
    a, b = read_squad(path).examples
    assert a.answers == (("red", 4),) and b.answers == () and not b.answerable


@pytest.mark.parametrize(
    "records, words",
    [
        (
            [
                {
                    "id": "x",
                    "question": "q?",
                    "context": "the red film",
                    "answers": {"text": ["red"], "answer_start": [3]},
                }
            ],
            ["'x'", "'red' is not at answer_start 3", "that text is at 4"],
        ),
        ([{"id": "x", "question": "q?", "answers": {"text": [], "answer_start": []}}], ["'x'", "no context"]),
        (
            [{"id": "x", "question": "q?", "context": "a"}, {"id": "x", "question": "q?", "context": "b"}],
            ["'x'", "given twice"],
        ),
        ([{"id": "y", "question": " ", "context": "a"}], ["'y'", "question is missing or blank"]),
        ([{"question": "q?", "context": "a"}], ["without an id"]),
        (
            [{"id": "s", "question": "q?", "context": "a red film", "answers": {"text": "red", "answer_start": 2}}],
            ["'s'", "answers must be {text: [...], answer_start: [...]}"],
        ),
        (
            [{"id": "t", "question": "q?", "context": "a red film", "answers": {"text": "red", "answer_start": [2]}}],
            ["'t'", "two lists"],
        ),
        (
            [{"id": "u", "question": "q?", "context": "a", "answers": [{"text": "a", "answer_start": 0}]}],
            ["'u'", "answers must be"],
        ),
    ],
)
def test_bad_questions_are_refused_in_one_line_naming_file_and_id(tmp_path, records, words):
    path = write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(InputError) as error:
        read_squad(path)
    message = str(error.value)
    assert "\n" not in message and str(path) in message and all(w in message for w in words), message


def test_a_nested_file_names_the_id_of_the_bad_question_however_it_is_spelled(tmp_path):
    data = as_squad(qa_records(6, long_every=0, negatives=0.0))
    qas = [p["qas"][0] for p in data["data"][0]["paragraphs"]]
    qas[1]["id"], qas[2]["id"], qas[4]["id"] = 777, "é-1", "q0-0"  # an integer, a non-ASCII id, a duplicate
    qas[2]["question"] = ""
    path = tmp_path / "v2.json"
    for ascii_only in (True, False):
        path.write_text(json.dumps(data, indent=1, ensure_ascii=ascii_only), encoding="utf-8")
        with pytest.raises(InputError, match=f"{path}, id 'é-1': the question is missing"):
            read_squad(path)
    qas[2]["question"] = QUESTION
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    with pytest.raises(InputError, match="id 'q0-0': the id is given twice"):
        read_squad(path)
    qas[4]["id"], qas[1]["question"] = "q-new", " "
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    with pytest.raises(InputError, match="id '777': the question is missing"):
        read_squad(path)
    qas[1]["question"], qas[3]["answers"] = QUESTION, ["red"]
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    with pytest.raises(InputError, match="id 'q0-3': answers must be a list of {text"):
        read_squad(path)
    qas[3]["answers"] = [{"text": "red", "answer_start": 1}]
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    with pytest.raises(InputError, match="id 'q0-3': answer 'red' is not at answer_start 1"):
        read_squad(path)
    lines_file = write_jsonl(tmp_path / "flat.json", qa_records(3))  # datasets' to_json("x.json") writes JSON Lines
    with pytest.raises(InputError, match="line 2: not valid JSON .*one record a line \\(JSON Lines\\): name it .jsonl"):
        read_squad(lines_file)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    context=st.text(alphabet="ab é\n", max_size=12),
    text=st.text(alphabet="ab é", max_size=4),
    start=st.integers(-15, 15),
)
def test_the_reader_takes_an_answer_only_where_the_context_holds_it(tmp_path, context, text, start):
    """Property over the SQuAD reader's offsets: an answer is read exactly when its words stand at answer_start
    inside the context (Python's negative indexing, an empty text or a blank context are refused), and then the
    example's span quotes it."""
    record = {"id": "p", "question": "q?", "context": context, "answers": {"text": [text], "answer_start": [start]}}
    path = write_jsonl(tmp_path / "one.jsonl", [record])
    holds = context.strip() and text.strip() and start >= 0 and context[start : start + len(text)] == text
    if not holds:
        with pytest.raises(InputError, match="id 'p'"):
            read_squad(path)
        return
    (example,) = read_squad(path).examples
    ((found, at),) = example.answers
    assert context[at : at + len(found)] == found == text


def test_a_file_given_to_the_wrong_task_is_told_which_task_reads_it(tmp_path, monkeypatch, capsys):
    """Issue 45: SQuAD JSON without --task qa was called "plain text"; a TSV with --task qa "line 1: not valid JSON"."""
    squad = tmp_path / "train.json"
    squad.write_text(json.dumps(as_squad(qa_records(4))), encoding="utf-8")
    table = tmp_path / "train.tsv"
    table.write_text("a good film\t1\nbad\t0\n", encoding="utf-8")
    code, _, err = run_cli(monkeypatch, capsys, "finetune", squad, "-o", tmp_path / "a")
    assert code == 2 and "not JSON; a SQuAD .json file is question answering: pass --task qa" in err, err
    code, _, err = run_cli(monkeypatch, capsys, "finetune", table, "--task", "qa", "-o", tmp_path / "b")
    assert code == 2 and "question answering reads SQuAD JSON" in err and "not a .tsv file" in err, err
    assert "not valid JSON" not in err and not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# ---- the official v2.0 scores -------------------------------------------------------------------------------------
GOLD = {"q1": ["Denver Broncos", "The Denver Broncos"], "q2": ["1976"], "q3": [], "q4": [], "q5": ["an apple"]}


def test_normalisation_and_token_f1_follow_the_official_rules():
    assert normalize_answer("The  Quick, brown-fox!  an apple") == "quick brownfox apple"
    assert token_f1("the cat sat", "a cat sat down") == pytest.approx(0.8)  # P 2/3, R 1
    assert token_f1("", "") == 1.0 and token_f1("", "cat") == 0.0 and token_f1("the", "") == 1.0


def test_scores_equal_the_official_scripts_on_hand_made_cases():
    """Numbers worked out by hand and printed by the official evaluate-v2.0.py on the same data and predictions."""
    predictions = {"q1": "the broncos", "q2": "in 1976.", "q3": "", "q4": "Paris", "q5": "Apple!"}
    scores = squad_scores(GOLD, predictions)
    expected = {"exact": 40.0, "f1": 200 / 3, "total": 5, "HasAns_exact": 100 / 3, "HasAns_f1": 700 / 9}
    expected |= {"HasAns_total": 3, "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2}
    assert scores == pytest.approx(expected)
    raw = dict(predictions, q3="Denver")  # the best spans, whatever the null score
    null_diff = {"q1": -2.0, "q2": 0.5, "q3": 1.5, "q4": -1.0, "q5": 3.0}
    scores = squad_scores(GOLD, raw, null_diff, na_prob_thresh=1.0)
    assert scores["exact"] == pytest.approx(20.0) and scores["f1"] == pytest.approx(700 / 15)
    assert scores["HasAns_f1"] == pytest.approx(400 / 9) and scores["NoAns_exact"] == 50.0
    assert (scores["best_f1"], scores["best_f1_thresh"]) == (pytest.approx(160 / 3), -2.0)
    # the best exact is "no answer anywhere": the script's 0.0 is below every probability, not every logit difference
    assert (scores["best_exact"], scores["best_exact_thresh"]) == (pytest.approx(40.0), -3.0)
    probabilities = {k: 1 / (1 + np.exp(-v)) for k, v in null_diff.items()}  # the script's own kind of score
    assert squad_scores(GOLD, raw, probabilities)["best_exact_thresh"] == 0.0
    assert "q6" not in squad_scores(GOLD, {**predictions, "q6": "x"}) and squad_scores(GOLD, {"q1": "x"})["total"] == 1


def test_the_best_thresholds_give_the_best_scores_whatever_the_sign_of_the_null_scores():
    rng = random.Random(0)
    for case in range(300):
        ids = [f"q{i}" for i in range(rng.randint(1, 6))]
        gold = {k: rng.choice([[], ["red"], ["a blue film"]]) for k in ids}
        spans = {k: rng.choice(["red", "blue film", "green"]) for k in ids if rng.random() < 0.9}  # some left out
        null_diff = {k: rng.choice([-3.0, -1.5, -0.5, 0.0, 0.5, 2.0]) + rng.choice([0.0, rng.random()]) for k in ids}
        if not spans:
            continue
        scores = squad_scores(gold, spans, null_diff)  # equal scores happen (bf16 logits are coarse): ties
        for name in ("exact", "f1"):
            at = squad_scores(gold, spans, null_diff, scores[f"best_{name}_thresh"])
            best = scores[f"best_{name}"]
            assert at[name] == pytest.approx(best) and best <= 100, (case, name, gold, spans, null_diff)


# ---- windows and labels -------------------------------------------------------------------------------------------
def test_windows_are_the_tokenizers_overflow_windows_question_first(coloured):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(coloured)
    long = " ".join(["the movie was great"] * 12) + " red film"
    windows = qa_windows(tokenizer, [QUESTION, QUESTION], [long, "a red film"], MAX_LENGTH, doc_stride=6)
    hf = tokenizer(
        QUESTION, long, truncation="only_second", max_length=MAX_LENGTH, stride=6, return_overflowing_tokens=True
    )
    assert [w.ids for w in windows.parts[0]] == hf["input_ids"] and len(windows.parts[0]) > 2
    assert [w.ids for w in windows.parts[1]] == [tokenizer(QUESTION, "a red film")["input_ids"]]
    assert windows.context_side == 1 and windows.count == len(hf["input_ids"]) + 1
    first, second = windows.parts[0][:2]
    context = [i for i, s in enumerate(first.sequence_ids) if s == 1]
    assert (
        first.ids[context[-1] - 5 : context[-1] + 1]
        == [i for i, s in zip(second.ids, second.sequence_ids) if s == 1][:6]
    )
    tokenizer.padding_side = "left"  # run_qa swaps question and context for such tokenizers
    swapped = qa_windows(tokenizer, [QUESTION], [long], MAX_LENGTH, doc_stride=6)
    hf = tokenizer(
        long, QUESTION, truncation="only_first", max_length=MAX_LENGTH, stride=6, return_overflowing_tokens=True
    )
    assert [w.ids for w in swapped.parts[0]] == hf["input_ids"] and swapped.context_side == 0


def test_window_settings_are_checked_and_long_questions_cut(coloured):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(coloured)
    with pytest.raises(InputError, match="doc_stride=20: give 0 to 14"):
        qa_windows(tokenizer, [QUESTION], ["a red film"], MAX_LENGTH, doc_stride=20)
    with pytest.raises(InputError, match="2 questions but 1 contexts"):
        qa_windows(tokenizer, [QUESTION, QUESTION], ["a"], MAX_LENGTH)
    windows = qa_windows(tokenizer, ["the movie " * 40], ["a red film " * 20], MAX_LENGTH)
    question_tokens = [i for i, s in enumerate(windows.parts[0][0].sequence_ids) if s == 0]
    assert len(question_tokens) == (MAX_LENGTH - 3) // 2  # at most half a window


def test_labels_mark_the_answer_tokens_or_cls_when_a_window_lacks_it(coloured, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(coloured)
    examples = read_squad(write_jsonl(tmp_path / "data.jsonl", qa_records(30, negatives=0.2))).examples
    windows = qa_windows(tokenizer, [e.question for e in examples], [e.context for e in examples], MAX_LENGTH, 6)
    seen = {"answer": 0, "cls": 0}
    for example, parts in zip(examples, windows.parts):
        for window in parts:
            first, last = span_labels(window, example, 1, tokenizer.cls_token_id)
            context = [i for i, s in enumerate(window.sequence_ids) if s == 1]
            if (first, last) == (0, 0):  # [CLS]: no answer, or not all of it in this window
                seen["cls"] += 1
                if example.answerable:
                    text, start = example.answers[0]
                    covered = window.offsets[context[0]][0], window.offsets[context[-1]][1]
                    assert not covered[0] <= start < start + len(text) <= covered[1]
                continue
            seen["answer"] += 1
            text, start = example.answers[0]
            assert (window.offsets[first][0], window.offsets[last][1]) == (start, start + len(text))
            assert tokenizer.decode(window.ids[first : last + 1]) == text
    assert seen["answer"] >= 20 and seen["cls"] >= 10


# ---- fine-tuning and answers --------------------------------------------------------------------------------------
def test_fine_tuning_a_question_answering_model_starts_from_its_span_head(qa_run, coloured):
    """Issue 45: a SQuAD-trained model fine-tuned on a few hundred questions is the usual small-data recipe, and its
    span head was drawn afresh. It is kept now (and only a QA model's: a base model's head is new)."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from bertkit import Encoder
    from bertkit.tasks.finetune.trainer import build_model

    plain = AutoModelForQuestionAnswering.from_pretrained(qa_run).eval()
    kept = build_model(Encoder.from_pretrained(str(qa_run)), "qa", ["start", "end"]).eval()
    inputs = AutoTokenizer.from_pretrained(qa_run)(QUESTION, "the movie was great a red film", return_tensors="pt")
    with torch.no_grad():
        expected, found = plain(**inputs), kept(**inputs)
    torch.testing.assert_close(found.start_logits, expected.start_logits, rtol=0, atol=0)
    torch.testing.assert_close(found.end_logits, expected.end_logits, rtol=0, atol=0)
    fresh = build_model(Encoder.from_pretrained(coloured), "qa", ["start", "end"])
    assert not torch.equal(fresh.qa_outputs.weight, plain.qa_outputs.weight)


def test_the_run_is_a_plain_transformers_qa_model_with_the_same_logits(qa_run, qa):
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    record = json.loads((qa_run / "bertkit.json").read_text())
    assert record["bertkit"]["kind"] == "finetuned-qa" and record["task"] == "qa" and record["max_length"] == MAX_LENGTH
    assert record["data"]["negatives"] is True and record["data"]["doc_stride"] == 14  # half of 29, at most 128
    assert record["metrics"]["f1"] >= 80 and record["metrics"]["null_threshold"] == qa.null_threshold
    assert record["baseline"]["learned"] and len(record["training"]["history"]) >= 2
    model = AutoModelForQuestionAnswering.from_pretrained(qa_run).eval()
    tokenizer = AutoTokenizer.from_pretrained(qa_run)
    context = " ".join(["the movie was great"] * 10) + " a red film"
    hf = tokenizer(
        QUESTION,
        context,
        truncation="only_second",
        max_length=MAX_LENGTH,
        stride=14,
        return_overflowing_tokens=True,
        padding=True,
        return_tensors="pt",
    )
    with torch.no_grad():
        out = model(input_ids=hf["input_ids"], attention_mask=hf["attention_mask"], token_type_ids=hf["token_type_ids"])
    windows = qa.windows([QUESTION], [context])
    assert windows.count == len(hf["input_ids"]) > 1
    for k, (start, end) in enumerate(qa.outputs(windows.rows())):
        n = int(hf["attention_mask"][k].sum())
        np.testing.assert_allclose(start, out.start_logits[k, :n].numpy(), atol=1e-5)
        np.testing.assert_allclose(end, out.end_logits[k, :n].numpy(), atol=1e-5)


def run_qa_answer(model, tokenizer, question: str, context: str, stride: int, n_best: int = 20, longest: int = 30):
    """transformers' run_qa.py post-processing on plain transformers logits: the best span over all windows."""
    features = tokenizer(
        question,
        context,
        truncation="only_second",
        max_length=MAX_LENGTH,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        padding=True,
    )
    best = None
    for k in range(len(features["input_ids"])):
        inputs = {name: torch.tensor([features[name][k]]) for name in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.no_grad():
            out = model(**inputs)
        start, end = out.start_logits[0].numpy(), out.end_logits[0].numpy()
        offsets = [o if s == 1 else None for o, s in zip(features["offset_mapping"][k], features.sequence_ids(k))]
        for i in np.argsort(start)[-1 : -n_best - 1 : -1]:
            for j in np.argsort(end)[-1 : -n_best - 1 : -1]:
                if i >= len(offsets) or j >= len(offsets) or offsets[i] is None or offsets[j] is None:
                    continue
                if j < i or j - i + 1 > longest:
                    continue
                score = start[i] + end[j]
                if best is None or score > best[0]:
                    best = (score, offsets[i][0], offsets[j][1])
    return context[best[1] : best[2]]


def test_answers_are_run_qa_answers_on_plain_transformers(qa_run, qa):
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    model = AutoModelForQuestionAnswering.from_pretrained(qa_run).eval()
    tokenizer = AutoTokenizer.from_pretrained(qa_run)
    records = qa_records(12, seed=5, negatives=0.0)
    contexts = [r["context"] for r in records]
    found = qa.answer([QUESTION] * len(contexts), contexts, align_to_words=False)
    assert [a["answer"] for a in found] == [run_qa_answer(model, tokenizer, QUESTION, c, 14) for c in contexts]
    assert all(c[a["start"] : a["end"]] == a["answer"] for a, c in zip(found, contexts))
    assert sum(a["answer"] == r["answers"]["text"][0] for a, r in zip(found, records)) >= 10


def test_many_questions_run_in_token_budget_passes_and_answer_as_one_by_one(qa):
    records = qa_records(20, seed=7)
    questions, contexts = [QUESTION] * 20, [r["context"] for r in records]
    passes = []
    count = lambda module, args, kwargs: passes.append(len(kwargs["input_ids"]))  # noqa: E731 (each pass's rows)
    hook = qa.network.running.register_forward_pre_hook(count, with_kwargs=True)
    try:
        together = qa.answer(questions, contexts, top_k=2, handle_impossible_answer=True)
    finally:
        hook.remove()
    windows = qa.windows(questions, contexts).count
    assert sum(passes) == windows and len(passes) < windows / 4, passes
    alone = [qa.answer(q, c, top_k=2, handle_impossible_answer=True) for q, c in zip(questions, contexts)]
    for a, b in zip(together, alone):
        assert [(x["answer"], x["start"], x["end"]) for x in a] == [(x["answer"], x["start"], x["end"]) for x in b]
        assert [x["score"] for x in a] == pytest.approx([x["score"] for x in b], abs=1e-5)


def test_top_k_answers_come_from_every_window_of_a_long_context_once_each(qa):
    """transformers #26286 / #38984: top_k over a long context gave answers of one window, or the same one twice."""
    context = "red " + " ".join(["the movie was great"] * 8) + " a blue film " + " ".join(["good"] * 20) + " green"
    found = qa.answer(QUESTION, context, top_k=8)
    assert qa.windows([QUESTION], [context]).count >= 3
    assert {"red", "blue", "green"} <= {a["answer"] for a in found[:4]}, found
    spans = [(a["start"], a["end"]) for a in found]
    assert len(set(spans)) == len(spans) and all(context[s:e] == a["answer"] for (s, e), a in zip(spans, found))
    assert found == sorted(found, key=lambda a: -a["score"]) and sum(a["score"] for a in found) <= 1 + 1e-9
    repeated = "the red film " * 3  # a short context in one window
    assert qa.answer(QUESTION, repeated, top_k=3)[0]["answer"] == "red"


def test_the_null_answer_follows_squad_v2_and_the_threshold_saved_in_the_run(qa):
    answerable, unanswerable = "the movie was red", "the movie was great and big"
    found = qa.answer([QUESTION] * 2, [answerable, unanswerable], handle_impossible_answer=True)
    assert found[0]["answer"] == "red" and found[1] == {"answer": "", "score": found[1]["score"], "start": 0, "end": 0}
    assert qa.answer([QUESTION] * 2, [answerable, unanswerable]) == found  # a v2 run's default: its own threshold
    best_span = qa.answer(QUESTION, unanswerable, handle_impossible_answer=False)
    assert best_span["answer"] != "" and best_span["end"] > best_span["start"]
    windows = qa.windows([QUESTION], [unanswerable])
    candidate = qa.candidates(windows)[0]
    (span, logit, _) = candidate.best()
    assert candidate.null - logit > qa.null_threshold  # no answer: the null score beats the best span's by more
    qa.null_threshold = 1e6
    try:
        assert qa.answer(QUESTION, unanswerable, handle_impossible_answer=True)["answer"] != ""
    finally:
        qa._threshold = None
    with pytest.raises(InputError, match="top_k=0"):
        qa.answer(QUESTION, answerable, top_k=0)
    with pytest.raises(InputError, match="doc_stride=99"):
        qa.answer(QUESTION, answerable, doc_stride=99)


@pytest.mark.parametrize(
    "options, words",
    [
        (dict(max_seq_len=1), "max_seq_len=1: give a whole number of at least 8"),
        (dict(max_question_len=0), "max_question_len=0: give a whole number from 1 to 1024"),
        (dict(max_answer_len=-2), "max_answer_len=-2: give a whole number from 1 to 1024"),
        (dict(handle_impossible_answer="no"), "handle_impossible_answer='no': give True, False or None"),
        (dict(align_to_words=1), "align_to_words=1: give True or False"),
        (dict(question=None), "question=None: give a string, or a list of them"),
    ],
)
def test_answers_parameters_are_refused_in_one_line_not_changed(qa, options, words):
    texts = {"question": options.pop("question", QUESTION), "context": "the movie was red"}
    with pytest.raises(InputError, match=words.replace("(", "\\(")):
        qa.answer(**texts, **options)


def test_answer_options_are_one_table_for_python_the_command_line_and_http(monkeypatch, capsys):
    """`AnswerOptions` is the one declaration: the request model's `parameters`, `bertkit answer`'s flags and the
    Python keywords are its fields, with its bounds; a bound is refused in the same words on every face."""
    import dataclasses

    from bertkit.serve.schemas import Vocabulary, request_models
    from bertkit.tasks.qa import AnswerOptions

    fields = {f.name: f for f in dataclasses.fields(AnswerOptions)}
    models = request_models(Vocabulary(max_inputs=4, max_dimensions=8))
    schema = models.PredictRequest.model_json_schema()["$defs"]["QuestionParameters"]["properties"]
    assert set(schema) == set(fields)
    for name, field in fields.items():
        number = schema[name]["anyOf"][0]
        if field.metadata["low"] is not None:
            assert (number["minimum"], number.get("maximum")) == (field.metadata["low"], field.metadata["high"]), name
        else:
            assert number["type"] == "boolean", name
    code, out, _ = run_cli(monkeypatch, capsys, "answer", "--help")
    flags = [(f.metadata["flag"] or "--" + name.replace("_", "-")).split("/")[0] for name, f in fields.items()]
    assert code == 0 and all(flag in out for flag in flags), out
    with pytest.raises(InputError, match=r"^top_k=101: give a whole number from 1 to 100\.$"):
        AnswerOptions(top_k=101)
    with pytest.raises(InputError, match=r"^doc_stride=-1: give a whole number of at least 0, or None\.$"):
        AnswerOptions(doc_stride=-1)
    with pytest.raises(ValueError, match="top_k\n  Input should be less than or equal to 100"):
        body = {"inputs": {"question": "q", "context": "c"}, "parameters": {"top_k": 101}}
        models.PredictRequest.model_validate(body)


def test_questions_come_as_any_list_of_strings(qa):
    import pandas as pd

    questions, contexts = [QUESTION, QUESTION], ["a red film", "the movie was blue"]
    expected = qa.answer(questions, contexts)
    assert qa.answer(np.array(questions), np.array(contexts)) == expected  # as every bertkit entry point takes them
    assert qa.answer(pd.Series(questions), pd.Series(contexts)) == expected


def test_evaluate_is_squad_on_the_runs_own_predictions(qa_run, qa, tmp_path):
    records = qa_records(24, seed=1)
    dev = write_jsonl(tmp_path / "dev.jsonl", records)
    report = qa.evaluate(dev)
    answers, spans, null_diff = qa.predictions(read_squad(dev).examples)
    gold = {r["id"]: r["answers"]["text"] for r in records}
    assert report["f1"] == pytest.approx(squad_scores(gold, answers)["f1"])  # the prediction file scores the same
    assert report["f1"] == pytest.approx(squad_scores(gold, spans, null_diff, qa.null_threshold)["f1"])
    assert {"HasAns_f1", "NoAns_f1", "best_f1", "best_f1_thresh"} <= set(report) and report["f1"] >= 80
    assert "HasAns" in report.text() and "no-answer threshold" in report.text()


def test_one_question_gets_one_answer_on_every_face(qa_run, qa, tmp_path, monkeypatch, capsys):
    """Issue 45: `answer`, the command line, `predict` on a SQuAD file, the service and the page gave a v2 run's
    question different answers ("Lima" against "no answer"). Each face now answers with the run's saved threshold."""
    from fastapi.testclient import TestClient

    from bertkit.explain import views
    from bertkit.serve.app import create_app
    from bertkit.serve.runs import load_runs

    records = qa_records(12, seed=7)
    questions, contexts = [r["question"] for r in records], [r["context"] for r in records]
    library = [a["answer"] for a in qa.answer(questions, contexts)]
    assert "" in library and any(library), library  # both kinds of answer are asked, so the faces can disagree
    predicted = qa.predictions(read_squad(write_jsonl(tmp_path / "q.jsonl", records)).examples)[0]
    assert [predicted[r["id"]] for r in records] == library
    page = [views.prediction(qa, q, None, c)["answer"]["answer"] for q, c in zip(questions, contexts)]
    assert page == library
    with TestClient(create_app(runs=load_runs({"qa": qa_run}))) as client:
        body = {"inputs": [{"question": q, "context": c} for q, c in zip(questions, contexts)]}
        served = client.post("/predict/qa", json=body).json()
    assert [a["answer"] for a in served] == library
    for question, context, expected in zip(questions[:4], contexts[:4], library):
        code, out, err = run_cli(
            monkeypatch, capsys, "answer", qa_run, "--question", question, "--context", context, "--text"
        )
        assert code == 0 and json.loads(out)["answer"] == expected, err


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    question=st.text(alphabet=" \t\n\u3000" + "".join(COLOURS + FILLER), max_size=12),
    context=st.text(alphabet=" \t\n\u00a0" + "".join(COLOURS + FILLER), max_size=60),
)
def test_answer_refuses_blank_questions_and_contexts_and_otherwise_quotes_its_context(qa, question, context):
    """Property over `answer()`'s inputs: a question or context with no words is refused in one line (as transformers'
    pipeline refuses an empty one); any other gets answers whose offsets quote the context."""
    if not question.strip() or not context.strip():
        with pytest.raises(InputError, match="is empty or blank"):
            qa.answer(question, context)
        return
    for found in qa.answer(question, context, top_k=3, handle_impossible_answer=True):
        assert 0 <= found["start"] <= found["end"] <= len(context)
        assert context[found["start"] : found["end"]] == found["answer"]


# ---- the command line ---------------------------------------------------------------------------------------------
def test_answer_evaluate_and_predict_on_the_command_line(qa_run, qa, tmp_path, monkeypatch, capsys):
    context = tmp_path / "context.txt"
    context.write_text("the movie was blue and great", encoding="utf-8")
    code, out, err = run_cli(
        monkeypatch, capsys, "answer", qa_run, "--question", QUESTION, "--context", context, "--top-k", "2"
    )
    assert code == 0, err
    assert json.loads(out) == qa.answer(QUESTION, "the movie was blue and great", top_k=2)
    code, out, _ = run_cli(
        monkeypatch, capsys, "answer", qa_run, "--question", QUESTION, "--question", QUESTION, "--context", "a red film"
    )
    assert [json.loads(line)["answer"] for line in out.splitlines()] == ["red", "red"]
    long = "red " + " ".join(["the movie was great"] * 8) + " a blue film " + " ".join(["good"] * 20) + " green"
    assert len(long) > 255  # longer than a file name may be: a context, not a missing file
    code, out, err = run_cli(
        monkeypatch, capsys, "answer", qa_run, "--question", QUESTION, "--context", long, "--top-k", "3"
    )
    assert code == 0 and json.loads(out) == qa.answer(QUESTION, long, top_k=3), err
    code, _, err = run_cli(monkeypatch, capsys, "answer", qa_run, "--question", QUESTION, "--context", "red/blue")
    assert code == 2 and "no such file" in err and "pass --text" in err
    code, out, err = run_cli(
        monkeypatch, capsys, "answer", qa_run, "--question", QUESTION, "--context", "red/blue", "--text"
    )
    assert code == 0 and json.loads(out) == qa.answer(QUESTION, "red/blue"), err
    code, out, err = run_cli(
        monkeypatch, capsys, "answer", qa_run, "--question", QUESTION, "--context", ""
    )  # not the folder "."
    assert code == 2 and "context 0 is empty or blank" in err and not out  # as transformers' pipeline refuses it
    dev = write_jsonl(tmp_path / "dev.jsonl", qa_records(16, seed=3))
    code, out, _ = run_cli(monkeypatch, capsys, "evaluate", qa_run, dev)
    assert code == 0 and "HasAns" in out and "NoAns" in out and "at the run's no-answer threshold" in out
    assert "best threshold on these questions for F1" in out and "for exact" in out
    code, _, err = run_cli(monkeypatch, capsys, "predict", qa_run, dev, "-o", tmp_path / "predictions.json")
    assert code == 0, err
    written = json.loads((tmp_path / "predictions.json").read_text())
    assert written == qa.predictions(read_squad(dev).examples)[0] and len(written) == 16  # official {id: answer}
    code, _, err = run_cli(monkeypatch, capsys, "predict", qa_run, dev, "-o", tmp_path / "predictions.json")
    assert code == 2 and "--overwrite" in err


def test_finetune_qa_on_the_command_line_warns_when_it_learns_nothing(coloured, tmp_path, monkeypatch, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", qa_records(24, seed=2, long_every=0))
    dev = write_jsonl(tmp_path / "dev.jsonl", qa_records(12, seed=4, negatives=0.5, long_every=1))
    args = ["finetune", train, "--dev", dev, "--task", "qa", "-o", tmp_path / "run", "--model", coloured]
    code, _, err = run_cli(
        monkeypatch, capsys, *args, "--epochs", "2", "--lr", "1e-9", "--max-length", "24", "--doc-stride", "4"
    )
    assert code == 0, err
    assert "within 5 points of always answering 'no answer'" in err and "dev F1" in err
    assert "--epochs 10 --lr 1e-4 --patience 10" in err  # what 300 questions of the reading task learned with
    windows = sum(
        len(p)
        for p in qa_windows(
            load_run(tmp_path / "run").tokenizer,
            *zip(*[(r["question"], r["context"]) for r in qa_records(24, seed=2, long_every=0)]),
            24,
            4,
        ).parts
    )
    assert f"fine-tuning qa model on 24 questions ({windows} windows), dev 12;" in err
    epochs = [line for line in err.splitlines() if line.startswith("epoch ")]
    scores = [line.split("dev F1 ")[1].split()[0].rstrip(",") for line in epochs]
    assert scores[0] == scores[1] and "(best)" in epochs[0] and "(best)" not in epochs[1], epochs  # a tie keeps 1
    record = json.loads((tmp_path / "run" / "bertkit.json").read_text())
    assert record["args"]["doc_stride"] == 4 and record["data"]["doc_stride"] == 4 and not record["baseline"]["learned"]
    schedule = {key: record["args"][key] for key in ("num_train_epochs", "learning_rate", "early_stopping_patience")}
    assert schedule == {"num_train_epochs": 2, "learning_rate": 1e-9, "early_stopping_patience": 10}  # 24 questions
    code, _, err = run_cli(monkeypatch, capsys, *args, "--overwrite", "--doc-stride", "50", "--max-length", "24")
    assert code == 2 and "--doc-stride 50: give 0 to 10" in err


def test_a_qa_run_a_few_points_above_no_answer_is_warned_about(caplog):
    """Issue 45: dev F1 30.8 against 27.8 for "always no answer" passed silently; within 5 points now warns, saying
    what to change, and a run clear of the baseline does not."""
    from bertkit.tasks.finetune.checkpoint import learned_anything
    from bertkit.tasks.finetune.run import QA_ADVICE, QA_MARGIN

    baseline = {"what": "always answering 'no answer'", "score": 27.8, "margin": QA_MARGIN, "advice": QA_ADVICE}
    with caplog.at_level("WARNING", logger="bertkit"):
        assert learned_anything(baseline, 30.8, "F1")["learned"] is False
        assert learned_anything(baseline, 27.8 + QA_MARGIN + 0.1, "F1")["learned"] is True
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "(30.8000) is within 5 points of always answering 'no answer' (27.8000)" in warning and "--epochs" in warning


# ---- the HTTP service and the explainer page ----------------------------------------------------------------------
LONG_CONTEXT = " ".join(["the movie was great"] * 8) + " a blue film " + " ".join(["good"] * 12) + " red"


@pytest.mark.slow
def test_served_qa_answers_hugging_faces_client_and_bounds_long_contexts(qa_run, qa, monkeypatch):
    from huggingface_hub import InferenceClient, constants
    from servers import Server
    from test_serve import KEY

    monkeypatch.setattr(constants, "is_offline_mode", lambda: False)  # the tests run offline; this server is local
    server = Server("--run", f"qa={qa_run}", "--max-queue-tokens", "4096", key=KEY)  # 4096 // 32: 128 windows
    try:
        client = InferenceClient(server.url + "/predict/qa", token=KEY)
        one = client.question_answering(QUESTION, "the movie was blue and great")
        expected = qa.answer(QUESTION, "the movie was blue and great")
        assert (one.answer, one.start, one.end) == (expected["answer"], expected["start"], expected["end"])
        assert one.score == pytest.approx(expected["score"], abs=1e-6)
        options = dict(top_k=3, doc_stride=10, max_answer_len=5, handle_impossible_answer=True, align_to_words=False)
        several = client.question_answering(QUESTION, LONG_CONTEXT, max_question_len=8, **options)
        expected = qa.answer(QUESTION, LONG_CONTEXT, max_question_len=8, **options)
        assert [(a.answer, a.start, a.end) for a in several] == [(a["answer"], a["start"], a["end"]) for a in expected]
        tokens = server.metric("bertkit_tokens_total")
        batch = server.post(
            "/predict/qa", {"inputs": [{"question": QUESTION, "context": c} for c in ("a red film", "big")]}
        )
        assert [a["answer"] for a in batch.json()] == [
            a["answer"] for a in qa.answer([QUESTION] * 2, ["a red film", "big"])
        ]
        spent = server.metric("bertkit_tokens_total") - tokens
        assert spent == qa.windows([QUESTION] * 2, ["a red film", "big"]).tokens
        refused = server.post("/predict/qa", {"inputs": "a red film"})
        assert refused.status_code == 422 and "answers questions" in refused.json()["error"]
        assert (
            httpx.post(server.url + "/predict/qa", json={"inputs": {"question": "q", "context": "c"}}).status_code
            == 401
        )
        stride = server.post(
            "/predict/qa", {"inputs": {"question": "q", "context": "c"}, "parameters": {"doc_stride": 99}}
        )
        assert stride.status_code == 422 and "doc_stride=99" in stride.json()["error"]
        # 100,000 characters: tokenized off the event loop, refused by its window count; /health answers meanwhile
        huge = {"inputs": {"question": QUESTION, "context": ("the movie was great " * 5000)[:100_000]}}
        answers: list = []
        worker = threading.Thread(target=lambda: answers.extend(server.post("/predict/qa", huge) for _ in range(3)))
        worker.start()
        waits = []
        while worker.is_alive():
            started = time.perf_counter()
            assert httpx.get(server.url + "/health", timeout=5).status_code == 200
            waits.append(time.perf_counter() - started)
        worker.join()
        assert [a.status_code for a in answers] == [413] * 3 and max(waits) < 0.5, waits
        assert "windows" in answers[0].json()["error"] and answers[0].json()["error_type"] == "input_too_long"
        fits = server.post("/predict/qa", {"inputs": {"question": QUESTION, "context": LONG_CONTEXT * 8}})
        assert fits.status_code == 200 and fits.json()["answer"]
    finally:
        assert server.stop() == 0, server.output()[-3000:]


@pytest.mark.parametrize(
    "inputs, words",
    [
        ({"question": QUESTION}, "inputs.context: Field required"),
        ({"question": 5, "context": "a red film"}, "inputs.question: must be a string, not int"),
        ([{"question": QUESTION, "context": "a"}, {"context": "b"}], "inputs.1.question: Field required"),
        (
            {"question": QUESTION, "context": "a", "contxt": "b"},
            "inputs: unknown field 'contxt'; check its spelling",
        ),
        (5, "inputs: must be a string, a list of strings or of [text, pair] pairs, or a question object, not int"),
    ],
)
def test_a_question_with_a_field_missing_or_wrong_is_named_by_that_field(qa_run, inputs, words):
    from fastapi.testclient import TestClient

    from bertkit.serve.app import create_app
    from bertkit.serve.runs import load_runs

    with TestClient(create_app(runs=load_runs({"qa": qa_run}))) as client:
        response = client.post("/predict/qa", json={"inputs": inputs})
    assert response.status_code == 422 and response.json()["error"] == words + ".", response.text


def test_the_explainer_view_of_a_qa_run_is_its_answer_with_the_window_and_null_score(qa):
    from bertkit.explain import views

    view = views.prediction(qa, QUESTION, None, LONG_CONTEXT)
    expected = qa.answer(QUESTION, LONG_CONTEXT, handle_impossible_answer=True)
    assert view["kind"] == "qa" and view["answer"] == expected and view["windows"] > 1
    first, last = view["span"]
    assert first <= expected["start"] < expected["end"] <= last  # the answer is inside the window it came from
    assert len(view["tokens"]) == len(view["start"]) == len(view["end"])
    assert sum(view["start"]) <= 1 and sum(view["start"]) + view["null_probability"] > 0
    assert view["null_score"] == pytest.approx(qa.candidates(qa.windows([QUESTION], [LONG_CONTEXT]))[0].null, abs=1e-4)
    with pytest.raises(InputError, match="type the context under"):
        views.prediction(qa, QUESTION, None, None)


@pytest.mark.parametrize("threshold", [1e9, -1e9], ids=["a span", "no answer"])
def test_an_answer_is_attributed_over_question_and_context_and_adds_up(qa_run, threshold):
    from bertkit import attribute_prediction

    qa = load_run(qa_run)
    qa.null_threshold = threshold  # one run, either answer: a span always beats the null, or never
    answer = qa.answer(QUESTION, LONG_CONTEXT)
    found = qa.candidates(qa.windows([QUESTION], [LONG_CONTEXT]))[0]
    result = attribute_prediction(qa, QUESTION, LONG_CONTEXT, n_steps=64)
    if threshold > 0:
        assert answer["answer"] and result.target == f"start + end logit of the answer {answer['answer']!r}"
        assert result.score == pytest.approx(found.spans[(answer["start"], answer["end"])][0], abs=1e-4)
    else:
        assert answer["answer"] == "" and result.target == "start + end logit of no answer ([CLS])"
        assert result.score == pytest.approx(found.null, abs=1e-4)
    question, context = result.texts
    assert question.words == QUESTION.split() and context.words == LONG_CONTEXT.split()
    total = question.token_scores.sum() + context.token_scores.sum()
    assert total + question.baseline_score == pytest.approx(
        result.score, abs=0.02 * abs(result.score - question.baseline_score) + 1e-6
    )
    with pytest.raises(InputError, match="give the question and its context"):
        attribute_prediction(qa, QUESTION)


@pytest.mark.slow
def test_the_page_shows_question_context_answer_and_probability_strip(browser, qa_run, qa, tmp_path):  # noqa: F811
    from servers import Server as Served
    from test_explain import Watched, assert_strip_is_the_json

    served = Served("--run", f"qa={qa_run}")
    watched = Watched(browser)
    try:
        watched.update(lambda: watched.page.goto(served.url + "/"))
        watched.update(lambda: (watched.page.fill("#text", QUESTION), watched.page.fill("#pair", LONG_CONTEXT)))
        card = watched.page.locator('.prediction[data-run="qa"]')
        view = qa.explanation(QUESTION, LONG_CONTEXT)
        assert card.locator(".qa-question").inner_text() == QUESTION
        assert card.locator("mark.answer").inner_text() == view["answer"]["answer"]
        window = card.locator(".window").inner_text()
        assert window == LONG_CONTEXT[view["span"][0] : view["span"][1]]
        facts = card.locator(".qa-facts").inner_text()
        assert f"from window {view['window'] + 1} of {view['windows']}" in facts and "null score" in facts
        strip = watched.page.evaluate("document.querySelector('.prediction[data-run=\"qa\"] .qa-strip').data[0]")
        assert strip["z"] == [view["start"], view["end"]] and len(strip["x"]) == len(view["tokens"])
        watched.update(lambda: watched.page.check("#attributions"))
        attribution = watched.page.evaluate("window.bertkit.result.predictions.qa.attribution")
        assert_strip_is_the_json(card.locator(".why"), attribution)
        card.screenshot(path=str(tmp_path / "qa-card.png"))
        watched.page.screenshot(path=str(tmp_path / "qa-page.png"), full_page=True)
        # a 120-token question and context: every box grows with its figure, and no two meet
        longer = LONG_CONTEXT + " " + " ".join(["the movie was great"] * 17)
        watched.update(lambda: watched.page.fill("#pair", longer))
        assert len(watched.cells("tokens")) >= 120 and watched.layout_problems() == []
        watched.page.screenshot(path=str(tmp_path / "qa-page-120-tokens.png"), full_page=True)
        assert watched.errors == []
    finally:
        watched.page.close()
        served.stop()


def test_a_quantized_qa_run_loads_and_answers_at_int8(qa_run, qa, tmp_path):
    """`bertkit quantize` of a QA run keys its calibration on the run's own layers: it loads at int8 and answers."""
    from bertkit.tasks.quantize import quantize

    records = qa_records(48, seed=2)
    contexts = [r["context"] for r in records]
    report = quantize(str(qa_run), tmp_path / "int8", contexts)
    assert report.kind == "finetuned-qa" and report.smoothed > 0 and "same answer span" in report.fidelity
    int8 = load_run(tmp_path / "int8", precision="int8")
    questions = [r["question"] for r in records]
    ours, reference = (run.answer(questions, contexts) for run in (int8, qa))
    same = sum(a["answer"] == b["answer"] for a, b in zip(ours, reference)) / len(records)
    assert same >= 0.75, (same, ours[:3], reference[:3])


def test_answer_attributions_on_the_command_line_are_the_runs_own(qa_run, qa, monkeypatch, capsys):
    context = "the movie was blue and great"
    code, out, err = run_cli(
        monkeypatch, capsys, "answer", qa_run, "--question", QUESTION, "--context", context, "--attributions", "--json"
    )
    assert code == 0, err
    line = json.loads(out)
    expected = qa.explain(QUESTION, context).to_dict()
    assert line["answer"] == qa.answer(QUESTION, context) and line["question"] == QUESTION
    assert line["target"] == expected["target"] and line["score"] == pytest.approx(expected["score"], abs=1e-5)
    for printed, attributed in zip(line["texts"], expected["texts"]):
        assert printed["words"] == attributed["words"]
        np.testing.assert_allclose(printed["word_scores"], attributed["word_scores"], atol=1e-5)
    code, out, err = run_cli(
        monkeypatch, capsys, "answer", qa_run, "--question", QUESTION, "--context", context, "--attributions"
    )
    assert code == 0 and out.startswith(expected["target"]) and f"{QUESTION!r}: baseline" in out, err
    code, out, err = run_cli(monkeypatch, capsys, "predict", qa_run, QUESTION, "--attributions")
    assert code == 2 and "bertkit answer --attributions" in err and not out
    code, out, err = run_cli(  # another answer than the one attributed would be printed
        monkeypatch,
        capsys,
        "answer",
        qa_run,
        "--question",
        QUESTION,
        "--context",
        context,
        "--attributions",
        "--max-answer-len",
        "2",
    )
    assert code == 2 and "at the default answer options" in err and not out
