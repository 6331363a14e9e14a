"""Every Python block of README.md and docs/ runs as copied, each in a fresh process.

A block that needs what this machine lacks (a cluster, a GPU, a TPU) carries the
comment `<!-- no-run: the reason -->` on the line before its opening fence; it is
counted, not run. A block that fits on shard_dataset's data runs once, with its
UserWarnings made errors, and that run answers both tests that ask about it. The blocks
the session selected start two at a time as the first of them is asked for, and each test
waits for its own.
"""

import concurrent.futures
import functools
import pathlib
import re
import subprocess
import sys
import tempfile

import pytest

from support import workers

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "docs" / "api").glob("*.md"))]
_BLOCK = re.compile(r"(?:<!-- no-run: (?P<reason>.+?) -->\s*\n)?^```python\n(?P<code>.*?)^```$",
                    re.M | re.S)

# Blocks known not to run yet, each with why: strict, so the test says when one starts to
# run and its entry can go.
_NOT_YET_RUNNABLE = {}
# Fewer runnable blocks than this means the extraction broke, or blocks were marked away.
_AT_LEAST_RUN = 4
# Blocks run at once: independent processes, started together, not one after another.
_AT_ONCE = 2


def _blocks():
    for document in DOCUMENTS:
        text = document.read_text()
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("code"))  # the opening fence's line
            name = f"{document.relative_to(ROOT)}:{line}"
            yield name, match.group("code"), match.group("reason")


def _params():
    for name, code, reason in _blocks():
        marks = []
        if reason:
            marks.append(pytest.mark.skip(reason=f"no-run: {reason}"))
        elif name in _NOT_YET_RUNNABLE:
            marks.append(pytest.mark.xfail(reason=_NOT_YET_RUNNABLE[name], strict=True))
        yield pytest.param(code, id=name, marks=marks)


def test_the_blocks_are_found_and_most_run():
    blocks = list(_blocks())
    skipped = [name for name, _, reason in blocks if reason]
    run = len(blocks) - len(skipped) - len(_NOT_YET_RUNNABLE)
    print(f"{len(blocks)} Python blocks: {run} run, {len(skipped)} marked no-run "
          f"({', '.join(skipped) or 'none'}), {len(_NOT_YET_RUNNABLE)} not yet runnable")
    assert set(_NOT_YET_RUNNABLE) <= {name for name, _, _ in blocks}
    assert run >= _AT_LEAST_RUN


def _is_sharded_fit(code):
    return "shard_dataset(" in code and ".fit(" in code


# Keras' fit defaults to shuffle=True and warns that a data set cannot be shuffled.
_WARNINGS_AS_ERRORS = ("-W", "error::UserWarning")


@functools.lru_cache(maxsize=None)
def _run_once(code, *options):
    """The block's run in a fresh process of its own directory, once per session."""
    with tempfile.TemporaryDirectory() as directory:
        script = pathlib.Path(directory) / "snippet.py"
        script.write_text(code)
        return subprocess.run([sys.executable, *options, str(script)], cwd=directory,
                              timeout=180, env=workers.environment(), capture_output=True,
                              text=True)


def _options(code):
    # A fit on sharded data runs as the warnings test needs it: a warning fails both tests.
    return _WARNINGS_AS_ERRORS if _is_sharded_fit(code) else ()


def _selected_codes(request):
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if (item.module is request.module and callspec and "code" in callspec.params
                and item.get_closest_marker("skip") is None):
            yield callspec.params["code"]


@pytest.fixture(scope="module")
def runs(request):
    """`{code: future of its run}` for every block a selected, unskipped test of this file runs."""
    with concurrent.futures.ThreadPoolExecutor(_AT_ONCE) as pool:
        futures = {code: pool.submit(_run_once, code, *_options(code))
                   for code in dict.fromkeys(_selected_codes(request))}
        try:
            yield futures
        finally:
            for future in futures.values():
                future.cancel()


def _run(runs, code):
    future = runs.get(code)
    result = future.result() if future else _run_once(code, *_options(code))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


@pytest.mark.parametrize("code", _params())
def test_the_block_runs_as_copied(runs, code):
    _run(runs, code)


def _sharded_fits():
    """The runnable blocks that fit a model on shard_dataset's data."""
    for name, code, reason in _blocks():
        if not reason and _is_sharded_fit(code):
            yield pytest.param(code, id=name)


@pytest.mark.parametrize("code", _sharded_fits())
def test_fitting_on_sharded_data_warns_nothing(runs, code):
    result = _run(runs, code)
    assert "Warning" not in result.stderr, result.stderr[-3000:]


def test_the_readme_script_is_among_the_quiet_fits():
    names = [param.id for param in _sharded_fits()]
    assert any(name.startswith("README.md:") for name in names), names
