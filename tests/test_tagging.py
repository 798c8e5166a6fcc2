"""CoNLL reading, IOB handling and entity-level scores (checked by hand and against seqeval)."""

import random

import pytest
import seqeval.metrics as seqeval
from conftest import shared_file

from bertkit.errors import InputError
from bertkit.io.conll import read_tagged, to_iob2
from bertkit.tasks.finetune.examples import split_words
from bertkit.tasks.tagging import Entity, entity_scores, entity_spans

CONLL = """-DOCSTART- -X- -X- O\r
\r
EU NNP B-NP B-ORG\r
rejects VBZ B-VP O\r
German JJ B-NP B-MISC\r
\r
Peter NNP B-NP B-PER\r
Blackburn NNP I-NP I-PER\r
\r
\r
-DOCSTART- -X- -X- O\r
\r
BRUSSELS NNP B-NP B-LOC\r
"""


def write(tmp_path, text, name="data.txt"):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def test_reads_conll_with_docstart_blank_lines_and_crlf(tmp_path):
    data = read_tagged(write(tmp_path, CONLL))
    assert data.words == [["EU", "rejects", "German"], ["Peter", "Blackburn"], ["BRUSSELS"]]
    assert data.tags == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"], ["B-LOC"]]
    assert data.lines == [3, 7, 13]
    assert data.columns == 4 and not data.converted_from_iob1
    assert data.labels == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]


def test_reads_two_column_files_and_converts_iob1(tmp_path):
    data = read_tagged(write(tmp_path, "Peter\tI-PER\nBlackburn\tI-PER\nin\tO\nBonn\tI-LOC\n"))
    assert data.tags == [["B-PER", "I-PER", "O", "B-LOC"]] and data.converted_from_iob1


@pytest.mark.parametrize(
    "text, message",
    [
        ("EU NNP B-NP B-ORG\nrejects VBZ O\n", "line 2: 3 columns, but the file started with 4"),
        ("EU B-ORG\nrejects X-ORG\n", "line 2: tag 'X-ORG' is not IOB"),
        ("EU B-ORG\nrejects S-ORG\n", "line 2: tag 'S-ORG' is not IOB"),
        ("EU B-\n", "line 1: tag 'B-' is not IOB"),
        ("a whole sentence\n", "is not IOB"),
        ("lonely\n", "line 1: one column"),
        ("-DOCSTART- -X- O\n\n", "no sentences found"),
    ],
)
def test_bad_token_files_name_the_line(tmp_path, text, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_tagged(write(tmp_path, text))


def test_entity_spans_follow_conlleval():
    tags = ["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC", "I-ORG", "O", "B-MISC"]
    assert entity_spans(tags) == [
        Entity("PER", 0, 2),
        Entity("LOC", 3, 5),
        Entity("LOC", 5, 6),
        Entity("ORG", 6, 7),
        Entity("MISC", 8, 9),
    ]
    assert to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-ORG"]) == [
        "B-PER",
        "I-PER",
        "O",
        "B-LOC",
        "B-LOC",
        "B-ORG",
    ]


def test_entity_scores_by_hand():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "B-LOC"]]
    scores = entity_scores(gold, predicted)
    # gold: PER(0,2) LOC(3,4) ORG(0,1); predicted: PER(0,2) ORG(3,4) ORG(0,1) LOC(1,2); correct: PER, ORG(0,1)
    assert scores["precision"] == pytest.approx(2 / 4) and scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert scores["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 1}
    assert scores["per_type"]["ORG"]["precision"] == 0.5 and scores["per_type"]["ORG"]["recall"] == 1.0
    assert scores["token_accuracy"] == pytest.approx(4 / 6)


def test_entity_scores_match_seqeval_on_random_sequences():
    rng = random.Random(0)
    tags = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-ORG", "B-ORG"]
    gold = [[rng.choice(tags) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    predicted = [[t if rng.random() < 0.7 else rng.choice(tags) for t in sentence] for sentence in gold]
    ours = entity_scores(gold, predicted)
    assert ours["f1"] == pytest.approx(seqeval.f1_score(gold, predicted))
    assert ours["precision"] == pytest.approx(seqeval.precision_score(gold, predicted))
    assert ours["recall"] == pytest.approx(seqeval.recall_score(gold, predicted))
    report = seqeval.classification_report(gold, predicted, output_dict=True)
    for kind in ("PER", "LOC", "ORG"):
        assert ours["per_type"][kind]["f1"] == pytest.approx(report[kind]["f1-score"])
        assert ours["per_type"][kind]["support"] == report[kind]["support"]


def test_conll_2003_train_reads_whole():
    data = read_tagged(shared_file("conll2003", "train.txt"))
    assert len(data) == 14041 and sum(len(s) for s in data.words) == 203621
    assert data.labels == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    assert not data.converted_from_iob1


def test_split_words_keeps_character_spans():
    text = "EU rejects German call to boycott British lamb. (Peter's U.S. trip, 1996-08-22)"
    words = split_words(text)
    assert [w for w, _, _ in words] == [
        "EU",
        "rejects",
        "German",
        "call",
        "to",
        "boycott",
        "British",
        "lamb",
        ".",
        "(",
        "Peter",
        "'s",
        "U.S.",
        "trip",
        ",",
        "1996-08-22",
        ")",
    ]
    assert all(text[start:end] == word for word, start, end in words)


@pytest.mark.parametrize("aggregation", [None, "simple"])
def test_a_tagger_runs_at_its_precision_without_holding_the_tokenizer(tiny_dirs, monkeypatch, aggregation):
    """Both entity paths go through the one runner: bf16 autocasts (the aggregation path once ran fp32 whatever the
    precision, under the tokenizer's lock for the whole forward pass)."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from bertkit.encoder import precision, tokenize
    from bertkit.tasks.tagger import FineTunedTagger

    monkeypatch.setattr(precision, "fast_bf16_cpu", lambda: True)  # this CPU may emulate bf16: autocast all the same
    directory = tiny_dirs["bert_cased"]
    model = AutoModelForTokenClassification.from_pretrained(directory, num_labels=3).eval()
    tagger = FineTunedTagger(model, AutoTokenizer.from_pretrained(directory), 32, {"precision": "bf16"}, "bf16")
    seen = []
    model.classifier.register_forward_hook(
        lambda module, args, out: seen.append((out.dtype, tokenize.TOKENIZER_LOCK._is_owned()))
    )
    tagger.predict(["EU rejects German call to boycott British lamb ."], aggregation=aggregation)
    assert seen == [(torch.bfloat16, False)]
