"""Every `mgpu_tf.X` the README and the guides spell resolves after a bare `import mgpu_tf`.

The API pages (docs/api/) are left out: their names are the import paths mkdocstrings
documents, not attributes a user reaches.
"""

import pathlib
import re
import textwrap

from support import workers

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

CHECK = """
import sys
import mgpu_tf

missing = []
for name in sys.argv[1:]:
    value = mgpu_tf
    try:
        for part in name.split(".")[1:]:
            value = getattr(value, part)
    except AttributeError as error:
        missing.append(f"{name}: {error}")
print("\\n".join(missing) or "all resolved")
"""


def _spelled_names():
    names = set()
    for document in DOCUMENTS:
        names.update(re.findall(r"\bmgpu_tf(?:\.[A-Za-z_]\w*)+", document.read_text()))
    return sorted(names)


def test_every_spelled_name_resolves_after_a_bare_import(tmp_path):
    names = _spelled_names()
    assert {"mgpu_tf.callbacks", "mgpu_tf.flags.define_flags",
            "mgpu_tf.cluster.launcher.launch"} <= set(names)
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent(CHECK))
    result = workers.run_python(script, *names, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "all resolved", result.stdout


def test_the_launcher_is_spelled_where_it_lives():
    for document in DOCUMENTS:
        assert not re.search(r"\bmgpu_tf\.launcher\b", document.read_text()), document.name
