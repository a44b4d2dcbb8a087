"""The layout rules a newcomer relies on, checked on the source itself: no product module over
450 lines, no function over 80 lines (geometry kernels excepted), no docstring over 25 lines
(contract and reason; measurements live in docs/benchmarks.md, references in docs/), no
import cycle among pixelmill's modules, counting imports inside functions too (a lazy import
that only hides a cycle is still a cycle), and no assignment into a framework's modules or
classes (Beam, TensorFlow, TFT, protobuf: speed is found in our own design, not by patching
theirs)."""
from __future__ import annotations

import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("configs", "pipelines", "runners", "transforms")
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80
# Vectorized resampling kernels read best as one piece (see transforms/online/geometry.py).
FUNCTION_EXCEPTIONS = {"transforms.online.geometry"}
MAX_DOCSTRING_LINES = 25
# Being shortened in a parallel change (issue 23 item 5); drop them from here once it lands.


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


@functools.cache
def _tree(name: str) -> ast.Module:
    """A module's syntax tree, parsed once for every check of it."""
    return ast.parse(MODULES[name].read_text())


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name in MODULES}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def test_modules_are_found():
    assert "pipelines.preprocess_graph" in MODULES and "transforms.codec" in MODULES


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_is_short(name):
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{MODULES[name]} has {lines} lines"


@pytest.mark.parametrize("name", sorted(set(MODULES) - FUNCTION_EXCEPTIONS))
def test_functions_are_short(name):
    tree = _tree(name)
    long = [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"{MODULES[name]}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def _long_docstrings(tree: ast.AST) -> list[tuple[str, int]]:
    """(name, source lines) of each module, class or function docstring over the cap."""
    long = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)) or ast.get_docstring(node) is None:
            continue
        doc = node.body[0]
        lines = doc.end_lineno - doc.lineno + 1
        if lines > MAX_DOCSTRING_LINES:
            long.append((getattr(node, "name", "<module>"), lines))
    return long


@pytest.mark.parametrize("name", sorted(MODULES))
def test_docstrings_are_short(name):
    long = _long_docstrings(_tree(name))
    assert not long, f"{MODULES[name]}: docstrings over {MAX_DOCSTRING_LINES} lines: {long}"


def test_docstring_check_finds_a_long_one():
    body = "\n".join(["x"] * MAX_DOCSTRING_LINES)
    source = f'"""{body}"""\nclass A:\n    """{body}\n    """\n    def f(self):\n        """ok"""\n'
    assert _long_docstrings(ast.parse(source)) == [("A", MAX_DOCSTRING_LINES + 1)]


def test_no_import_cycles():
    graph = {name: _imports(_tree(name)) - {name} for name in MODULES}
    assert _find_cycle(graph) is None, f"import cycle: {' -> '.join(_find_cycle(graph))}"


def test_cycle_finder_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


FRAMEWORKS = ("apache_beam", "tensorflow", "tensorflow_transform", "tfx_bsl", "google.protobuf",
              "pyarrow", "keras")


def _is_framework(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in FRAMEWORKS)


def _framework_names(tree: ast.AST) -> set[str]:
    """Local names bound to a framework's module, to something imported from one, or (an
    alias) to a plain attribute path from such a name (`local = core.y`: no call, so not an
    object the code made)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names
                         if _is_framework(alias.name))
        elif isinstance(node, ast.ImportFrom) and _is_framework(node.module or ""):
            names.update(alias.asname or alias.name for alias in node.names)
    aliases = [(target.id, node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
               for target in node.targets if isinstance(target, ast.Name)]
    while True:  # an alias of an alias too
        found = {name for name, value in aliases if name not in names and _root(value) in names}
        if not found:
            return names
        names |= found


def _root(node: ast.AST) -> str | None:
    """The name an attribute or subscript path starts from (`core` of `core.t[k].x`)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _changed_objects(node: ast.AST) -> list[ast.AST]:
    """The objects whose attributes or items `node` assigns, deletes or sets (`setattr`,
    `delattr`)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("setattr", "delattr") and node.args:
        return [node.args[0]]
    if isinstance(node, (ast.Assign, ast.Delete)):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return []
    flat = [part for target in targets for part in ast.walk(target)]  # tuple targets too
    return [part.value for part in flat if isinstance(part, (ast.Attribute, ast.Subscript))
            and isinstance(part.ctx, (ast.Store, ast.Del))]


def _framework_patches(tree: ast.AST) -> list[int]:
    """Lines that assign (or setattr/delattr) an attribute reached from a framework name."""
    names = _framework_names(tree)
    return sorted({node.lineno for node in ast.walk(tree)
                   if any(_root(changed) in names for changed in _changed_objects(node))})


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_framework_is_patched(name):
    lines = _framework_patches(_tree(name))
    assert not lines, f"{MODULES[name]}: assigns into a framework at lines {lines}"


def test_patch_check_finds_a_patch():
    source = ("import apache_beam as beam\nfrom apache_beam.transforms import core\n"
              "from tensorflow.python.framework import ops\nimport numpy as np\n"
              "core.get_function_args_defaults = None\nbeam.Map.x += 1\n"
              "setattr(ops.Graph, 'f', None)\nnp.x = 1\nlocal = core.y\nlocal.z = 2\n"
              "import keras_like\nkeras_like.x = 1\na, core.b = 1, 2\ncore.y.z.w = core.q.r\n"
              "core.table['k'] = 1\ndel beam.registry[0].x\nother = local\nother.w = 3\n"
              "made = beam.Pipeline()\nmade.x = 1\nrows = {}\nrows['k'] = np.x\n")
    assert _framework_patches(ast.parse(source)) == [5, 6, 7, 10, 13, 14, 15, 16, 18]
