"""Start-up: `import bertkit` and the command line load no heavy library until a command needs one."""

import subprocess
import sys

import pytest

HEAVY = (
    "torch",
    "transformers",
    "sklearn",
    "scipy",
    "pandas",
    "matplotlib",
    "tokenizers",
    "safetensors",
    "plotly",
    "pyarrow",
    "ray",
    "fastapi",
    "uvicorn",
    "numpy",
)


def loaded_after(code: str) -> list[str]:
    probe = f"{code}; import sys; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return [name for name in out.split() if name in HEAVY]


@pytest.mark.parametrize(
    "code", ["import bertkit", "import bertkit.cli", "from bertkit import InputError, __version__"]
)
def test_importing_bertkit_loads_no_heavy_library(code):
    assert loaded_after(code) == []


def test_a_public_name_loads_its_module_on_first_use():
    assert "torch" in loaded_after("from bertkit import Encoder")
    import bertkit

    assert set(bertkit.__all__) <= set(dir(bertkit))
    for name in bertkit.__all__:
        assert getattr(bertkit, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Encodr'"):
        bertkit.Encodr  # noqa: B018


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["nonsense-command"]])
def test_help_version_and_typos_load_no_heavy_library(args):
    code = (
        f"import sys; sys.argv = ['bertkit', *{args!r}]\nfrom bertkit.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert loaded_after(code) == []


def test_version_and_python_dash_m():
    from importlib.metadata import version

    for command in ([sys.executable, "-m", "bertkit", "--version"], [sys.executable, "-m", "bertkit.cli", "--version"]):
        result = subprocess.run(command, capture_output=True, text=True)
        assert result.returncode == 0 and result.stdout.strip() == f"bertkit {version('bertkit')}"


def test_all_names_every_lazy_export():
    import bertkit

    assert set(bertkit.__all__) == set(bertkit._LAZY) | {"BertkitError", "InputError", "ModelLoadError"}


def test_tokenize_loads_neither_torch_nor_transformers():
    code = (
        "import sys; sys.argv = ['bertkit', 'tokenize', 'I love Korea', '--max-length', '7']\n"
        "from bertkit.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert "torch" not in loaded_after(code) and "transformers" not in loaded_after(code)
