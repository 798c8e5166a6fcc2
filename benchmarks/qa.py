"""Extractive question answering on a reading task built from CoNLL-2003 (benchmarks/qa_task.py says how): the
fine-tuned packaged model against two baselines, the effect of --doc-stride on long contexts, and the speed of
`answer` against a naive loop.

    python benchmarks/qa.py [--data ../shared/data/conll2003] [--work /tmp/conll-qa] [--json qa.json]

1. Fine-tune: `bertkit.finetune(train.jsonl, task="qa")` on the packaged default model (model=None): two questions
   per train.txt document (1,786), one epoch, lr 2e-4, batch 16, --doc-stride 64, max length 384 capped to the
   model's 256 (lr 2e-4 and batch 16 are now the QA defaults; the old ones, 1e-4 and 32, learned nothing in two epochs
   of 540 questions); the no-answer threshold is chosen on 10% of the training questions held out (seeded).
2. Score on the dev split (dev.txt's documents, never trained on or chosen on) by the official SQuAD v2.0 rules:
   exact match, F1, HasAns / NoAns, at the run's threshold. Baselines on the same questions:
   - always "no answer";
   - sliding-window word overlap (a lexical reader in the spirit of MCTest's baseline): the candidates are the runs
     of up to 4 capitalised words of the context that are not all in the question; each scores the share of the
     question's words (lower case, without wh-words and punctuation) found within as many words either side of it
     as the question has; the best candidate is the answer, or "no answer" when its share is under a threshold
     chosen on the training questions (the best F1 there).
3. --doc-stride: the dev questions whose question + context exceed the run's length, answered with windows sharing
   0, 32, 64 and 126 tokens (the same run).
4. Speed, questions/s over the dev split, median of 3 runs each, interleaved, in one process (and, where the CPU
   has native bf16, both ways again in bf16 — bertkit's `precision="bf16"`, the loop under torch.autocast — with the
   bf16 run's scores):
   `FineTunedQA.answer(questions, contexts)` (what `bertkit answer` calls: every window of every question through
   the one runner, token-budget passes) against a naive loop, one question at a time through
   `AutoModelForQuestionAnswering` with run_qa.py's pre-processing (its default: windows padded to max_length) and
   its post-processing (`postprocess_qa_predictions`: 20 best starts and ends per window, version 2 with the null
   threshold); and the same loop padded to the longest window.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import qa_task  # noqa: E402

from bertkit.io.squad import read_squad  # noqa: E402
from bertkit.tasks.squad import squad_scores  # noqa: E402

STOP = {"which", "what", "who", "where", "when", "person", "organisation", "place", "?", ",", ".", "the", "a", "of"}
CAPITAL = re.compile(r"^[A-Z]")


# ---- the lexical baseline --------------------------------------------------------------------------------------
def lexical_candidates(question: str, context: str) -> list[tuple[float, str]]:
    """(share of the question's words near it, text) of each candidate span of the context."""
    asked = {w.lower() for w in question.split()} - STOP
    words = context.split()
    found = []
    k = 0
    while k < len(words):
        if not CAPITAL.match(words[k]):
            k += 1
            continue
        end = k
        while end < len(words) and end - k < 4 and CAPITAL.match(words[end]):
            end += 1
        span = words[k:end]
        if not {w.lower() for w in span} <= asked:
            width = len(question.split())
            near = {w.lower() for w in words[max(0, k - width) : k] + words[end : end + width]}
            found.append((len(asked & near) / max(1, len(asked)), " ".join(span)))
        k = end
    return found


def lexical_answers(examples, threshold: float) -> dict[str, str]:
    answers = {}
    for e in examples:
        candidates = lexical_candidates(e.question, e.context)
        best = max(candidates, default=(0.0, ""))
        answers[e.id] = best[1] if best[0] >= threshold else ""
    return answers


def choose_lexical_threshold(examples) -> float:
    gold = {e.id: [t for t, _ in e.answers] for e in examples}
    grid = [i / 20 for i in range(21)]
    return max(grid, key=lambda t: squad_scores(gold, lexical_answers(examples, t))["f1"])


# ---- run_qa's naive loop ---------------------------------------------------------------------------------------
def run_qa_loop(model, tokenizer, examples, max_length: int, stride: int, threshold: float, padding: str) -> dict:
    """One question at a time: run_qa.py's prepare_validation_features (the question cut to 64 tokens, as the
    pipeline's max_question_len: run_qa fails on a longer one), the model, postprocess_qa_predictions."""
    answers = {}
    for e in examples:
        question = e.question.lstrip()
        offsets = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        features = tokenizer(
            question[: offsets[63][1]] if len(offsets) > 64 else question,
            e.context,
            truncation="only_second",
            max_length=max_length,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
            padding=padding,
        )
        inputs = {k: torch.tensor(features[k]) for k in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.inference_mode():
            out = model(**inputs)
        start, end = out.start_logits.float().numpy(), out.end_logits.float().numpy()
        answers[e.id] = postprocess(e.context, features, start, end, threshold)
    return answers


def postprocess(context, features, all_start, all_end, threshold, n_best=20, max_answer_length=30) -> str:
    """run_qa's postprocess_qa_predictions for one example, version_2_with_negative."""
    min_null, predictions = None, []
    for k in range(len(features["input_ids"])):
        start_logits, end_logits = all_start[k], all_end[k]
        offsets = [o if s == 1 else None for o, s in zip(features["offset_mapping"][k], features.sequence_ids(k))]
        null = start_logits[0] + end_logits[0]
        if min_null is None or min_null > null:
            min_null = null
        starts = np.argsort(start_logits)[-1 : -n_best - 1 : -1].tolist()
        ends = np.argsort(end_logits)[-1 : -n_best - 1 : -1].tolist()
        for i in starts:
            for j in ends:
                if i >= len(offsets) or j >= len(offsets) or offsets[i] is None or offsets[j] is None:
                    continue
                if j < i or j - i + 1 > max_answer_length:
                    continue
                predictions.append((start_logits[i] + end_logits[j], offsets[i][0], offsets[j][1]))
    predictions = sorted(predictions, reverse=True)[:n_best]
    if not predictions:
        return ""
    best = predictions[0]
    return "" if min_null - best[0] > threshold else context[best[1] : best[2]]


# ---- measurements ----------------------------------------------------------------------------------------------
def scores(examples, answers) -> dict:
    gold = {e.id: [t for t, _ in e.answers] for e in examples}
    return {k: round(v, 2) if isinstance(v, float) else v for k, v in squad_scores(gold, answers).items()}


def stride_answers(run, examples, stride: int) -> dict[str, str]:
    """The run's answers with windows sharing `stride` tokens (its threshold, as `predictions` decides)."""
    windows = run.windows([e.question for e in examples], [e.context for e in examples], doc_stride=stride)
    answers = {}
    for e, found in zip(examples, run.candidates(windows)):
        best = found.best()
        text = e.context[best[0][0] : best[0][1]] if best else ""
        answers[e.id] = "" if best is None or found.null - best[1] > run.null_threshold else text
    return answers, windows.count


def timed(work) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def cpu() -> str:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = re.search(r"Model name:\s*(.+)", text).group(1).strip()
        cores = re.search(r"^CPU\(s\):\s*(\d+)", text, re.M).group(1)
        return f"{model}, {cores} CPUs"
    except Exception:  # noqa: BLE001 - only a description
        return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=qa_task.DATA)
    parser.add_argument("--work", type=Path, default=Path("/tmp/conll-qa"))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--doc-stride", type=int, default=64)
    parser.add_argument("--per-doc", type=int, default=2, help="questions per train.txt document")
    parser.add_argument("--limit", type=int, default=None, help="train on the first N training questions")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--skip-training", action="store_true", help="reuse WORK/run")
    parser.add_argument("--speed-only", action="store_true", help="only the speed table (the scores are the run's)")
    options = parser.parse_args()
    torch.manual_seed(0)
    import bertkit
    from bertkit.tasks.load import load_run

    built = qa_task.build(options.data / "train.txt", 0, "train-", options.per_doc)
    train = qa_task.write(built, options.work / "train.jsonl")
    dev = qa_task.write(qa_task.build(options.data / "dev.txt", 0, "dev-", 2), options.work / "dev.jsonl")
    result: dict = {"cpu": cpu(), "torch_threads": torch.get_num_threads()}
    if options.skip_training:  # the run's own record of its training time
        result["train_seconds"] = load_run(options.work / "run").record_["training"]["train_seconds"]
    if not options.skip_training:
        started = time.perf_counter()
        bertkit.finetune(
            train,
            output_dir=options.work / "run",
            task="qa",
            num_train_epochs=options.epochs,
            learning_rate=options.lr,
            batch_size=options.batch_size,
            doc_stride=options.doc_stride,
            limit=options.limit,
            overwrite=True,
            progress=False,
        )
        result["train_seconds"] = round(time.perf_counter() - started, 1)
    run = load_run(options.work / "run")
    record = run.record_
    result["run"] = {k: record[k] for k in ("max_length", "training", "metrics", "baseline")} | {"data": record["data"]}
    examples = read_squad(dev).examples
    train_examples = read_squad(train).examples
    print(f"dev: {len(examples)} questions ({sum(not e.answerable for e in examples)} unanswerable)", flush=True)

    tokenizer = run.tokenizer
    if not options.speed_only:  # the scores do not change between runs of the same run folder
        answers, _, _ = run.predictions(examples)
        result["fine-tuned"] = scores(examples, answers)
        result["no answer"] = scores(examples, {e.id: "" for e in examples})
        threshold = choose_lexical_threshold(train_examples)
        result["lexical"] = scores(examples, lexical_answers(examples, threshold)) | {"threshold": threshold}
        for name in ("fine-tuned", "no answer", "lexical"):
            print(name, result[name], flush=True)

        long = [e for e in examples if len(tokenizer(e.question, e.context)["input_ids"]) > run.max_length]
        result["long"] = {"questions": len(long), "unanswerable": sum(not e.answerable for e in long)}
        for stride in sorted({0, 32, 64, 126, run.doc_stride}):
            found, windows = stride_answers(run, long, stride)
            result["long"][f"stride {stride}"] = scores(long, found) | {"windows": windows}
            print(f"long contexts, doc_stride {stride}:", result["long"][f"stride {stride}"], flush=True)

    from transformers import AutoModelForQuestionAnswering

    naive = AutoModelForQuestionAnswering.from_pretrained(options.work / "run").eval()
    questions, contexts = [e.question for e in examples], [e.context for e in examples]
    length, stride, null = run.max_length, run.doc_stride, run.null_threshold
    ways = {
        "bertkit answer": lambda: run.answer(questions, contexts, handle_impossible_answer=True),
        "naive loop (run_qa: padded to max_length)": lambda: run_qa_loop(
            naive, tokenizer, examples, length, stride, null, "max_length"
        ),
        "naive loop, padded to the longest window": lambda: run_qa_loop(
            naive, tokenizer, examples, length, stride, null, "longest"
        ),
    }
    fast = None
    try:  # on a CPU with native bf16 (AVX512-BF16 or AMX) bertkit's bf16 is the fast way; elsewhere it is refused
        fast = load_run(options.work / "run", precision="bf16")
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        result["bf16"] = f"refused: {exc}"
    if fast is not None:
        if not options.speed_only:
            answers, _, _ = fast.predictions(examples)
            result["fine-tuned, bf16"] = scores(examples, answers)
            print("fine-tuned, bf16", result["fine-tuned, bf16"], flush=True)
        ways["bertkit answer --precision bf16"] = lambda: fast.answer(
            questions, contexts, handle_impossible_answer=True
        )

        def naive_bf16() -> dict:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return run_qa_loop(naive, tokenizer, examples, length, stride, null, "max_length")

        ways["naive loop, bf16 autocast"] = naive_bf16
    same = run_qa_loop(naive, tokenizer, examples, length, stride, null, "longest")
    mine = run.answer(questions, contexts, handle_impossible_answer=True, align_to_words=False)
    result["naive_agreement"] = sum(same[e.id] == m["answer"] for e, m in zip(examples, mine)) / len(examples)
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(options.repeats):
        for name, work in ways.items():
            times[name].append(timed(work))
    base = statistics.median(times["naive loop (run_qa: padded to max_length)"])
    result["speed"] = {}
    for name, seconds in times.items():
        median = statistics.median(seconds)
        result["speed"][name] = {
            "questions_per_second": round(len(examples) / median, 2),
            "range": [round(len(examples) / max(seconds), 2), round(len(examples) / min(seconds), 2)],
            "x_naive_run_qa": round(base / median, 2),
        }
        print(name, result["speed"][name], flush=True)
    print(json.dumps(result, indent=1))
    if options.json:
        options.json.write_text(json.dumps(result, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
