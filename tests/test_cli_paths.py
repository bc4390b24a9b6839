"""Path arguments of every command (issue 43, defect 4): a symlink loop, as the query, a reference, an output, a
folder or a manifest entry, is one ``error:`` line and exit 2 (it was ``RuntimeError: Symlink loop`` from
``Path.resolve()``); the one check is :func:`leakloss.atomic.path_problem`."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from leakloss.atomic import path_problem
from leakloss.cli import app
from tests.tiny_models import TEXT, write_clip

runner = CliRunner()
LOOP_MESSAGE = "a symbolic link that loops"


def _loop(folder: Path, name: str = "loop") -> Path:
    """``folder/name -> name.2 -> name``."""
    (folder / f"{name}.2").symlink_to(folder / name)
    (folder / name).symlink_to(folder / f"{name}.2")
    return folder / name


def _no_models(monkeypatch) -> None:
    """Every refusal here comes before any model loads."""
    from leakloss.scorer import Scorer

    def refuse(*a, **k):
        raise AssertionError("the scorer was built although a path is bad")

    monkeypatch.setattr(Scorer, "__init__", refuse)


def _one_error_line(r) -> str:
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, (r.output, r.stderr)
    assert "Traceback" not in r.output + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr
    return errors[0]


# every path position of score, score-batch, compare, listeners, heads and demo; {loop} is a symlink loop
POSITIONS = {
    "score query": ["score", "{loop}", "--text", TEXT],
    "score query with --json": ["score", "{loop}", "--text", TEXT, "--json", "{tmp}/r.json"],
    "score --ref": ["score", "{q}", "--text", TEXT, "--ref", "{loop}"],
    "score --ref with --json": ["score", "{q}", "--text", TEXT, "--ref", "{loop}", "--json", "{tmp}/r.json"],
    "score --ref inside a loop": ["score", "{q}", "--text", TEXT, "--ref", "{loop}/r.wav"],
    "score --json": ["score", "{q}", "--text", TEXT, "--json", "{loop}"],
    "score --json inside a loop": ["score", "{q}", "--text", TEXT, "--json", "{loop}/r.json"],
    "score --html": ["score", "{q}", "--text", TEXT, "--html", "{loop}"],
    "score --heads": ["score", "{q}", "--text", TEXT, "--heads", "{loop}"],
    "score-batch manifest": ["score-batch", "{loop}", "--out", "{tmp}/res"],
    "score-batch --out": ["score-batch", "{manifest}", "--out", "{loop}"],
    "score-batch manifest query": ["score-batch", "{manifest_query}", "--out", "{tmp}/res"],
    "score-batch manifest ref": ["score-batch", "{manifest_ref}", "--out", "{tmp}/res"],
    # (a loop at a result file's own name is no error: an output name's link, looping or not, is replaced, never
    # followed: tests/test_batch.py's planted-symlink test)
    "compare results": ["compare", "{loop}"],
    "compare NAME=results": ["compare", "sys={loop}"],
    "compare --out": ["compare", "{tmp}/res", "--out", "{loop}"],
    "listeners labels": ["listeners", "{loop}", "{tmp}/res"],
    "listeners results": ["listeners", "{tmp}/labels.csv", "{loop}"],
    "listeners --out": ["listeners", "{tmp}/labels.csv", "{tmp}/res", "--out", "{loop}"],
    "heads --dir": ["heads", "--dir", "{loop}"],
    "demo --out": ["demo", "--out", "{loop}", "--sentences", "1"],
}


@pytest.mark.parametrize("position", list(POSITIONS))
def test_a_symlink_loop_in_any_path_position_is_one_error_line(tmp_path, monkeypatch, position):
    _no_models(monkeypatch)
    loop = _loop(tmp_path)
    q = write_clip(tmp_path / "q.wav")
    (tmp_path / "res").mkdir()
    (tmp_path / "labels.csv").write_text("word,reading,listener,label\n", encoding="utf-8")
    item = {"id": "x", "query": "q.wav", "text": TEXT, "refs": []}
    manifests = {"manifest": item, "manifest_query": item | {"query": "loop"}, "manifest_ref": item | {"refs": ["loop"]}}
    for name, row in manifests.items():
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    args = [a.format(loop=loop, q=q, tmp=tmp_path, **{k: tmp_path / f"{k}.jsonl" for k in manifests})
            for a in POSITIONS[position]]
    r = runner.invoke(app, args)
    _one_error_line(r)
    assert LOOP_MESSAGE in r.stderr, r.stderr  # a manifest's problems are listed on the lines after it


def test_path_problem_names_loops_and_passes_real_and_absent_paths(tmp_path):
    loop = _loop(tmp_path)
    assert LOOP_MESSAGE in path_problem(loop) and LOOP_MESSAGE in path_problem(loop / "inside.wav")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for fine in (tmp_path, tmp_path / "absent.wav", tmp_path / "dangling", tmp_path / "नेपाली.wav"):
        assert path_problem(fine) is None, fine
    assert "longer than" in path_problem(tmp_path / ("x" * 300))
    assert "NUL" in path_problem(f"{tmp_path}/a\x00b")
    assert "not valid UTF-8" in path_problem(tmp_path / os.fsdecode(b"q\xff.wav"))
    assert path_problem(tmp_path / os.fsdecode(b"q\xff.wav"), utf8=False) is None
    # a lone surrogate (a JSON manifest's "\ud800.wav") raised UnicodeEncodeError in os.fsencode: rerank's traceback
    assert "lone surrogate" in path_problem(tmp_path / "\ud800.wav", utf8=False)
    assert "not valid UTF-8" in path_problem(tmp_path / "\ud800.wav")


def test_load_audio_refuses_a_lone_surrogate_name_as_audio_error(tmp_path):
    from leakloss.audio import AudioError, load_audio

    with pytest.raises(AudioError, match="lone surrogate"):
        load_audio(tmp_path / "\ud800.wav")


# --- property: random names at score's path arguments ------------------------------------------------------------

KINDS = ("loop", "loop inside", "dangling", "folder", "under a file", "plain", "long", "non-UTF-8")
#: names of any script (no "/", which would make folders, and no NUL, which is its own kind below)
NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=40)
NAMES = NAMES.filter(lambda n: n not in (".", ".."))


def _make(root: Path, kind: str, name: str, raw: bytes) -> str:
    """A path of ``kind`` under ``root``: none of them is a readable audio file or a writable output's folder."""
    p = root / f"{name}.x"
    if kind == "loop":
        return str(_loop(root, name))
    if kind == "loop inside":
        return str(_loop(root, name) / "a.wav")
    if kind == "dangling":
        p.symlink_to(root / "nowhere" / name)
        return str(p)
    if kind == "folder":
        p.mkdir()
        return str(p)
    if kind == "under a file":
        p.write_text("x")
        return str(p / "a.wav")
    if kind == "long":
        return str(root / (name * 300)[:300])
    if kind == "non-UTF-8":
        return str(root / os.fsdecode(raw + b"\xff"))
    return str(p)  # plain: a name that does not exist


