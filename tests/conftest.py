import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

import tiny_models  # noqa: E402

try:  # generated-input tests: a quick profile for every run, a long one on demand (--hypothesis-profile=long)
    from hypothesis import settings

    settings.register_profile("ci", max_examples=40)
    settings.register_profile("long", max_examples=2000)
    settings.load_profile("ci")
except ImportError:  # pragma: no cover - hypothesis is in the test extra
    pass

SHARED_DATA = Path(os.environ.get("BERTKIT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def shared_file(*parts: str) -> Path:
    """A file from ../shared/data; when absent, skip saying why, except in CI (CI=true/1/yes), where it is a failure."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.is_file():
        reason = f"shared data {path} is absent (set BERTKIT_DATA to the folder holding sst2/ and conll2003/)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{reason}; in CI the data must be there, so this is a failure, not a skip")
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def encoder():
    from bertkit import Encoder

    return Encoder.from_pretrained()


@pytest.fixture(scope="session")
def hf_default():
    """Plain transformers model + tokenizer for the packaged default, the reference for equality tests."""
    from transformers import AutoModel, AutoTokenizer

    from bertkit.encoder.models import default_model_dir

    path = default_model_dir()
    model = AutoModel.from_pretrained(path)
    model.eval()
    return model, AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {
        "bert_cased": tiny_models.tiny_bert(root / "bert_cased", cased=True),
        "distilbert": tiny_models.tiny_distilbert(root / "distilbert"),
        "electra": tiny_models.tiny_electra(root / "electra"),
        "roberta": tiny_models.tiny_roberta(root / "roberta"),
    }


def run_cli(monkeypatch, capsys, *args):
    """Run `bertkit ARGS` in this process: (exit code, stdout, stderr)."""
    from bertkit import cli

    monkeypatch.setattr(sys, "argv", ["bertkit", *map(str, args)])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    captured = capsys.readouterr()
    return exit_info.value.code or 0, captured.out, captured.err
