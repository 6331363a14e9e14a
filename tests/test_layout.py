"""The package's shape: no import cycle (of modules or of packages), layers that only
import the ones below, a small top level, small modules, no module state.

The import graph is read from the source (every `import` statement, at any depth in a
module, since a function-level import is still a dependency, and the imports of the root's
`__init__.pyi` stub, which lazy-loader runs on first use), so the test needs no
TensorFlow and sees imports that only run on some paths. `python tests/test_layout.py`
prints the graph of packages.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "mgpu_tf"


def _module_name(path):
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path, modules, package=None):
    """The `mgpu_tf` modules `path` imports, each with the packages it runs on the way.

    The root `mgpu_tf` counts only where it is named itself (`import mgpu_tf`, `from mgpu_tf
    import Choice`), not as the parent every import runs. A stub's relative imports are
    read as imports of `package`'s modules.
    """
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and package:
            module = f"{package}.{node.module}" if node.module else package
            targets = [f"{module}.{alias.name}" for alias in node.names]
            targets = [t if t in modules else module for t in targets]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
            targets = [t if t in modules else node.module for t in targets]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            found |= {".".join(parts[:i]) for i in range(1 if target == "mgpu_tf" else 2,
                                                         len(parts) + 1)
                      if ".".join(parts[:i]) in modules}
    return found


def import_graph():
    """`{module: set of mgpu_tf modules it imports}` for every module of the package."""
    modules = _modules()
    graph = {name: _imports(path, modules) for name, path in modules.items()}
    # The root's stub makes it the top: each public name loads its layer. (A folder's stub
    # loads that folder's own modules only.)
    graph["mgpu_tf"] |= _imports(PACKAGE / "__init__.pyi", modules, package="mgpu_tf")
    return {name: targets - {name} for name, targets in graph.items()}


def find_cycle(graph):
    """Returns one import cycle as a list of modules, or `None`."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def package_graph(graph):
    """`{package: set of packages it imports}`, a package being a top-level entry of mgpu_tf.

    The root `mgpu_tf` is one too, the top: its stub loads every other on first use.
    """
    def package(module):
        return ".".join(module.split(".")[:2])

    packages = {}
    for module, targets in graph.items():
        packages.setdefault(package(module), set()).update(
            package(t) for t in targets if package(t) != package(module))
    return packages


def test_the_package_has_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_packages_have_no_import_cycle():
    cycle = find_cycle(package_graph(import_graph()))
    assert cycle is None, "package import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_package_graph_sees_a_cycle_between_modules_that_have_none():
    graph = {"mgpu_tf.a.low": set(), "mgpu_tf.a.top": {"mgpu_tf.b.mid"},
             "mgpu_tf.b.mid": {"mgpu_tf.a.low", "mgpu_tf"}}
    assert find_cycle(graph) is None
    assert package_graph(graph) == {"mgpu_tf.a": {"mgpu_tf.b"},
                                    "mgpu_tf.b": {"mgpu_tf.a", "mgpu_tf"}}
    assert find_cycle(package_graph(graph)) == ["mgpu_tf.a", "mgpu_tf.b", "mgpu_tf.a"]


def test_the_graph_sees_function_level_and_package_imports():
    graph = import_graph()
    # factory imports the planner inside the package's lazy layout, and options' import
    # of mgpu_tf.base.devices runs mgpu_tf.base's __init__ on the way.
    assert "mgpu_tf.planner.recommend" in graph["mgpu_tf.strategies.factory"]
    assert "mgpu_tf.base" in graph["mgpu_tf.base.options"]


def test_the_graph_sees_the_root_and_the_stubs(tmp_path):
    graph = import_graph()
    assert "mgpu_tf.strategies.factory" in graph["mgpu_tf"]  # through its stub
    modules = _modules()
    for source, expected in [("import mgpu_tf\n", {"mgpu_tf"}),
                             ("from mgpu_tf import Choice\n", {"mgpu_tf"}),
                             ("from mgpu_tf import compat\n", {"mgpu_tf.compat"}),
                             ("import mgpu_tf.base.choice\n", {"mgpu_tf.base", "mgpu_tf.base.choice"})]:
        (tmp_path / "probe.py").write_text(source)
        assert _imports(tmp_path / "probe.py", modules) == expected, source


def test_nothing_imports_the_root():
    # The root is the top: a module that imports it climbs over every layer at once.
    importers = sorted(module for module, targets in import_graph().items()
                       if "mgpu_tf" in targets)
    assert not importers, importers


def test_the_registry_imports_nothing_but_choice():
    # Plugins and the flags read the registry without loading any layer.
    assert import_graph()["mgpu_tf.base.registry"] <= {"mgpu_tf.base", "mgpu_tf.base.choice"}


def _entries():
    """Every top-level package and module of mgpu_tf, by its dotted name."""
    return sorted(f"mgpu_tf.{p.stem}" for p in PACKAGE.iterdir()
                  if p.suffix == ".py" and p.stem != "__init__"
                  or p.is_dir() and (p / "__init__.py").exists())


