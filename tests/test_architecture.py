"""The package's shape: wings import only downwards, modules form no import cycle, no function grows past 100 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "bertkit"

# Lower number = lower wing. A module may import its own wing and lower ones, never a higher one.
WING_LEVELS = {
    "errors": 0,
    "records": 0,  # the one record every file bertkit writes carries
    "display": 0,  # plain-text and HTML tables for reprs and the CLI: imports nothing of bertkit
    "encoder": 1,
    "io": 2,
    "tasks": 3,
    "explain": 4,
    "ray": 4,
    "serve": 5,
    "cli": 6,
    "__main__": 6,
}
# The one atomic writer imports only errors and records, so every wing may use it: the encoder writes its cache
# (int8 calibrations, exported graphs) through it at model load.
MODULE_LEVELS = {"bertkit.io.writers": 0}
MAX_FUNCTION_LINES = 100  # a rule on functions, not files: a long file of small functions reads well


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str], root: Path = PACKAGE, run_time: bool = False) -> set[str]:
    """bertkit modules that `path` imports (top level or inside functions), resolved to module names.

    `run_time`: only the imports that run, not those under `if TYPE_CHECKING:` (annotations only).
    """
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if run_time and isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            candidates = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            if candidate in known:
                found.add(candidate)
    found.discard(name)
    return found


def import_graph(root: Path = PACKAGE, run_time: bool = False) -> dict[str, set[str]]:
    files = sorted(root.rglob("*.py"))
    known = {module_name(f, root) for f in files}
    return {module_name(f, root): imported_modules(f, known, root, run_time) for f in files}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A module-level import cycle as a path [a, b, ..., a], ignoring package __init__ re-exports of children."""

    def edges(node):
        # `import pkg.sub` also runs pkg/__init__; an __init__ re-exporting its own children is not a cycle.
        return {t for t in graph.get(node, ()) if not t.startswith(node + ".")}

    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for target in sorted(edges(node)):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def wing_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def level_of(module: str) -> int | None:
    """The module's own level where it has one, else its wing's; None for bertkit/__init__.py."""
    wing = wing_of(module)
    return MODULE_LEVELS.get(module, WING_LEVELS[wing]) if wing else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in graph.items():
        if level_of(source) is None:  # bertkit/__init__.py is the public face: it may gather from every wing
            continue
        bad += [f"{source} imports {t}" for t in targets if wing_of(t) and level_of(t) > level_of(source)]
    return bad


def test_every_module_is_in_a_known_wing():
    unknown = sorted({wing_of(m) for m in import_graph()} - set(WING_LEVELS) - {None})
    assert unknown == [], f"modules outside the wings {sorted(WING_LEVELS)}: {unknown}"


def test_no_import_cycles():
    """No cycle among the imports that run; a type named in an annotation only (`if TYPE_CHECKING:`) makes none."""
    assert find_cycle(import_graph(run_time=True)) is None


def test_lower_wings_never_import_higher_ones():
    assert upward_imports(import_graph()) == []


def own_lines(function: ast.AST) -> int:
    """Lines of a function's body (signature and docstring aside) less those of the functions defined inside it
    (each of those is measured on its own)."""
    body = function.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    nested = sum(
        node.end_lineno - node.lineno + 1
        for node in ast.walk(function)
        if node is not function and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    )
    return function.end_lineno - body[0].lineno + 1 - nested


def test_functions_stay_readable():
    """A function is read top to bottom in one sitting: at most MAX_FUNCTION_LINES of its own."""
    long = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and own_lines(node) > MAX_FUNCTION_LINES:
                long[f"{module_name(path)}.{node.name}"] = own_lines(node)
    assert long == {}


def test_wings_say_what_they_hold_and_may_import():
    for wing in [w for w in WING_LEVELS if (PACKAGE / w / "__init__.py").is_file()]:
        doc = ast.get_docstring(ast.parse((PACKAGE / wing / "__init__.py").read_text()))
        assert doc and "import" in doc.lower(), (
            f"bertkit/{wing}/__init__.py needs a docstring naming what it may import"
        )


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "bertkit" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "bertkit"


def test_the_checks_catch_a_cycle_and_an_upward_import(tmp_path):
    """The two checks above would fail on a package that breaks the rules (shown on a small fake package)."""
    fake = _write(
        tmp_path,
        {
            "__init__.py": "",
            "encoder/__init__.py": "",
            "encoder/a.py": "from ..tasks.b import thing\n",  # encoder → tasks: upward
            "tasks/__init__.py": "",
            "tasks/b.py": "def f():\n    from ..encoder.a import other\n",  # a local import still closes the cycle
        },
    )
    graph = import_graph(fake)
    assert find_cycle(graph) == ["bertkit.encoder.a", "bertkit.tasks.b", "bertkit.encoder.a"]
    assert upward_imports(graph) == ["bertkit.encoder.a imports bertkit.tasks.b"]
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import other\n"
    (fake / "tasks" / "c.py").write_text(typed, encoding="utf-8")
    (fake / "tasks" / "a.py").write_text("def f():\n    from .c import thing\n", encoding="utf-8")
    assert find_cycle({k: v for k, v in import_graph(fake).items() if "encoder" not in k})  # seen as typed
    assert find_cycle({k: v for k, v in import_graph(fake, run_time=True).items() if "encoder" not in k}) is None


