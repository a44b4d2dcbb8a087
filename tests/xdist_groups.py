"""pytest-xdist scheduling for this suite: tests that share a fixture run on one worker.

With `-n 2` (`--dist load`), xdist hands out tests one by one, so the tests of a module-scoped
fixture (one job run read by ten tests) land on both workers and each worker runs the job. Here,
tests that use the same module- or session-scoped fixture of this suite form one group (two
fixtures used by one test join their groups), and a group goes to one worker as a unit
(xdist's `LoadScopeScheduling` with groups for scopes; large groups start first). Tests without
a shared fixture are handed out one by one, as with `load`.

xdist's own `--dist loadgroup` would do this with `xdist_group` marks, but it names grouped
tests by assigning `item._nodeid`, which pytest 9.2 no longer reads, so every test ends up in a
group of its own. Instead each worker writes the groups it collected to a file the controller
named, and the scheduler reads it once collection is complete. Other `--dist` modes are left
as they are. The hooks are imported into `tests/conftest.py`.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest

from tests.tiers import declared_fixture

_WORKER_KEY = "pixelmill_groups_file"
_STATE = {}


def _shared_fixtures(item) -> list[str]:
    """This suite's module- and session-scoped fixtures that `item` uses (directly or not):
    those declared with `tests.tiers.shared_fixture` or `slow_fixture`."""
    names = []
    for name in getattr(item, "fixturenames", ()):
        scope = (declared_fixture(item, name) or ("function", False))[0]
        if scope in ("module", "session"):
            module = "" if scope == "session" else item.nodeid.split("::")[0] + ":"
            names.append(module + name)
    return names


def groups_of(items) -> dict:
    """nodeid -> group name for the tests that use a shared fixture (connected sets)."""
    parent = {}

    def find(name):
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    shared = {item.nodeid: sorted(_shared_fixtures(item)) for item in items}
    for names in shared.values():
        for other in names[1:]:
            low, high = sorted((find(names[0]), find(other)))
            parent[high] = low
    return {nodeid: "@" + find(names[0]) for nodeid, names in shared.items() if names}


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """(controller) Names the file each worker writes its groups to."""
    if node.config.getoption("dist") == "load":
        if "dir" not in _STATE:
            _STATE["dir"] = tempfile.mkdtemp(prefix="pixelmill-xdist-")
        node.workerinput[_WORKER_KEY] = os.path.join(_STATE["dir"], "groups.json")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """(worker) Writes nodeid -> group for the collected tests (every worker collects the
    same tests, so the files are the same; the last rename wins)."""
    path = getattr(config, "workerinput", {}).get(_WORKER_KEY)
    if not path:
        return
    partial = f"{path}.{config.workerinput['workerid']}"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(groups_of(items), handle)
    os.replace(partial, path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """(controller) For `--dist load`: load scheduling that keeps each group on one worker."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if "groups" not in _STATE:
                path = os.path.join(_STATE.get("dir", ""), "groups.json")
                with open(path, encoding="utf-8") as handle:
                    _STATE["groups"] = json.load(handle)
            return _STATE["groups"].get(nodeid, nodeid)

    return SharedFixtureScheduling(config, log)


def remove_groups_file() -> None:
    """(controller, at the end) Removes the groups file's folder."""
    if "dir" in _STATE:
        shutil.rmtree(_STATE.pop("dir"), ignore_errors=True)