@pytest.mark.parametrize("lower, higher", [
    *[("mgpu_tf.base", entry) for entry in _entries() if entry != "mgpu_tf.base"],
    ("mgpu_tf.base", "mgpu_tf"),
    *[("mgpu_tf.compat", f"mgpu_tf.{name}")
      for name in ("comm", "cluster", "data", "callbacks", "strategies")],
    ("mgpu_tf.cluster", "mgpu_tf.strategies"),
    ("mgpu_tf.cluster", "mgpu_tf.comm"),
    ("mgpu_tf.comm", "mgpu_tf.strategies"),
    ("mgpu_tf.model_parallel", "mgpu_tf.strategies"),
    ("mgpu_tf.model_parallel", "mgpu_tf.planner"),
    ("mgpu_tf.planner", "mgpu_tf.strategies"),
])
def test_lower_layers_do_not_import_higher_ones(lower, higher):
    def within(module, package):  # the root is only itself here: it is every module's parent
        return module == package or package != "mgpu_tf" and module.startswith(package + ".")

    offenders = sorted(f"{module} imports {target}"
                       for module, targets in import_graph().items() if within(module, lower)
                       for target in targets if within(target, higher))
    assert not offenders, offenders


def test_the_top_level_has_at_most_thirteen_entries():
    # __init__.pyi lists the names of __init__.py; it adds no entry a reader must learn.
    # The thirteenth is base/, the layer strategies, model_parallel and planner share.
    entries = sorted(p.name for p in PACKAGE.iterdir()
                     if p.name not in ("__pycache__", "__init__.pyi"))
    assert len(entries) <= 13, entries


def test_no_module_is_over_400_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def _docstring_lines(tree):
    """`(node, lines)` for the module, class and function docstrings of `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                yield node, first.end_lineno - first.lineno + 1


# Docstring lines over all lines; the aim is below 0.20, and the bound only ever falls.
_MAX_DOCSTRING_SHARE = 0.20


def test_docstrings_are_concise():
    # The story behind a design lives in docs/design.md, not in the docstrings.
    total = docstrings = 0
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        total += len(text.splitlines())
        for node, lines in _docstring_lines(ast.parse(text)):
            docstrings += lines
            name = path.relative_to(PACKAGE).as_posix()
            if isinstance(node, ast.Module) and lines > 10:
                long[name] = lines
    assert not long, f"module docstrings over 10 lines: {long}"
    assert docstrings / total < _MAX_DOCSTRING_SHARE, f"{docstrings} of {total} lines"


# Module-level containers that may be written after import, each with why.
_MODULE_STATE_ALLOWED = {
    "mgpu_tf.base.registry": {"_ALIASES", "_REGISTRY", "_TABLE"},  # written when plugins register
    "mgpu_tf.cluster.stopping": {"_installed"},  # signal handlers are the process'
    # log-once; the key blocks handed out, as TensorFlow's collective keys are the process'
    "mgpu_tf.compat.collective_keys": {"_reported", "_KEY_BLOCKS"},
    "mgpu_tf.compat.versions": {"_logged", "_warned"},  # log-once
    "mgpu_tf.data.order": {"_told"},  # log-once
    "mgpu_tf.data.source": {"_reported"},  # log-once
}
_MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque",
                  "WeakKeyDictionary", "WeakValueDictionary", "WeakSet", "bytearray"}
# Counters: each `next()` writes them, so a module-level one is state from its first use.
_COUNTER_CALLS = {"count"}
_MUTATORS = {"append", "add", "update", "setdefault", "pop", "popitem", "clear", "extend",
             "insert", "remove", "discard", "appendleft"}


def _is_mutable(value):
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        return (func.attr if isinstance(func, ast.Attribute)
                else getattr(func, "id", None)) in _MUTABLE_CALLS
    return False


def _is_counter(value):
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    return (func.attr if isinstance(func, ast.Attribute)
            else getattr(func, "id", None)) in _COUNTER_CALLS


def module_state(source):
    """Names of module-level containers and counters that `source` writes after import, and
    its globals."""
    tree = ast.parse(source)
    containers, objects, written = set(), set(), set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if _is_mutable(node.value):
                containers |= names
            if _is_counter(node.value):
                written |= names
            if isinstance(node.value, ast.Call):
                objects |= names  # an object made at import: its attributes are state too
    containers.discard("__all__")
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            written |= set(node.names)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and node.func.attr in _MUTATORS):
            written |= {node.func.value.id} & containers
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.target if isinstance(node, ast.AugAssign) else node.targets
            for target in targets if isinstance(targets, list) else [targets]:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    written |= {target.value.id} & containers
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    written |= {target.value.id} & objects
    return written


def test_no_module_state_is_written_while_training_runs():
    # State lives on the strategy, optimizer, data set or callback, not in a module.
    found = {name: sorted(written - _MODULE_STATE_ALLOWED.get(name, set()))
             for name, path in _modules().items()
             if (written := module_state(path.read_text()))}
    assert not {name: names for name, names in found.items() if names}, found


def test_the_state_scan_sees_each_kind_of_write():
    source = (
        "import itertools, types, weakref\n_TABLE = weakref.WeakKeyDictionary()\n_LIVE = []\n"
        "_SEEN = set()\n_IDS = itertools.count(1)\n_NOW = types.SimpleNamespace(epoch=0)\n"
        "_COUNT = 0\n_NAMES = ('a',)\n_CONSTANT = {'a': 1}\n__all__ = []\n"
        "def f(key):\n    global _COUNT\n    _TABLE[key] = 1\n    _LIVE[:] = []\n"
        "    _SEEN.add(key)\n    _COUNT += 1\n    _NOW.epoch = 1\n"
        "    return _CONSTANT['a'], _NAMES\n")
    assert module_state(source) == {"_TABLE", "_LIVE", "_SEEN", "_IDS", "_NOW", "_COUNT"}


if __name__ == "__main__":
    # The package graph: each package, then the packages it imports.
    for name, targets in sorted(package_graph(import_graph()).items()):
        print(f"{name}: {', '.join(sorted(targets)) or '-'}")
