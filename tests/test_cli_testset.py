"""``leakloss testset``: the shipped contrast test set on standard output or in a file written atomically; bad
arguments are one ``error:`` line and exit 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from leakloss.cli import app
from leakloss.testset import load_testset, parse_testset

runner = CliRunner()


def test_prints_the_whole_set_to_stdout():
    r = runner.invoke(app, ["testset"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("#id\ttext\tkey_words\tsites\n")
    assert parse_testset(r.stdout) == load_testset()


@pytest.mark.parametrize("kind", ["deletion", "quality"])
def test_kind_filters(kind):
    r = runner.invoke(app, ["testset", "--kind", kind])
    assert r.exit_code == 0, r.output
    items = parse_testset(r.stdout)
    assert items == load_testset(kind)
    assert {s.kind for i in items for k in i.key_words for s in k.sites} == {kind}


def test_out_writes_the_file_and_nothing_else(tmp_path):
    out = tmp_path / "s.tsv"
    r = runner.invoke(app, ["testset", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert parse_testset(out.read_text(encoding="utf-8")) == load_testset()
    assert [p.name for p in tmp_path.iterdir()] == ["s.tsv"]
    assert "written to" in r.stderr


def test_bad_kind_is_an_error():
    r = runner.invoke(app, ["testset", "--kind", "vowel"])
    assert r.exit_code == 2
    assert r.stderr.startswith("error:") and "deletion, quality" in r.stderr
    assert "Traceback" not in r.output and r.stdout == ""


@pytest.mark.parametrize("where, match", [("folder", "is a folder"), ("missing/s.tsv", "does not exist")])
def test_bad_out_is_an_error(tmp_path, where, match):
    (tmp_path / "folder").mkdir()
    r = runner.invoke(app, ["testset", "--out", str(tmp_path / where)])
    assert r.exit_code == 2 and r.stderr.startswith("error:") and match in r.stderr, r.output
    assert r.stdout == ""


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    import leakloss.atomic

    def full_disk(path, text):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(leakloss.atomic, "write_text_atomic", full_disk)
    out = tmp_path / "s.tsv"
    r = runner.invoke(app, ["testset", "--out", str(out)])
    assert r.exit_code == 2 and "No space left on device" in r.stderr, r.output
    assert not out.exists() and "Traceback" not in r.output
