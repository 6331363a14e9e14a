"""Each package's `__init__.pyi` stub: what type checkers read and what loads on first use.

lazy-loader turns a stub's imports into the package's lazy attributes; type checkers
read the same file and take as exported what its `__all__` lists. These tests keep
the two readings in step, check that every listed name resolves to what the stub
says, and that the names stay lazy: TensorFlow loads only when one is used.
"""

import ast
import importlib
import pathlib
import textwrap

import pytest

from support import workers

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "mgpu_tf"
PACKAGES = sorted(".".join(p.relative_to(PACKAGE.parent).parts[:-1])
                  for p in PACKAGE.rglob("__init__.py"))


def _stub(package):
    """`(__all__, {name: module it is imported from}, submodules)` as the stub spells them."""
    path = PACKAGE.parent.joinpath(*package.split("."), "__init__.pyi")
    names, submodules, exported = {}, set(), None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            names.update({alias.name: f"{package}.{node.module}" for alias in node.names})
        elif isinstance(node, ast.ImportFrom):
            submodules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Assign) and node.targets[0].id == "__all__":
            exported = ast.literal_eval(node.value)
    return exported, names, submodules


def test_every_package_has_a_stub():
    assert len(PACKAGES) >= 12, PACKAGES
    assert "mgpu_tf.model_parallel.hybrid" in PACKAGES
    for package in PACKAGES:
        exported, names, _ = _stub(package)
        assert exported and names, package


@pytest.mark.parametrize("package", PACKAGES)
def test_the_stub_exports_the_names_it_imports(package):
    exported, names, submodules = _stub(package)
    assert exported == sorted(names), package
    assert not submodules & set(names), package


@pytest.mark.parametrize("package", PACKAGES)
def test_all_at_run_time_is_the_stubs(package):
    exported, _, _ = _stub(package)
    assert importlib.import_module(package).__all__ == exported


def test_dir_lists_the_lazy_names_and_what_the_top_level_defines():
    import mgpu_tf

    assert {"Choice", "__version__", "make_strategy", "callbacks", "train"} <= set(dir(mgpu_tf))
    # Nothing else public: not the modules the top level uses to load the rest.
    exported, _, submodules = _stub("mgpu_tf")
    public = {name for name in dir(mgpu_tf) if not name.startswith("_")}
    assert public - set(exported) - submodules == {"Choice"}, public - set(exported)
    exported, _, submodules = _stub("mgpu_tf.cluster")
    assert set(exported) | submodules <= set(dir(importlib.import_module("mgpu_tf.cluster")))


RESOLVE = """
import importlib
import json
import sys

import mgpu_tf

stubs = json.loads(sys.argv[1])
assert "tensorflow" not in sys.modules, "a bare import loaded TensorFlow"
wrong = []
for package, (names, submodules) in sorted(stubs.items()):
    value = mgpu_tf
    for part in package.split(".")[1:]:
        value = getattr(value, part)
    for name, module in sorted(names.items()):
        if getattr(value, name) is not getattr(importlib.import_module(module), name):
            wrong.append(f"{package}.{name} is not {module}.{name}")
    for name in sorted(submodules):
        if getattr(value, name) is not sys.modules[f"{package}.{name}"]:
            wrong.append(f"{package}.{name} is not the module")
print("\\n".join(wrong) or "all resolved")
"""


def test_every_name_of_every_stub_resolves_after_a_bare_import(tmp_path):
    import json

    stubs = {}
    for package in PACKAGES:
        _, names, submodules = _stub(package)
        stubs[package] = [names, sorted(submodules)]
    script = tmp_path / "resolve.py"
    script.write_text(textwrap.dedent(RESOLVE))
    result = workers.run_python(script, json.dumps(stubs), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1:] == ["all resolved"], result.stdout


LAZY = """
import contextlib
import io
import sys

import mgpu_tf
import mgpu_tf.cli

loaded = []
if "tensorflow" in sys.modules:
    loaded.append("import mgpu_tf")
for command in [[], *[[name] for name in sys.argv[1:]]]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        mgpu_tf.cli.main([*command, "--help"])
    if "tensorflow" in sys.modules:
        loaded.append(" ".join(["mgpu-tf", *command, "--help"]))
print(loaded)
"""


def test_importing_and_every_help_leave_tensorflow_unloaded(tmp_path):
    script = tmp_path / "lazy.py"
    script.write_text(textwrap.dedent(LAZY))
    commands = ("launch", "env", "k8s", "calibrate", "bench", "plan")
    result = workers.run_python(script, *commands, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]", result.stdout
