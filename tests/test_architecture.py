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
MAX_FUNCTION_LINES = 100  # a rule on functions, not files: a long file of small functions reads well


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str], root: Path = PACKAGE) -> set[str]:
    """bertkit modules that `path` imports (top level or inside functions), resolved to module names."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    files = sorted(root.rglob("*.py"))
    known = {module_name(f, root) for f in files}
    return {module_name(f, root): imported_modules(f, known, root) for f in files}


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


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for source, targets in graph.items():
        source_wing = wing_of(source)
        if source_wing is None:  # bertkit/__init__.py is the public face: it may gather from every wing
            continue
        for target in targets:
            target_wing = wing_of(target)
            if target_wing and WING_LEVELS[target_wing] > WING_LEVELS[source_wing]:
                bad.append(f"{source} imports {target}")
    return bad


def test_every_module_is_in_a_known_wing():
    unknown = sorted({wing_of(m) for m in import_graph()} - set(WING_LEVELS) - {None})
    assert unknown == [], f"modules outside the wings {sorted(WING_LEVELS)}: {unknown}"


def test_no_import_cycles():
    assert find_cycle(import_graph()) is None


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


@pytest.mark.parametrize(
    "name",
    [
        "Encoder",
        "BertVectorizer",
        "TextClassifier",
        "finetune",
        "FinetuneArguments",
        "load_run",
        "probe_text",
        "probe_token",
        "read_tagged",
        "entity_scores",
    ],
)
def test_public_api_is_unchanged(name):
    import bertkit

    assert name in bertkit.__all__ and getattr(bertkit, name) is not None


# ---- each mechanism once, and the size of the house (issue 44) ---------------------------------------------------
# The budgets the maintainer set, in lines of .py (all lines). A later feature may raise its wing's budget by what it
# adds, and says so in its note.
WING_BUDGETS = {
    "encoder": 3_062,  # issue 48 added 133 (the GPU feed), issue 47 9 (int8's one product for query, key, value);
    # the one rule for long pairs moved 20 from serve
    "tasks": 4_459,  # issue 45's QA step defaults added 13, a QA model's span head 10, small-data QA 24, torchrun 12
    "serve": 1_885,
    "io": 1_300,
    "cli": 1_409,
    "ray": 500,
    "explain": 1_333,  # issue 46's step doubling added 3
    "(top)": 300,
}
TOTAL_BUDGET = 13_500
MAX_ENCODER_MEMBERS = 15
# Where the tree stands (2026-11-29, after the by-construction merge): a ratchet, so that no feature adds a copy while
# the budgets above are not yet met. Lower these as the wings shrink; never raise them without a note.
WING_CEILINGS = {  # issue 45 raised encoder, tasks, serve, io and cli by the 200 lines its fixes added; the idle
    # heap trim (a CI failure: RSS under load) added 23 to encoder and serve; issue 46's attributions 370 to explain
    # and 2 to (top), then 236 to explain (feature-classifier, QA and tagger targets, the page's strips), 9 to cli
    # (--no-attributions) and 5 to serve (the request's field); budgets raised by the same. Issue 48's GPU feed (chunks
    # tokenized ahead of the passes, half weights, the sliding-window planner, the vectorised padding) added 133 to
    # encoder. Issue 44's Encoder of 15 members (text_coverage, vectors_record) took 20 lines from encoder and gave 5
    # to callers' imports (3 cli, 1 explain, 1 io): the ceilings moved with them, 15 lower in all; then encoder shed 9
    # more (`embed`'s call), and issue 46's step doubling on saturating scores added 3 to explain (budget likewise);
    # issue 45's question-answering step defaults (batch 16, lr 2e-4 when left out) added 13 to tasks (budget likewise)
    # and `text_coverage`, public now, took 16 lines of numpydoc and 3 of types (encoder 18, explain 1); keeping a
    # question-answering model's span head when fine-tuning it added 10 to tasks (budget likewise); issue 47's int8
    # product shared by query, key and value added 9 to encoder (budget likewise); issue 45's small-data schedule for
    # question answering (10 epochs at 1e-4 under 800 questions) added 24 to tasks (budget likewise); placing the
    # processes of a torchrun on the run's device (each took itself for the only one) added 12 (budget likewise); the
    # runner's unread pass and token counts (a device sync per pass) took 15 from encoder; the one rule for long pairs
    # (issue 44, decision 6) took 20 from serve and gave 22 to encoder, `Batch` in a module of its own 17 more (to
    # keep tokenize.py under 400); the vectors' model checked where it is read took 12 from tasks and cli, gave 2 to io;
    # then (issue 44's decisions 4, 5, 7): probe's and Ray's progress through the one reporter added 10 to tasks and
    # 10 to ray, the service's rerank as the run's rank 7 to tasks (and took 2 from serve), serve's limits generated
    # from ServeSettings took 34 from cli and gave 15 to serve, with 9 more for serve/__init__'s lazy create_app (the
    # settings load before torch), the one option_field 8 to encoder, train's generated flags 6 to cli, POST /explain
    # checked once took 15 from explain; the service's one model thread (one client ran 1.5x slower) 4 to encoder and
    # 3 to serve; the review's fixes (a long pair cut at a word's end, only from the right; a model-less index and
    # train's --pooling none refused before loading; create_app for type checkers) 8 to encoder, 5 to cli, 3 to serve.
    # Issue 47's OpenVINO engine (engines.py, the cache's one writer, `engine=` and `bertkit env`'s lines) added 256
    # to encoder and 1 to cli (the budgets are the maintainer's choice, above); int8's product on AMX through oneDNN's
    # prepacked linear (1.15x there) 24 to encoder; saved fine-tuned runs on the engine (their heads in the graph, one
    # fallback rule for both) 48 to encoder and 20 to tasks. Issue 60 (nothing lost, nothing hung): the one output
    # check against every input and a bertkit folder's record, folders swapped whole (io 118, top 33, cli 31, tasks 10,
    # ray 4), an engine whose first passes run alone, verified caches and engine checked with precision (encoder 128),
    # deep JSON refused on every route (serve 59), the explainer's JSON escaped and n_steps bounded (explain 13).
    # Four of the census's new rows folded into their homes (one `takes_type_ids`, the service's render off the loop
    # through threads.py, int8's batches padded by `pad_ids`, `publish` and `replace_folder` instead of a bare rename):
    # encoder 12 and io 6 and serve 1 more, tasks 2, explain 2 and ray 1 fewer. Issue 61's defects 2-9 (a QA run
    # quantized, an out-of-memory embed kept, an empty transform, the search prompt on both faces, compact ranges on
    # cut sentences, `layers` published as a pattern, the explainer's default pooling the model's own, a run's int8
    # calibration cached by its weights): encoder 33, tasks 18, serve 3, io 2, explain 3
    "encoder": 4_646,
    "tasks": 5_887,
    "serve": 2_496,
    "io": 2_237,
    "cli": 2_064,
    "ray": 785,
    "explain": 1_334,
    "(top)": 364,
}
# Census rows that a grep cannot tell from a call of the one home: `Encoder.forward` is the tutorial's public forward
# pass (it runs through runner.call_model), called by the demo and the explainer; the cache's files (int8
# calibrations, OpenVINO graphs) are written by the encoder wing, which may not import io/ (the one atomic writer), at
# model load: through its one `cache_files`.
KNOWN = {
    "atomic file replace": {"encoder/cache_files.py": 1},
    # the census's weight-hash row of issue 61 (2026-12-07), as it stands: issue 61's one model holder folds it
    "weight hash": {"encoder/base.py": 1, "encoder/int8.py": 1},
}
CENSUS = PACKAGE.parents[2] / "shared" / "tools" / "census.py"


def wing_lines(root: Path = PACKAGE) -> dict[str, int]:
    lines: dict[str, int] = {}
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        wing = relative.parts[0] if len(relative.parts) > 1 else "(top)"
        lines[wing] = lines.get(wing, 0) + len(path.read_text(encoding="utf-8").splitlines())
    return lines


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
        if name != "record format/version constant" and row["files"] != KNOWN.get(name, {})
    }
    assert outside == {}


def test_one_record_format_constant(census):
    """Every file bertkit writes carries the one record of records.py: no other format or version constant."""
    assert census["mechanisms"]["record format/version constant"]["files"] == {}  # none outside records.py


def encoder_members() -> list[str]:
    from bertkit import Encoder

    return [name for name in dir(Encoder) if not name.startswith("_")]


def test_the_encoder_has_at_most_fifteen_public_members():
    assert len(encoder_members()) <= MAX_ENCODER_MEMBERS, encoder_members()


def test_no_wing_grows_past_where_it_stands():
    lines = wing_lines()
    over = {wing: (n, WING_CEILINGS[wing]) for wing, n in lines.items() if n > WING_CEILINGS.get(wing, 0)}
    assert over == {}


@pytest.mark.xfail(
    strict=True,
    reason="issue 44's budgets need features removed (the code alone is 13,230 lines): the maintainer's choice; the "
    "closing note of 2026-12-05 gives each wing's arithmetic and what would have to go",
)
def test_wings_stay_within_their_budgets():
    lines = wing_lines()
    over = {wing: (n, WING_BUDGETS[wing]) for wing, n in lines.items() if n > WING_BUDGETS.get(wing, 0)}
    assert over == {} and sum(lines.values()) <= TOTAL_BUDGET, (over, sum(lines.values()))
