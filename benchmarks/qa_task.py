"""A reading-comprehension task built from CoNLL-2003 news documents (there is no QA data in ../shared/data).

    python benchmarks/qa_task.py [--data ../shared/data/conll2003] [--out /tmp/conll-qa] [--seed 0]

How questions are made, up to --per-doc of them per document (benchmarks/qa.py: two, for train.txt and dev.txt;
`-DOCSTART-` separates the documents; io/conll.py reads the sentences):

1. The context is the whole document: its sentences, words joined by single spaces (CoNLL's tokens as they are),
   sentences joined by single spaces.
2. The question sentence is drawn (seeded) from the document's sentences after its first two (the headline and,
   usually, a dateline such as "LONDON 1996-08-30") that have at least 6 words, are not all capitals, and hold a
   named entity. One of its entities (drawn, seeded) is the answer.
3. The question is that sentence with the entity replaced by "which person" (PER), "which organisation" (ORG),
   "which place" (LOC) or "what" (MISC) — capitalised at the start of the sentence — and its final "." replaced by
   "?" (a "?" is added when it ends otherwise). The answer is the entity's words joined by spaces, at the character
   offset of that mention in the context (SQuAD scoring takes any mention of the same text as right).
4. For a quarter of the questions (each drawn with probability 0.25, seeded) the context is another document of the
   same file, drawn at random: the answer is "no answer" (SQuAD v2's unanswerable question).

Written as Hugging Face's flat JSONL (id, question, context, answers: {text, answer_start}), which `bertkit finetune
--task qa`, `bertkit evaluate` and `bertkit predict` read. The files go to --out, never into the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

from bertkit.io.conll import read_tagged
from bertkit.io.text_files import decoded_lines
from bertkit.tasks.tagging import entity_spans

DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "conll2003"
PHRASES = {"PER": "which person", "ORG": "which organisation", "LOC": "which place", "MISC": "what"}
MIN_WORDS, UNANSWERABLE = 6, 0.25


def documents(path: Path) -> list[list[tuple[list[str], list[str]]]]:
    """Each document's sentences as (words, IOB2 tags), in file order."""
    data = read_tagged(path)
    starts = [number for number, line in decoded_lines(path) if line.startswith("-DOCSTART-")]
    docs: list[list] = [[] for _ in starts]
    k = 0
    for words, tags, line in zip(data.words, data.tags, data.lines):
        while k + 1 < len(starts) and starts[k + 1] < line:
            k += 1
        docs[k].append((words, tags))
    return [doc for doc in docs if doc]


def context_of(doc: list[tuple[list[str], list[str]]]) -> tuple[str, list[int]]:
    """The document as one text, and where each sentence starts in it."""
    texts = [" ".join(words) for words, _ in doc]
    starts, cursor = [], 0
    for text in texts:
        starts.append(cursor)
        cursor += len(text) + 1
    return " ".join(texts), starts


def question_of(words: list[str], tags: list[str], rng: random.Random) -> tuple[str, str, int] | None:
    """(question, answer, the answer's character offset in the sentence), or None for a sentence that makes none."""
    if len(words) < MIN_WORDS or all(w.upper() == w for w in words):
        return None
    entities = entity_spans(tags)
    if not entities:
        return None
    entity = rng.choice(entities)
    phrase = PHRASES.get(entity.type, "what")
    if entity.start == 0:
        phrase = phrase[0].upper() + phrase[1:]
    asked = words[: entity.start] + [phrase] + words[entity.end :]
    asked = asked[:-1] + ["?"] if asked[-1] == "." else asked + ["?"]
    answer = " ".join(words[entity.start : entity.end])
    offset = len(" ".join(words[: entity.start])) + (1 if entity.start else 0)
    return " ".join(asked), answer, offset


def build(path: Path, seed: int = 0, name: str = "", per_doc: int = 1) -> list[dict]:
    """Up to `per_doc` questions (from different sentences) per document that has a question sentence."""
    rng = random.Random(seed)
    docs = documents(path)
    records = []
    for index, doc in enumerate(docs):
        context, starts = context_of(doc)
        made = []
        for k in range(2, len(doc)):
            found = question_of(*doc[k], rng)
            if found:
                made.append((k, found))
        if not made:
            continue
        for n, (k, (question, answer, offset)) in enumerate(rng.sample(made, min(per_doc, len(made)))):
            record = {"id": f"{name}{index}-{n}", "question": question, "context": context}
            if rng.random() < UNANSWERABLE:
                other = rng.choice([j for j in range(len(docs)) if j != index])
                record["context"] = context_of(docs[other])[0]
                record["answers"] = {"text": [], "answer_start": []}
            else:
                start = starts[k] + offset
                assert context[start : start + len(answer)] == answer
                record["answers"] = {"text": [answer], "answer_start": [start]}
            records.append(record)
    return records


def write(records: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=Path("/tmp/conll-qa"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-doc", type=int, default=2, help="questions per document (benchmarks/qa.py's: 2)")
    options = parser.parse_args()
    for split in ("train", "dev"):
        records = build(options.data / f"{split}.txt", options.seed, f"{split}-", options.per_doc)
        path = write(records, options.out / f"{split}.jsonl")
        unanswerable = sum(1 for r in records if not r["answers"]["text"])
        print(f"{path}: {len(records)} questions, {unanswerable} without an answer")
    print(json.dumps(records[0], ensure_ascii=False)[:600])


if __name__ == "__main__":
    main()
