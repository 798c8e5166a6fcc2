"""The examples in the public API's docstrings (what the API reference shows) run and print what they say."""

from __future__ import annotations

import doctest
import inspect

import pytest

import bertkit


def public_docstring_tests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(recurse=False)
    found: dict[str, doctest.DocTest] = {}
    for name in bertkit.__all__:
        obj = getattr(bertkit, name)
        members = [(name, obj)]
        if inspect.isclass(obj):  # its own members first, then those it inherits from bertkit's classes
            owners = [klass for klass in obj.__mro__ if klass.__module__.startswith("bertkit")]
            members += [(f"{name}.{m}", v) for klass in owners for m, v in vars(klass).items() if not m.startswith("_")]
        for qualified, member in members:
            member = getattr(member, "__func__", member)
            module = inspect.getmodule(member) or inspect.getmodule(obj)
            for test in finder.find(member, qualified, module=module, globs={}):
                if test.examples:
                    found.setdefault(qualified, test)
    return list(found.values())


TESTS = public_docstring_tests()


def test_the_public_api_has_examples():
    names = {t.name for t in TESTS}
    assert {"Encoder", "TextClassifier", "Encoder.embed", "Encoder.tokenize", "similarity", "entity_scores"} <= names


@pytest.mark.parametrize("test", TESTS, ids=lambda t: t.name)
def test_docstring_examples_run(test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