@pytest.mark.parametrize("position", ["query", "--ref", "--json", "--html"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS + ("NUL",)), name=NAMES, raw=st.binary(max_size=8))
def test_any_bad_path_at_score_is_one_error_line_and_exit_2(monkeypatch, position, kind, name, raw):
    _no_models(monkeypatch)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bad").mkdir()  # apart from q.wav, which a random name could otherwise be
        bad = f"{root}/a\x00b" if kind == "NUL" else _make(root / "bad", kind, name, raw)
        q = str(write_clip(root / "q.wav"))
        if position == "query":
            args = [bad, "--text", TEXT]
        elif position == "--ref":
            args = [q, "--text", TEXT, "--ref", bad]
        else:  # an output: a name that is fine there (a dangling link is written through) fails on the absent query
            args = [str(root / "absent.wav"), "--text", TEXT, position, bad]
        _one_error_line(runner.invoke(app, ["score", *args]))


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(KINDS), name=NAMES, raw=st.binary(max_size=8))
def test_path_problem_never_raises_and_names_every_loop(kind, name, raw):
    with tempfile.TemporaryDirectory() as tmp:
        path = _make(Path(tmp), kind, name, raw)
        problem = path_problem(path)
        assert problem is None or isinstance(problem, str)
        if kind.startswith("loop") and len(os.fsencode(name)) + 3 <= 255:
            assert LOOP_MESSAGE in problem
        if problem is None:
            Path(path).resolve()  # what raised RuntimeError: Symlink loop past the checks


@pytest.mark.skipif(not Path("/proc/self").is_dir() or os.geteuid() != 0,
                    reason="needs Linux /proc and root (whom os.access lets write anywhere)")
@pytest.mark.parametrize("option", ["--json", "--html"])
def test_an_output_in_a_folder_nothing_can_be_created_in_is_refused_before_any_model_loads(tmp_path, monkeypatch,
                                                                                          option):
    # os.access says yes to root in /proc: the models loaded and the reading was scored before the write failed
    _no_models(monkeypatch)
    write_clip(tmp_path / "q.wav")
    r = runner.invoke(app, ["score", str(tmp_path / "q.wav"), "--text", TEXT, option, "/proc/x.html"])
    assert "nothing can be created in folder /proc" in _one_error_line(r)
