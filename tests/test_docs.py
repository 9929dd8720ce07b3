"""Every ```python block of README.md and docs/**/*.md runs here (Sybil's Markdown parsers).

The convention the pages follow:

* A Markdown file's ```python blocks run top to bottom in ONE namespace per file, in a
  fresh temporary directory as the working directory, with ``JOBS_STORE`` set to
  ``sqlite:<that directory>/store.sqlite`` (a fresh embedded store per file); the working
  directory and the environment are restored afterwards.  One test per file:
  ``test_doc[docs/guide/retries.md]``; a failure names the block's line.
* Set-up the reader need not see goes in hidden blocks:
  ``<!-- invisible-code-block: python`` ... ``-->``.
* A block is skipped only by Sybil's skip directive, with a condition on the names the
  harness puts in the namespace: ``FDB`` (True when ``FDB_CLUSTER_FILE`` names an existing
  file and ``jobs.open("fdb:")`` works) and ``SPARK`` (True when Java is on PATH), e.g.
  ``<!-- skip: next if(not FDB, reason="needs a FoundationDB cluster") -->``
  (``skip: start`` ... ``skip: end`` for several blocks).
* Shell commands go in ```sh or ```bash blocks: they are not run.  ```py, ```python3 and
  ```pycon fences are refused (they would escape the harness): write ```python.
* A block that runs a worker runs it in a background thread (``processor.run(signals=False)``
  on a ``threading.Thread``) or process, waits on a condition with a generous deadline
  (``processor.ready.wait(60)``, ``future.result(timeout=60)``), and stops it in the end
  (``processor.stop()``, then ``join``); never an assertion on how long something took.
* Top-level ``await`` does not run: wrap async code in ``anyio.run(main)``.

Pages that do not exist yet are simply not collected (the files are globbed at collection).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import unittest
from pathlib import Path

import pytest
from sybil import Document
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent.parent
PARSERS = (PythonCodeBlockParser(), SkipParser())
SKIPPER = PARSERS[1].skipper  # the evaluator of the skip directives' own regions
# fences that look like Python but would not be run
REFUSED_FENCE = re.compile(r"^\s*(```|~~~)\s*(py|python3|pycon|ipython|py3)\s*$", re.MULTILINE)


def doc_files() -> list[Path]:
    files = [ROOT / "README.md"] if (ROOT / "README.md").exists() else []
    files += sorted((ROOT / "docs").rglob("*.md"))
    return files


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@functools.cache
def fdb_available() -> bool:
    """A FoundationDB cluster the docs may use: ``FDB_CLUSTER_FILE`` names an existing file
    and ``jobs.open("fdb:")`` works."""
    cluster_file = os.environ.get("FDB_CLUSTER_FILE")
    if not cluster_file or not os.path.isfile(cluster_file):
        return False
    try:
        import jobs

        jobs.open("fdb:")
    except Exception:
        return False
    return True


def spark_available() -> bool:
    return shutil.which("java") is not None


@pytest.mark.parametrize("path", doc_files(), ids=_name)
def test_doc(path: Path, tmp_path: Path, monkeypatch) -> None:
    text = path.read_text(encoding="utf-8")
    refused = REFUSED_FENCE.search(text)
    if refused:
        line = text.count("\n", 0, refused.start()) + 1
        pytest.fail(f"{_name(path)}, line {line}: a ```{refused.group(2)} block is not run: write ```python")
    document = Document.parse(str(path), *PARSERS)
    examples = list(document.examples())
    if not examples:
        pytest.skip("no Python blocks")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JOBS_STORE", f"sqlite:{tmp_path / 'store.sqlite'}")
    import jobs

    opened = []  # the stores the page opens, closed after it (their threads end with them)

    def open_store(*args, **kwargs):
        opened.append(real_open(*args, **kwargs))
        return opened[-1]

    real_open = jobs.open
    monkeypatch.setattr(jobs, "open", open_store)
    document.namespace.update(FDB=fdb_available(), SPARK=spark_available(), __name__="__docs__")
    try:
        _run(path, examples)
    finally:
        for db in opened:
            jobs.engine.close(db)


def _run(path: Path, examples: list) -> None:
    ran, skipped = 0, []
    for example in examples:
        try:
            example.evaluate()
        except unittest.SkipTest as skip:
            skipped.append(f"line {example.line}: {skip}")
            continue
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise AssertionError(f"{_name(path)}, the block at line {example.line} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        ran += example.region.evaluator is not SKIPPER
    if skipped and not ran:
        pytest.skip("; ".join(skipped))


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_links() -> None:
    """README.md's relative links (into docs/, mostly) name files that exist: the site's
    strict build checks the links between docs pages, not the README's."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    broken = [target for target in LINK.findall(text)
              if not re.match(r"[a-z]+:|#", target) and not (ROOT / target.split("#")[0]).exists()]
    assert not broken, f"README.md links to files that do not exist: {broken}"
