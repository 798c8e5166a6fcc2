"""Tests that need ../shared data skip on a developer's machine without it, and fail in CI instead of skipping."""

import conftest
import pytest


def test_absent_shared_data_skips_locally(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"sst2/dev\.tsv is absent \(set BERTKIT_DATA"):
        conftest.shared_file("sst2", "dev.tsv")


@pytest.mark.parametrize("value", ["true", "1", "yes"])
def test_absent_shared_data_fails_in_ci(monkeypatch, tmp_path, value):
    monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path)
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="in CI the data must be there, so this is a failure, not a skip"):
        conftest.shared_file("sst2", "dev.tsv")


def test_present_shared_data_is_returned(monkeypatch, tmp_path):
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "dev.tsv").write_text("fine\t1\n")
    monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path)
    monkeypatch.setenv("CI", "true")
    assert conftest.shared_file("sst2", "dev.tsv") == tmp_path / "sst2" / "dev.tsv"
