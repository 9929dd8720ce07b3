"""Error messages say each thing once, in plain grammar: a store that cannot be opened is
named once (not by the job layer and again by the engine), and ``jobsctl worker`` given
something other than a Processor says what it got ("an int", "an EmbeddedDatabase") and
what to name instead."""

from __future__ import annotations

import sys
import uuid

import pytest

import jobs
from jobs.engine.urls import ENV_VAR
from jobsctl import cli


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, "recorded-so-that-it-is-restored")
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))


def _not_a_store(tmp_path):
    path = tmp_path / "not-a-store"
    path.write_text("hello, this is not SQLite" * 100)
    return path


def test_a_file_that_is_not_a_database_is_named_once(tmp_path):
    path = _not_a_store(tmp_path)
    with pytest.raises(jobs.StoreOpenError) as caught:
        jobs.open(f"sqlite:{path}")
    assert str(caught.value) == (f"cannot open store 'sqlite:{path}': file is not a database; check the path, "
                                 "or point the URL at a new file")


def test_jobsctl_names_a_bad_store_file_once(capsys, tmp_path):
    path = _not_a_store(tmp_path)
    assert cli.main(["--store", f"sqlite:{path}", "types"]) == 1
    err = capsys.readouterr().err
    assert err == (f"jobsctl: error: cannot open store 'sqlite:{path}': file is not a database; check the path, "
                   "or point the URL at a new file\n")


def _module(tmp_path, body: str) -> str:
    name = f"wording_test_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(body)
    return name


def test_worker_given_a_database_says_what_to_name(capsys, tmp_path):
    mod = _module(tmp_path, "import jobs\ndb = jobs.open()\nn = 3\n")
    assert cli.main(["worker", f"{mod}:db"]) == 1
    assert capsys.readouterr().err == (
        f"jobsctl: error: {mod}:db is not a processors.Processor but an EmbeddedDatabase (a store's database): "
        "name the Processor made on it (processor = processors.Processor(db)) as MODULE:ATTR\n")
    assert cli.main(["worker", f"{mod}:n"]) == 1
    assert capsys.readouterr().err == (
        f"jobsctl: error: {mod}:n is not a processors.Processor but an int: "
        "name a Processor (processor = processors.Processor(db)) as MODULE:ATTR\n")


def test_worker_of_a_missing_module_says_so_once(capsys):
    assert cli.main(["worker", "no_such_module_here:p"]) == 1
    assert capsys.readouterr().err == ("jobsctl: error: cannot import 'no_such_module_here': there is no such module "
                                       "in the working directory or on sys.path\n")
