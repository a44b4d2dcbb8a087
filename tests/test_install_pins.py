"""The environment the suite runs in is the one setup.py pins: a version pinned with `==` (the
heavy stack, and ml_dtypes, whose 0.7.0 costs every TensorFlow process ~0.6 s of CPU at
import) is the version installed. A virtual environment made before a pin changed fails here
instead of measuring or testing other code than users install."""
from __future__ import annotations

import ast
import importlib.metadata
import os
import re

_SETUP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "setup.py")


def _pins() -> dict[str, str]:
    """{distribution name: version} of every `name==version` (extras allowed) requirement in
    setup.py's install_requires."""
    with open(_SETUP) as handle:
        tree = ast.parse(handle.read())
    (requires,) = [keyword.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                   for keyword in node.keywords if keyword.arg == "install_requires"]
    pins = {}
    for requirement in ast.literal_eval(requires):
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^;\s]+)", requirement)
        if match:
            pins[match.group(1)] = match.group(2)
    return pins


def test_setup_pins_the_heavy_stack_and_ml_dtypes():
    assert {"tensorflow", "apache-beam", "tensorflow-transform", "ml_dtypes"} <= set(_pins())


def test_every_pinned_version_is_the_installed_one():
    installed = {name: importlib.metadata.version(name) for name in _pins()}
    assert installed == _pins()
