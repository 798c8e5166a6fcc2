"""The command line: outputs equal the library's, and user mistakes are one 'error:' line with exit status 2."""

from pathlib import Path

import huggingface_hub.constants
import numpy as np
import pyarrow.parquet as pq  # a test dependency (.[test]): missing means failing, not skipping
import pytest
from conftest import run_cli

from bertkit import InputError

run = run_cli


def test_tokenize_prints_the_table(monkeypatch, capsys):
    code, out, err = run(monkeypatch, capsys, "tokenize", "I love Korea", "--max-length", "7")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["position", "token", "id", "mask", "type_id", "word"]
    assert lines[1].split() == ["0", "[CLS]", "101", "1", "0"]
    assert lines[4].split() == ["3", "korea", "4420", "1", "0", "2"]
    assert lines[7].split() == ["6", "[PAD]", "0", "0", "0"]
    assert "[UNK] 0 of 3 tokens" in err


def test_tokenize_warns_about_korean(monkeypatch, capsys):
    code, out, err = run(monkeypatch, capsys, "tokenize", "이 영화 재미없네요")
    assert code == 0 and "[UNK]" in out
    assert "covers the text poorly" in err and "Korean" in err


def test_info(monkeypatch, capsys):
    code, out, err = run(monkeypatch, capsys, "info")
    assert code == 0, err
    facts = dict(line.split(None, 1) for line in out.splitlines())
    assert facts["layers"] == "6" and facts["hidden_size"] == "384" and facts["max_length"] == "256"
    assert facts["cased"] == "False" and facts["vocab_size"] == "30522"


def test_embed_tsv_equals_library(monkeypatch, capsys, tmp_path, encoder):
    source = tmp_path / "s.tsv"
    source.write_text("a stirring , funny film\t1\n\t0\nthe plot is a mess\t0\n", encoding="utf-8")
    code, _, err = run(
        monkeypatch,
        capsys,
        "embed",
        source,
        "--text-column",
        "0",
        "--layers",
        "last",
        "--pooling",
        "cls",
        "-o",
        tmp_path / "v.npy",
    )
    assert code == 0, err
    expected = encoder.embed(["a stirring , funny film", "", "the plot is a mess"], layers="last", pooling="cls")
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-6)
    assert "wrote" in err and "3 × 384" in err


def test_embed_token_vectors_and_parquet(monkeypatch, capsys, tmp_path, encoder):
    source = tmp_path / "s.jsonl"
    source.write_text(
        '{"text": "I love Korea", "id": "k"}\n{"text": "the plot is a mess", "id": "m"}\n', encoding="utf-8"
    )
    code, _, err = run(
        monkeypatch, capsys, "embed", source, "--pooling", "none", "--id-column", "id", "-o", tmp_path / "t.npz"
    )
    assert code == 0, err
    saved = np.load(tmp_path / "t.npz")
    expected = encoder.embed_tokens(["I love Korea", "the plot is a mess"], layers="last")
    assert saved["tokens"].tolist() == expected[0].tokens + expected[1].tokens
    assert saved["tokens"].tolist()[:5] == ["[CLS]", "i", "love", "korea", "[SEP]"] and saved["ids"].tolist() == [
        "k",
        "m",
    ]
    assert saved["offsets"].tolist() == [0, 5, 5 + len(expected[1].tokens)]
    np.testing.assert_allclose(saved["vectors"], np.concatenate([e.vectors for e in expected]), atol=1e-6, rtol=0)

    code, _, err = run(monkeypatch, capsys, "embed", source, "-o", tmp_path / "v.parquet", "-l", "last4:concat")
    assert code == 0, err
    table = pq.read_table(tmp_path / "v.parquet")
    assert table.num_rows == 2 and table.column("id").to_pylist() == [0, 1]  # no --id-column: row numbers
    vectors = np.array(table.column("vector").to_pylist(), dtype=np.float32)
    pooled = encoder.embed(["I love Korea", "the plot is a mess"], layers="last4:concat", pooling="mean")
    assert vectors.shape == (2, 4 * 384)
    np.testing.assert_allclose(vectors, pooled, atol=1e-6, rtol=0)


def test_embed_reports_truncation(monkeypatch, capsys, tmp_path, encoder):
    source = tmp_path / "long.txt"
    source.write_text("short\n" + "word " * 40 + "\n", encoding="utf-8")
    code, _, err = run(monkeypatch, capsys, "embed", source, "--max-length", "16", "-o", tmp_path / "v.npy")
    assert code == 0, err
    assert "1 texts were truncated to 16 tokens" in err
    expected = encoder.embed(["short", ("word " * 40).strip()], max_length=16, warn=False)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "content, args, message",
    [
        (
            "sentence\tlabel\nhi\t1\n",
            ["--text-column", "text"],
            "no column named 'text'; the header has ['sentence', 'label']",
        ),
        ("", ["--text-column", "0"], "the file has no data rows"),
        (b"ok\t1\nbad \xff\t0\n", ["--text-column", "0"], "line 2: bytes that are not UTF-8"),
        ("hi\t1\n", ["--layers", "penultimate"], "Valid forms"),
        ("hi\t1\n", ["--pooling", "avg"], "unknown pooling 'avg'"),
    ],
)
def test_bad_input_is_one_clear_line_and_writes_nothing(monkeypatch, capsys, tmp_path, content, args, message):
    source = tmp_path / "in.tsv"
    source.write_bytes(content if isinstance(content, bytes) else content.encode())
    code, out, err = run(monkeypatch, capsys, "embed", source, "-o", tmp_path / "v.npy", *args)
    assert code == 2
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not (tmp_path / "v.npy").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.tsv"]