PUBLIC_API = Path(__file__).with_name("public_api.txt")


def public_api() -> list[str]:
    """Every public name of `bertkit` with its signature; a class with its public members, its bertkit bases' too."""
    import dataclasses
    import functools
    import inspect

    import bertkit

    lines = []
    for name in bertkit.__all__:
        obj = getattr(bertkit, name)
        if not inspect.isclass(obj):
            lines.append(f"{name}{inspect.signature(obj)}")
            continue
        if dataclasses.is_dataclass(obj):  # its own fields (a transformers subclass inherits a hundred)
            own = obj.__dict__.get("__annotations__", {})
            lines.append(f"{name} fields: {', '.join(f.name for f in dataclasses.fields(obj) if f.name in own)}")
        elif "__init__" in vars(obj):
            lines.append(f"{name}{inspect.signature(obj.__init__)}")
        else:
            lines.append(name)
        ours = [base for base in obj.__mro__ if base.__module__.startswith("bertkit")]
        for member in sorted({m for base in ours for m in vars(base) if not m.startswith("_")}):
            value = inspect.getattr_static(obj, member)
            if isinstance(value, (property, functools.cached_property)):
                lines.append(f"{name}.{member} (property)")
            elif callable(value) or isinstance(value, (staticmethod, classmethod)):
                lines.append(f"{name}.{member}{inspect.signature(getattr(obj, member))}")
    return lines


def test_the_public_api_is_what_public_api_txt_says():
    """A change to a public name or signature is deliberate: it updates tests/public_api.txt and says so in the
    CHANGELOG (before 1.0 a rename is a CHANGELOG line, not a shim)."""
    import difflib

    now, recorded = public_api(), PUBLIC_API.read_text(encoding="utf-8").splitlines()
    changed = "\n".join(difflib.unified_diff(recorded, now, "public_api.txt", "bertkit now", lineterm="", n=0))
    assert now == recorded, f"the public API changed; write it to {PUBLIC_API.name} if that is meant:\n{changed}"


# ---- each concept in its home, and the code-line budget (issue 61) ------------------------------------------------
# Code lines (no docstring, comment or blank line, as the census counts them) of src/bertkit: the budget is issue 61's
# with every feature; a later feature raises it by what it adds and says so in its note. Until the budget is met the
# tree may not grow past where it stands (lower CODE_LINES_NOW as it shrinks). Issue 60 (stop 66) was built after
# issue 61 counted its 13,477 lines and added 238 (13,477 at 84626a4, 13,715 at 468cbb2): 12,900 + 238. Issue 62's
# fixes add what they measure from 13,135 (19dcea7, issue 61 done); issue 63's cut from 13,590 (5c4444e).
ISSUE_62_LINES = 13_590 - 13_135
ISSUE_63_LINES = 14_101 - 13_590  # the cut, its training, the command, the probe's line; static models (223)
ISSUE_64_LINES = 14_420 - 14_101  # bertkit serve --ray: the spec and app builder moved to the serve wing, Ray Serve
CODE_LINE_BUDGET = 12_900 + 238 + ISSUE_62_LINES + ISSUE_63_LINES + ISSUE_64_LINES
CODE_LINES_NOW = 14_420
CENSUS = PACKAGE.parents[2] / "shared" / "tools" / "census.py"


@pytest.fixture(scope="module")
def census():
    """The shared census (../shared/tools/census.py), run on this tree: where each mechanism is done."""
    import json
    import os
    import subprocess
    import sys

    if not CENSUS.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CENSUS} is absent: CI needs the shared tools beside the checkout")
        pytest.skip(f"{CENSUS} is absent (the shared tools live beside the checkout)")
    out = subprocess.run(
        [sys.executable, str(CENSUS), "--json"], cwd=PACKAGE.parents[1], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def test_each_mechanism_is_done_in_its_home_only(census):
    """Tokenizing, running the model, autocast, threads, atomic replaces, progress bars, flags: one home each."""
    outside = {
        name: row["files"]
        for name, row in census["mechanisms"].items()
        if name != "record format/version constant" and row["files"]
    }
    assert outside == {}


def test_one_record_format_constant(census):
    """Every file bertkit writes carries the one record of records.py: no other format or version constant."""
    assert census["mechanisms"]["record format/version constant"]["files"] == {}  # none outside records.py


def test_the_code_does_not_grow(census):
    assert census["code_lines"] <= CODE_LINES_NOW, census["code_wings"]


def test_the_code_stays_within_its_budget(census):
    assert census["code_lines"] <= CODE_LINE_BUDGET, census["code_wings"]
