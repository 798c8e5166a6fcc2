"""The suite's warm parent (`tests/warm.py`) gives a `bertkit` command what a fresh interpreter gives it: the same
output files, messages, exit status, working folder and environment; only the imports are skipped."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
import warm

pytestmark = pytest.mark.slow
BERTKIT = [sys.executable, "-m", "bertkit.cli"]


def without_speed(text: str) -> str:
    return re.sub(r"\d+ texts/s", "N texts/s", text)


def test_a_warm_command_is_a_cold_one_without_the_imports(tmp_path):
    (tmp_path / "in.txt").write_text("I love Korea\nthe movie was great\n", encoding="utf-8")
    env = {**os.environ, "BERTKIT_CACHE": str(tmp_path / "cache")}
    found = {}
    for way, run in (("warm", warm.run), ("cold", subprocess.run)):
        embed = [*BERTKIT, "embed", "in.txt", "-o", f"{way}.npy"]
        missing = [*BERTKIT, "embed", "absent.txt", "-o", f"{way}-absent.npy"]
        found[way] = [
            run(command, cwd=tmp_path, env=env, capture_output=True, text=True) for command in (embed, missing)
        ]
    version = warm.popen([*BERTKIT, "--version"], stdout=subprocess.DEVNULL)
    assert warm.can_run_warm(BERTKIT, env) and isinstance(version, warm.WarmProcess) and version.wait(60) == 0
    for warm_done, cold_done in zip(found["warm"], found["cold"]):
        assert warm_done.returncode == cold_done.returncode
        assert warm_done.stdout == cold_done.stdout
        named = without_speed(warm_done.stderr).replace("warm.npy", "cold.npy").replace("warm-absent", "cold-absent")
        assert named == without_speed(cold_done.stderr)
    assert found["warm"][0].returncode == 0 and found["warm"][1].returncode == 2
    assert f"relative paths start at {tmp_path}" in found["warm"][1].stderr  # the command's own folder
    np.testing.assert_array_equal(np.load(tmp_path / "warm.npy"), np.load(tmp_path / "cold.npy"))


def test_a_variable_read_at_import_sends_the_command_to_a_fresh_interpreter():
    changed = {**os.environ, "HF_HUB_OFFLINE": "0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1"}
    assert not warm.can_run_warm(BERTKIT, changed)
    assert warm.can_run_warm(BERTKIT, {**os.environ, "OMP_NUM_THREADS": "1"})  # applied in the fork
    assert not warm.can_run_warm([sys.executable, "-c", "pass"], None)  # only bertkit's own commands