def test_offline_hub_name_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    code, _, err = run(monkeypatch, capsys, "info", "--model", "bert-base-cased")
    assert code == 2 and "not reachable" in err and "Traceback" not in err


def test_demo_runs(monkeypatch, capsys):
    code, out, _ = run(monkeypatch, capsys, "demo")
    assert code == 0
    assert "[CLS]  101" in out and "(1, 7, 384)" in out and "(4, 1536)" in out and "Korean" in out
    # words are words (the word step shows a split one's pieces) and the SST-2 pointer is one a user can follow
    assert "sub-tokens" not in out and "'p', '##ye', '##ong', '##chang'" in out and "9 words → (9, 1536)" in out
    assert "../shared" not in out and "pytorch-sentiment-classification" in out


def test_env_prints_the_machine_as_bertkit_sees_it(monkeypatch, capsys):
    import platform

    import torch

    code, out, _ = run(monkeypatch, capsys, "env")
    facts = dict(line.split("  ", 1) for line in out.splitlines())
    facts = {k.strip(): v.strip() for k, v in facts.items()}
    assert code == 0 and facts["torch"].startswith(torch.__version__)
    assert facts["torch threads"] == str(torch.get_num_threads())
    if platform.system() == "Linux":
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        flags = next(line for line in cpuinfo if line.startswith("flags")).split(":")[1].split()
        assert ("avx512_bf16" in flags or "amx_bf16" in flags) == facts["bf16 on the cpu"].startswith("native")
        assert all(
            flag in flags for flag in facts["cpu features"].split() if not facts["cpu features"].startswith("none")
        )


def test_every_command_parameter_reaches_the_code():
    """A command's value is used in its body (beyond an `if` that checks it) or taken by an `options_for` target.

    `options_for(ctx, target)` passes the values whose names `target` takes, so renaming a parameter on one side
    only would drop the user's value silently; this reads every command's source (and that of the helpers it hands
    `ctx` to) and names any value left behind.
    """
    import ast
    import importlib
    import inspect
    import textwrap

    from bertkit.cli.common import options_for
    from bertkit.cli.main import app

    def nodes_of(function):
        body = ast.parse(textwrap.dedent(inspect.getsource(function))).body[0].body
        return [node for statement in body for node in ast.walk(statement)]

    def names_and_targets(function):
        """Names `function` (and each helper it passes `ctx`) reads, and the parameters its targets take."""
        nodes, namespace, absent = nodes_of(function), dict(function.__globals__), set()
        for node in (node for node in nodes if isinstance(node, ast.ImportFrom)):
            package = importlib.import_module(function.__module__).__package__
            try:
                module = importlib.import_module("." * node.level + (node.module or ""), package)
            except InputError:  # an extra this install lacks (bertkit.ray without Ray): its targets are not checked
                absent |= {alias.asname or alias.name for alias in node.names}
                continue
            namespace.update({alias.asname or alias.name: getattr(module, alias.name) for alias in node.names})
        in_tests = {id(part) for node in nodes if isinstance(node, ast.If) for part in ast.walk(node.test)}
        used = {node.id for node in nodes if isinstance(node, ast.Name) and id(node) not in in_tests}
        taken = set()
        for call in (node for node in nodes if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            callee = namespace.get(call.func.id)
            if callee is options_for:
                if {n.id for n in ast.walk(call.args[1]) if isinstance(n, ast.Name)} & absent:
                    taken.add("*")  # what it takes cannot be read here: the command is checked where Ray is
                    continue
                target = eval(compile(ast.Expression(call.args[1]), "<target>", "eval"), namespace)
                taken |= set(inspect.signature(target).parameters)
            elif any(getattr(arg, "id", None) == "ctx" for arg in call.args):
                helper_used, helper_taken = names_and_targets(callee)
                used, taken = used | helper_used, taken | helper_taken
        return used, taken

    left_behind = {}
    for command in app.registered_commands:
        callback = inspect.unwrap(command.callback)  # `from_fields`: the command it wraps
        used, taken = names_and_targets(callback)
        parameters = set(inspect.signature(callback).parameters) - {"ctx", "threads"}  # threads: its callback
        if parameters - used - taken and "*" not in taken:
            left_behind[callback.__name__] = sorted(parameters - used - taken)
    assert len(app.registered_commands) >= 17  # bench moved to benchmarks/bench.py
    assert not left_behind, f"command values that reach no code: {left_behind}"


def test_embed_takes_every_embedding_option_and_the_prompt_switch_works(monkeypatch, capsys, tmp_path, encoder):
    import inspect

    from bertkit.cli.embed import embed
    from bertkit.encoder.options import FIELDS

    assert set(FIELDS) <= set(inspect.signature(embed).parameters)  # what EmbedOptions holds, the command sets
    source = tmp_path / "s.txt"
    source.write_text("a stirring , funny film\nthe plot is a mess\n", encoding="utf-8")
    args = ("embed", source, "--prompt", "query: ", "--exclude-prompt", "--no-dense", "-o", tmp_path / "v.npy")
    code, _, err = run(monkeypatch, capsys, *args)
    assert code == 0, err
    texts = ["a stirring , funny film", "the plot is a mess"]
    expected = encoder.embed(texts, prompt="query: ", include_prompt=False)
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=1e-6)
    assert not np.allclose(expected, encoder.embed(texts, prompt="query: "), atol=1e-3)  # the switch matters
    code, _, err = run(monkeypatch, capsys, "embed", source, "--dense", "-o", tmp_path / "w.npy")
    assert code != 0 and "error: --dense: this model has no sentence-transformers Dense module" in err


