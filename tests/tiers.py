"""The suite's two tiers: `slow` tests and the rest, with the marks checked on every run.

A test is `slow` when it builds the whole offline job, runs a TensorFlow Transform analysis
(or writes a transform) or starts a Python interpreter as a subprocess (a script, the CLI, a
Beam worker), directly or through a fixture: a few seconds each, about 130 tests and 60% of
the suite's CPU. A multiprocessing forkserver is not counted: a test process starts one, for
whichever test first asks for isolated children, so whether a test starts it depends on what
ran before (a test whose isolated children import TensorFlow is marked by hand). `make test`
(and CI) runs every test; `make test-quick` leaves the slow ones out, for a developer's loop:
the rules, ops, composites and reader cases in under half the time.

A test says so with `@pytest.mark.slow`; a fixture that does one of these things is made with
`slow_fixture` instead of `pytest.fixture`, and every test that uses it is marked when it is
collected. Each run checks the marks, so the quick tier cannot grow slow unnoticed: a test that
is not marked, or a fixture not made with `slow_fixture`, that does one of these things fails
and says what it did. The hooks are imported into `tests/conftest.py`.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

import pytest

SLOW = "slow"
_STATE = {"installed": False, "watching": []}  # [(session, events)], innermost last


_DECLARED: dict = {}  # (module, fixture name) -> (scope, slow): what the suite declared


def shared_fixture(function=None, *, slow: bool = False, **kwargs):
    """`pytest.fixture(**kwargs)` that also records the fixture's scope and tier, so the hooks
    here and in `xdist_groups` find them from a test's public `item.fixturenames`."""
    def decorate(fixture_function):
        fixture_function.pixelmill_slow = slow
        name = kwargs.get("name") or fixture_function.__name__
        _DECLARED[(fixture_function.__module__, name)] = (kwargs.get("scope", "function"), slow)
        return pytest.fixture(**kwargs)(fixture_function)
    return decorate(function) if function is not None else decorate


def slow_fixture(function=None, **kwargs):
    """`pytest.fixture(**kwargs)` for a fixture that builds the job, runs a TFT analysis or
    starts an interpreter: the tests that use it are marked `slow`."""
    return shared_fixture(function, slow=True, **kwargs)


def declared_fixture(item, name: str):
    """(scope, slow) of the fixture `name` that `item` gets, if the suite declared it with
    `shared_fixture` / `slow_fixture`: the test module's own first, then a conftest's (pytest's
    order of overrides); None for any other fixture."""
    module = getattr(getattr(item, "module", None), "__name__", None)
    if (module, name) in _DECLARED:
        return _DECLARED[(module, name)]
    found = [declared for (owner, fixture), declared in _DECLARED.items()
             if fixture == name and owner.rsplit(".", 1)[-1] == "conftest"]
    return found[-1] if found else None


def _record(event: str) -> None:
    if _STATE["watching"]:
        _STATE["watching"][-1][1].add(event)


def _counting(function, event: str):
    def counted(*args, **kwargs):
        _record(event)
        return function(*args, **kwargs)
    counted.__wrapped__ = function
    return counted


def _watch_module(module) -> None:
    """Wraps what makes the job graph or a TFT analysis in a freshly imported module."""
    if module.__name__ == "pipelines.preprocess_graph":
        module.build_preprocess = _counting(module.build_preprocess, "builds the whole job")
    elif module.__name__ == "tensorflow_transform.beam.impl":
        module.AnalyzeDataset.expand = _counting(module.AnalyzeDataset.expand,
                                                 "runs a TFT analysis")
    elif module.__name__ == "transforms.offline.tft_write":
        module.write_transform = _counting(module.write_transform, "writes a TFT transform")


class _WatchOnImport(importlib.abc.MetaPathFinder):
    """Watches the job's graph builder, TFT's analysis and the transform's writer when they are
    first imported, so a test process that never needs them never imports them."""

    NAMES = ("pipelines.preprocess_graph", "tensorflow_transform.beam.impl",
             "transforms.offline.tft_write")

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.NAMES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, execute = spec.loader, spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _watch_module(module)
        loader.exec_module = exec_module
        return spec


def _is_python(executable) -> bool:
    name = os.path.basename(os.fsdecode(executable or ""))
    return name.startswith("python") or executable == sys.executable


def _audit(event: str, args) -> None:
    if event == "subprocess.Popen" and _STATE["watching"]:
        executable, argv = args[0], args[1]
        first = argv if isinstance(argv, (str, bytes, os.PathLike)) else next(iter(argv), "")
        if _is_python(executable) or _is_python(first):
            _record("starts a Python interpreter")


def _install() -> None:
    """Once per test process, before its first test: the watchers above."""
    if _STATE["installed"]:
        return
    _STATE["installed"] = True
    for name in _WatchOnImport.NAMES:
        if name in sys.modules:
            _watch_module(sys.modules[name])
    sys.meta_path.insert(0, _WatchOnImport())
    sys.addaudithook(_audit)


def _is_slow_fixture(fixturedef) -> bool:
    return getattr(fixturedef.func, "pixelmill_slow", False)


def _uses_a_slow_fixture(item) -> bool:
    return any((declared_fixture(item, name) or ("", False))[1]
               for name in getattr(item, "fixturenames", ()))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{SLOW}: builds the whole job, runs a TFT analysis or starts a Python "
                   "interpreter (make test-quick leaves it out; see tests/tiers.py)")


def pytest_itemcollected(item):
    """Marks the tests that use a slow fixture (before `-m` selects)."""
    if _uses_a_slow_fixture(item) and not item.get_closest_marker(SLOW):
        item.add_marker(SLOW)


def _watched(session):
    """Runs the wrapped hook with events recorded; returns (its result, the events). A fixture
    set up while a test runs adds its events to the test's; a suite run inside a test (pytest's
    pytester) keeps its own."""
    _install()
    events = set()
    _STATE["watching"].append((session, events))
    try:
        result = yield
    finally:
        _STATE["watching"].pop()
        if _STATE["watching"] and _STATE["watching"][-1][0] is session:
            _STATE["watching"][-1][1].update(events)
    return result, events


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """A fixture that builds the job, runs TFT or starts an interpreter must be a
    `slow_fixture`."""
    result, events = yield from _watched(request.session)
    if events and not _is_slow_fixture(fixturedef):
        pytest.fail(f"fixture {fixturedef.argname!r} {' and '.join(sorted(events))}: make it "
                    "with tests.tiers.slow_fixture (make test-quick leaves its tests out)",
                    pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that builds the job, runs TFT or starts an interpreter must be marked slow."""
    result, events = yield from _watched(item.session)
    if events and not item.get_closest_marker(SLOW):
        pytest.fail(f"{item.nodeid} {' and '.join(sorted(events))}: mark it "
                    "@pytest.mark.slow (make test-quick leaves it out; see tests/tiers.py)",
                    pytrace=False)
    return result
