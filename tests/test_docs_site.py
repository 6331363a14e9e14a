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

# The projects mgpu_tf works around; other repositories it names (kubeflow) are not.
_UPSTREAM = ("tensorflow/tensorflow", "keras-team/keras")
_CITATION = re.compile(r"(?:\b([\w.-]+/[\w.-]+))?#(\d{4,6})\b")


def _citations(text):
    """`{(repository, number)}` of the issues `text` cites.

    A bare `#N` is of the repository named last before it ("tensorflow/tensorflow#1,
    #2"); with none named before, its repository is `None`.
    """
    cited, repository = set(), None
    for match in _CITATION.finditer(text):
        repository = match.group(1) or repository
        cited.add((repository, int(match.group(2))))
    return cited


# Every module that cites an upstream issue, found by reading the package.
_CITING = {}
for _path in sorted((ROOT / "mgpu_tf").rglob("*.py")):
    _cited = {c for c in _citations(_path.read_text()) if c[0] in _UPSTREAM + (None,)}
    if _cited:
        _CITING[_path.relative_to(ROOT / "mgpu_tf").as_posix()] = _cited


def test_site_builds_with_warnings_as_errors(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "api" / "strategies" / "index.html").exists()


def test_cli_page_names_every_option_of_its_sub_commands():
    from mgpu_tf.cli import app

    page = (DOCS / "cli.md").read_text()
    parser = app._parser()
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


def test_the_workarounds_are_found_citing_their_issues():
    # The scan below is not empty: the workarounds' home cites the Keras bug it patches.
    compat = {c for path, cited in _CITING.items() if path.startswith("compat") for c in cited}
    assert ("keras-team/keras", 20585) in compat, sorted(_CITING)


@pytest.mark.parametrize("module", sorted(_CITING))
def test_troubleshooting_cites_each_upstream_issue(module):
    page = (DOCS / "troubleshooting.md").read_text()
    for repository, number in sorted(_CITING[module], key=str):
        assert repository, f"{module} cites #{number} without naming its repository"
        assert f"github.com/{repository}/issues/{number})" in page, (
            f"{module} cites {repository}#{number}; docs/troubleshooting.md does not link it")


def test_troubleshooting_sections_link_their_issue():
    page = (DOCS / "troubleshooting.md").read_text()
    sections = page.split("\n## ")[1:]
    for section in sections:
        if section.startswith("Errors that point at the fix"):
            continue
        upstream = r"\*\*Upstream:\*\* \[[\w-]+/[\w-]+#\d+\]\(https://github\.com/"
        assert re.search(upstream, section), (
            section.splitlines()[0])


# A page a reader takes in one sitting; what was measured before goes to the history.
_MAX_LINES = 800


@pytest.mark.parametrize("page", ["benchmarks.md", "design.md"])
def test_page_stays_short(page):
    lines = (DOCS / page).read_text().count("\n")
    assert lines < _MAX_LINES, (
        f"docs/{page} has {lines} lines, at most {_MAX_LINES - 1}: keep the latest run or the "
        "current reasoning, move older runs to docs/benchmarks-history.md")


def test_benchmarks_page_starts_with_the_headline_table():
    page = (DOCS / "benchmarks.md").read_text()
    before_first_section = page.split("\n## ", 1)[0]
    header = re.search(r"^\| *goal *\| *latest figure *\| *command *\| *date *\| *machine *\|$",
                       before_first_section, re.M)
    assert header, "docs/benchmarks.md must open with the table goal | latest figure | command | date | machine"
    rows = re.findall(r"^\|(?! *---)(.*)\|$", before_first_section[header.end():], re.M)
    assert len(rows) >= 5, rows
    for row in rows:
        goal, figure, command, date, machine = (c.strip() for c in row.split(" | "))
        assert figure and command and machine, row
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", date), f"a headline row without its date: {row}"
