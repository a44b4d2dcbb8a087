"""The suite's tiers (tests/tiers.py): what makes a test slow is found on every run, a test or
fixture that does it without saying so fails, and `-m "not slow"` leaves the slow ones out.
Each case runs a small suite of its own in this process (pytest's `pytester`)."""
from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

_CONFTEST = """
from tests.tiers import (  # noqa: F401
    pytest_configure, pytest_fixture_setup, pytest_itemcollected, pytest_runtest_call,
    slow_fixture)
"""

_INTERPRETER = "subprocess.run([sys.executable, '-c', 'pass'], check=True)"


@pytest.fixture()
def suite(pytester):
    pytester.makeconftest(_CONFTEST)
    return pytester


def test_an_unmarked_test_that_starts_an_interpreter_fails_and_says_why(suite):
    suite.makepyfile(f"import subprocess, sys\ndef test_child():\n    {_INTERPRETER}\n")
    result = suite.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_child starts a Python interpreter: mark it "
                                 "@pytest.mark.slow (make test-quick leaves it out*"])


def test_a_marked_test_may_start_an_interpreter_and_the_quick_tier_leaves_it_out(suite):
    suite.makepyfile(f"import pytest, subprocess, sys\n@pytest.mark.slow\ndef test_child():\n"
                     f"    {_INTERPRETER}\ndef test_quick():\n    pass\n")
    suite.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
    quick = suite.runpytest_inprocess("-p", "no:cacheprovider", "-m", "not slow")
    quick.assert_outcomes(passed=1, deselected=1)


def test_a_plain_test_that_does_nothing_slow_passes_without_a_mark(suite):
    suite.makepyfile("import sys\ndef test_light():\n    assert sys.executable\n")
    suite.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_tests_using_a_slow_fixture_are_marked_even_through_another_fixture(suite):
    suite.makepyfile(
        "import pytest, subprocess, sys\nfrom tests.tiers import slow_fixture\n"
        f"@slow_fixture(scope='module')\ndef job():\n    {_INTERPRETER}\n    return 1\n"
        "@pytest.fixture()\ndef reads_job(job):\n    return job + 1\n"
        "def test_direct(job):\n    assert job == 1\n"
        "def test_through(reads_job):\n    assert reads_job == 2\n"
        "def test_quick():\n    pass\n")
    suite.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=3)
    slow = suite.runpytest_inprocess("-p", "no:cacheprovider", "-m", "slow")
    slow.assert_outcomes(passed=2, deselected=1)
    quick = suite.runpytest_inprocess("-p", "no:cacheprovider", "-m", "not slow")
    quick.assert_outcomes(passed=1, deselected=2)


def test_a_plain_fixture_that_starts_an_interpreter_is_an_error_naming_it(suite):
    suite.makepyfile(
        "import pytest, subprocess, sys\n"
        f"@pytest.fixture()\ndef child():\n    {_INTERPRETER}\n"
        "def test_uses(child):\n    pass\n")
    result = suite.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'child' starts a Python interpreter: make it with "
                                 "tests.tiers.slow_fixture*"])


def test_building_the_job_graph_is_seen(suite):
    """The job's graph builder as the watcher wraps it (here on a stand-in module, so this test
    neither imports nor runs the job)."""
    suite.makepyfile(
        "import types\nfrom tests.tiers import _watch_module\n"
        "def test_job():\n"
        "    module = types.ModuleType('pipelines.preprocess_graph')\n"
        "    module.build_preprocess = lambda pipeline, job: 'built'\n"
        "    _watch_module(module)\n"
        "    assert module.build_preprocess(None, None) == 'built'\n")
    result = suite.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_job builds the whole job: mark it @pytest.mark.slow*"])
