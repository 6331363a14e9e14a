"""The documentation site: it builds with warnings as errors, and no page drifts from the code.

`mkdocs build --strict` fails on a broken link, a navigation entry without its page,
or a docstring mkdocstrings cannot parse. The other tests check that the pages
name what the code has: the options of each sub-command they describe, every notebook,
every upstream issue a workaround is for.
"""

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# Modules whose docstrings name the upstream issues they work around.
_WORKAROUND_MODULES = ("compat.py", "cluster/failures.py", "data/sharding.py", "callbacks.py",
                       "model_parallel/pipeline.py")


def test_site_builds_with_warnings_as_errors(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "api" / "strategies" / "index.html").exists()


def test_cli_page_names_every_option_of_its_sub_commands():
    from mgpu_tf import cli

    page = (DOCS / "cli.md").read_text()
    parser = cli._parser()
    [subcommands] = [a for a in parser._actions if a.choices and a.dest == "command"]
    documented = re.findall(r"^## mgpu-tf ([\w-]+)", page, flags=re.M)
    assert {"launch", "env", "k8s", "calibrate", "plan", "bench"} <= set(documented)
    for name in documented:
        for action in subcommands.choices[name]._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert f"`{option}" in page, f"mgpu-tf {name} {option}"


def test_notebooks_page_names_every_notebook():
    page = (DOCS / "notebooks.md").read_text()
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"`{notebook.name}`" in page


@pytest.mark.parametrize("module", _WORKAROUND_MODULES)
def test_troubleshooting_cites_each_upstream_issue(module):
    text = (ROOT / "mgpu_tf" / module).read_text()
    page = (DOCS / "troubleshooting.md").read_text()
    for number in re.findall(r"#(\d{4,6})\b", text):
        assert f"/{number})" in page, f"{module} cites #{number}"


def test_troubleshooting_sections_link_their_issue():
    page = (DOCS / "troubleshooting.md").read_text()
    sections = page.split("\n## ")[1:]
    for section in sections:
        if section.startswith("Errors that point at the fix"):
            continue
        upstream = r"\*\*Upstream:\*\* \[[\w-]+/[\w-]+#\d+\]\(https://github\.com/"
        assert re.search(upstream, section), (
            section.splitlines()[0])
