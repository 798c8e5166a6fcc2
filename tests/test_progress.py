"""The one progress reporter: a bar on a terminal, a plain log line every few seconds elsewhere, silence when asked."""

import logging

import pytest

from bertkit.encoder import progress
from bertkit.encoder.progress import Progress


def test_off_a_terminal_it_logs_a_plain_line_every_few_seconds(monkeypatch, caplog):
    clock = iter(range(0, 1000, 3))  # each look at the clock: 3 s later
    monkeypatch.setattr(progress.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(progress, "terminal", lambda: False)
    with caplog.at_level(logging.INFO, logger="bertkit"), Progress("embed", 5_000, every=5) as reporter:
        assert reporter.bar is None
        for _ in range(4):
            reporter.update(1_000, batch=32)
    lines = [r.getMessage() for r in caplog.records]
    # started at 0 s; updates at 3, 6, 9, 12 s: a line at 6 (6 >= 5) and at 12 (6 s after), none at 3 or 9
    assert lines == [
        "embed: 2,000/5,000 rows, 333 rows/s, 9 s left, batch 32",
        "embed: 4,000/5,000 rows, 333 rows/s, 3 s left, batch 32",
    ]


def test_a_script_without_logging_still_gets_its_lines_on_stderr(tmp_path):
    """`bertkit.finetune()` in a script whose stderr is a file: Python drops INFO lines when no logging is set up, so
    the reporter prints them (before: nothing, while the command line showed them); with logging set up, the
    program's own level decides."""
    import subprocess
    import sys

    script = (
        "import logging, sys\n"
        "from bertkit.encoder.progress import Progress\n"
        "if sys.argv[1] == 'configured':\n"
        "    logging.basicConfig(level=logging.WARNING)\n"
        "with Progress('finetune', 3, 'steps', show=True, every=0) as p:\n"
        "    for _ in range(3):\n"
        "        p.update(1, loss='0.5')\n"
    )
    for setup in ("none", "configured"):
        done = subprocess.run([sys.executable, "-c", script, setup], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        if setup == "none":
            assert done.stderr.splitlines()[-1].startswith("finetune: 3/3 steps, ") and "loss 0.5" in done.stderr
        else:
            assert "finetune:" not in done.stderr  # the program asked for warnings only


def test_on_a_terminal_it_draws_one_tqdm_bar(monkeypatch, capsys):
    monkeypatch.setattr(progress, "terminal", lambda: True)
    with Progress("index", 10, "vectors") as reporter:
        reporter.to(4, loss=0.5)
        assert reporter.bar.n == 4 and reporter.bar.total == 10
    err = capsys.readouterr().err
    assert "index" in err and "4/10" in err and "loss=0.5" in err


@pytest.mark.parametrize("show, total", [(False, 10**6), (None, 10)])
def test_it_stays_silent_when_told_or_for_small_jobs(monkeypatch, capsys, caplog, show, total):
    monkeypatch.setattr(progress, "terminal", lambda: True)
    with caplog.at_level(logging.INFO), Progress("embed", total, show=show, min_total=256, every=0) as reporter:
        reporter.update(total)
    assert reporter.bar is None and capsys.readouterr().err == "" and caplog.records == []


def test_a_total_learned_later_and_an_unknown_one(monkeypatch, caplog):
    monkeypatch.setattr(progress, "terminal", lambda: False)
    with caplog.at_level(logging.INFO, logger="bertkit"), Progress("embed", every=0) as reporter:
        reporter.to(10)
        reporter.to(20, total=40)
    first, second = (r.getMessage() for r in caplog.records)
    assert first.startswith("embed: 10 rows, ") and "left" not in first
    assert second.startswith("embed: 20/40 rows, ") and second.endswith(" s left")


def test_a_piped_embed_reports_as_passes_finish_not_only_per_chunk(monkeypatch, capsys, tmp_path, tiny_dirs):
    """Issue 60: 2,000 rows in one chunk printed one line, at the end; the lines now come as the passes finish."""
    from conftest import run_cli

    monkeypatch.setattr(progress, "terminal", lambda: False)  # piped: plain lines, no bar
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)  # a line at every update: what reaches the reporter, and when
    source = tmp_path / "texts.txt"
    source.write_text("".join(f"the cat sat on the mat {k}\n" for k in range(300)), encoding="utf-8")
    args = ["embed", source, "-m", tiny_dirs["bert_cased"], "-b", "32", "-o", tmp_path / "v.npy"]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("embed: ")]
    counts = [int(line.split()[1].split("/")[0].replace(",", "")) for line in lines]
    assert len(counts) > 1 and counts == sorted(counts), err  # within the one chunk of 300 rows, pass by pass
    assert counts[0] < 300 and counts[-1] == 300 and all("/300 texts, " in line for line in lines), err