@pytest.mark.parametrize(
    "command, source",
    [
        ("embed", "bertkit.encoder.options:EmbedOptions"),
        ("finetune", "bertkit.tasks.finetune.settings:FinetuneSettings"),
    ],
)
def test_generated_options_are_the_fields_with_their_metadata(monkeypatch, capsys, command, source):
    """One option per field, spelled and explained as its metadata says (`from_fields`)."""
    import dataclasses
    import importlib

    module, name = source.split(":")
    code, out, _ = run(monkeypatch, capsys, command, "--help")
    shown = " ".join(out.replace(",", "").split())
    assert code == 0
    for field in dataclasses.fields(getattr(importlib.import_module(module), name)):
        flag = (field.metadata["flag"] or f"--{field.name.replace('_', '-')}").split("/")[0]
        explained = " ".join(field.metadata["help"].replace(",", "").split())[:40]
        assert f"{flag} " in shown and explained in shown, field.name


def test_every_short_flag_means_one_thing_in_every_command():
    """`-q` is --quiet everywhere, `-c` the text column, `-p` the pooling...: a short flag is one long name in every
    command that has it (the text column was --column in some commands and --text-column in others)."""
    import typer

    import bertkit.cli.main  # noqa: F401 (registers every command)
    from bertkit.cli.common import app

    meanings: dict[str, set[str]] = {}
    longs: set[str] = set()

    def walk(command) -> None:
        for sub in getattr(command, "commands", {}).values():
            walk(sub)
        for parameter in command.params:
            if parameter.param_type_name == "option":
                long = next(o for o in parameter.opts if o.startswith("--"))
                longs.add(long)
                for short in (o for o in parameter.opts if not o.startswith("--")):
                    meanings.setdefault(short, set()).add(long)

    walk(typer.main.get_command(app))
    assert {short: names for short, names in meanings.items() if len(names) > 1} == {}, meanings
    assert meanings["-q"] == {"--quiet"} and meanings["-c"] == {"--text-column"} and meanings["-p"] == {"--pooling"}
    assert "--column" not in longs and "--text-column" in longs


def test_help_leads_with_what_a_new_user_needs_and_groups_the_rest_listing_every_option_once(monkeypatch, capsys):
    """`embed --help` (76 lines, one list) and `finetune --help` (81) led with --max-grad-norm as often as with -o."""
    import re

    from bertkit.cli import click_command

    def sections(command: str) -> dict[str, list[str]]:
        code, out, _ = run_cli(monkeypatch, capsys, command, "--help")
        assert code == 0
        found, title = {}, None
        for line in out.splitlines():
            if re.fullmatch(r"[A-Z][\w ,]*:", line):
                title = line[:-1]
                found[title] = []
            elif title and (flag := re.match(r"  ((?:-\w, )?--[\w-]+)", line)):
                found[title].append(flag.group(1).split(", ")[-1])
        return found

    wanted = {
        "embed": (["--output", "--text-column", "--model", "--layers", "--pooling"], ["--stride", "--actors"]),
        "finetune": (["--output", "--dev", "--task", "--epochs", "--lr", "--batch-size"], ["--max-grad-norm"]),
    }
    for name, (first, later) in wanted.items():
        found = sections(name)
        assert set(first) <= set(found["Options"]) and not set(later) & set(found["Options"]), found["Options"]
        assert len(found) >= 4 and all(flag in sum(found.values(), []) for flag in later)
    for name, command in click_command.commands.items():  # every option in one group, once
        flags = sorted(
            p.opts[-1] if p.opts[-1].startswith("--") else p.opts[0]
            for p in command.params
            if p.param_type_name == "option" and not p.hidden
        )
        listed = sorted(flag for rows in sections(name).values() for flag in rows)
        assert listed == sorted(flags + ["--help"]), name
