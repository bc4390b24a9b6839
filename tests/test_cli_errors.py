"""Bad input on the command line (issue 14, defects 6-11): a clear ``error:`` and exit 2 before any work,
or an explicit result; never a traceback. Runs on tiny recognizers and heads written to a temporary folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
import shutil

import numpy as np
import pytest
import soundfile as sf
import torch
from typer.testing import CliRunner

from leakloss.cli import app
from tests.tiny_models import (
    TEXT,
    save_tiny_models,
    speechlike,
    truncate_wav,
    write_clip,
)

runner = CliRunner()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return save_tiny_models(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    root = tmp_path_factory.mktemp("clips")
    return {"q": write_clip(root / "q.wav"), "r": write_clip(root / "r.wav", seed=1)}


def model_args(models) -> list[str]:
    return ["--recognizer-a", str(models["a"]), "--recognizer-b", str(models["b"]), "--heads", str(models["heads"])]


def assert_clean_error(r, *needles: str, code: int = 2) -> None:
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    assert "error:" in r.stderr, r.output
    for n in needles:
        assert n in r.stderr, r.stderr


@pytest.fixture
def no_scoring(monkeypatch):
    """Fail loudly if models get loaded: the error must come before any work."""
    from leakloss.scorer import Scorer

    def refuse(*a, **k):
        raise AssertionError("the scorer was built although the input is bad")

    monkeypatch.setattr(Scorer, "__init__", refuse)


# --- score-batch: defect 6 --------------------------------------------------------------------------

def _batch(tmp_path, models, lines: list[str], *extra: str, out=None):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = out or tmp_path / "out"
    return runner.invoke(app, ["score-batch", str(manifest), "--out", str(out), *model_args(models), *extra])


GOOD = json.dumps({"id": "x", "query": "q.wav", "text": TEXT, "refs": []}, ensure_ascii=False)


@pytest.mark.parametrize("line, needle", [
    ("[1, 2, 3]", "line 2"),
    ('{"id": "y", "query": "q.wav", "text": "आज", "refs": [1]}', "line 2"),
    ('{"id": "' + "y" * 300 + '", "query": "q.wav", "text": "आज", "refs": []}', "too long"),
    ('{"id": "a\\u0000b", "query": "q.wav", "text": "आज", "refs": []}', "line 2"),
    ('{"id": "a/b", "query": "q.wav", "text": "आज", "refs": []}', "plain file name"),
    ('{"id": "..", "query": "q.wav", "text": "आज", "refs": []}', "plain file name"),
    ('{"id": "x\\u202enosj.exe", "query": "q.wav", "text": "आज", "refs": []}', "invisible format character"),
    ('{"id": "zw\\u200bsp", "query": "q.wav", "text": "आज", "refs": []}', "invisible format character"),
    # a ref name past the file system's limit stopped every item of the run
    ('{"id": "y", "query": "q.wav", "text": "आज", "refs": ["' + "r" * 300 + '.wav"]}', "refs[0] "),
])
def test_score_batch_bad_manifest_line(tmp_path, models, no_scoring, line, needle):
    r = _batch(tmp_path, models, [GOOD, line])
    assert_clean_error(r, needle)
    assert not (tmp_path / "out").exists()


def test_score_batch_out_is_a_file(tmp_path, models, no_scoring):
    (tmp_path / "out").write_text("a file")
    assert_clean_error(_batch(tmp_path, models, [GOOD]), "not a folder")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_score_batch_gpu_without_gpu(tmp_path, models, no_scoring):
    assert_clean_error(_batch(tmp_path, models, [GOOD], "--accelerator", "gpu"), "accelerator 'gpu'")
    assert not (tmp_path / "out").exists()


def test_score_batch_devices_abc(tmp_path, models, no_scoring):
    assert_clean_error(_batch(tmp_path, models, [GOOD], "--devices", "abc"), "--devices")
    assert not (tmp_path / "out").exists()


def test_score_batch_broken_recognizer(tmp_path, models):
    broken = tmp_path / "broken"
    shutil.copytree(models["a"], broken)
    (broken / "model.safetensors").write_bytes(b"garbage")
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(GOOD + "\n", encoding="utf-8")
    r = runner.invoke(app, ["score-batch", str(manifest), "--out", str(tmp_path / "out"), "--recognizer-a",
                            str(broken), "--recognizer-b", str(models["b"]), "--heads", str(models["heads"])])
    assert_clean_error(r, "safetensors")


# --- score-batch: defect 7 --------------------------------------------------------------------------

def test_score_batch_missing_file_is_failed_exit_1_and_retried(tmp_path, models):
    write_clip(tmp_path / "q.wav")
    lines = [GOOD, json.dumps({"id": "late", "query": "late.wav", "text": TEXT, "refs": []}, ensure_ascii=False)]
    r = _batch(tmp_path, models, lines)
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert json.loads(r.stdout)["failed"] == 1 and json.loads(r.stdout)["quarantined"] == 1
    assert "late" in r.stderr and "does not exist" in r.stderr
    write_clip(tmp_path / "late.wav", seed=5)
    again = _batch(tmp_path, models, lines)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["skipped_existing"] == 1 and json.loads(again.stdout)["failed"] == 0
    assert json.loads((tmp_path / "out" / "late.json").read_text(encoding="utf-8"))["status"] != "failed"


def test_score_batch_missing_reference_is_failed_and_retried(tmp_path, models):
    """It was 'unscored: every reference rejected' with exit 0, counted as done: the reference was never used."""
    write_clip(tmp_path / "q.wav")
    lines = [json.dumps({"id": "late", "query": "q.wav", "text": TEXT, "refs": ["later.wav"]}, ensure_ascii=False)]
    r = _batch(tmp_path, models, lines)
    assert r.exit_code == 1 and json.loads(r.stdout)["failed"] == 1, r.output
    assert "later.wav does not exist" in r.stderr
    write_clip(tmp_path / "later.wav", seed=5)
    again = _batch(tmp_path, models, lines)
    assert json.loads(again.stdout)["skipped_existing"] == 0 and json.loads(again.stdout)["failed"] == 0, again.output
    assert json.loads((tmp_path / "out" / "late.json").read_text(encoding="utf-8"))["status"] != "failed"  # redone


def test_score_batch_names_every_missing_reference(tmp_path, models):
    """Only the first missing one was named; the result listed no reference at all."""
    from leakloss.schema import validate_result

    write_clip(tmp_path / "q.wav")
    write_clip(tmp_path / "here.wav", seed=5)
    lines = [json.dumps({"id": "two", "query": "q.wav", "text": TEXT, "refs": ["gone1.wav", "here.wav", "gone2.wav"]},
                        ensure_ascii=False)]
    r = _batch(tmp_path, models, lines)
    assert r.exit_code == 1 and json.loads(r.stdout)["failed"] == 1, r.output
    result = json.loads((tmp_path / "out" / "two.json").read_text(encoding="utf-8"))
    validate_result(result)
    assert result["reason"].startswith("2 references do not exist or are not files: ")
    assert "gone1.wav" in result["reason"] and "gone2.wav" in result["reason"] and "here.wav" not in result["reason"]
    checks = result["reference_checks"]
    assert [Path(c["reference"]).name for c in checks] == ["gone1.wav", "here.wav", "gone2.wav"]
    assert [c["reason"] for c in checks] == ["does not exist or is not a file",
                                             "not checked: the reading could not be scored",
                                             "does not exist or is not a file"]
    assert not any(c["used"] for c in checks)


def test_a_command_interrupted_anywhere_says_so_and_exits_130(tmp_path, monkeypatch):
    # typer turned a Ctrl-C outside the commands' own handlers (evaluate loading its models) into a silent exit 130
    import leakloss.evaluate

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(leakloss.evaluate, "evaluate", interrupted)
    (tmp_path / "sys").mkdir()
    r = runner.invoke(app, ["evaluate", f"s1={tmp_path / 'sys'}", "--out", str(tmp_path / "out")])
    assert r.exit_code == 130 and "Traceback" not in r.output, r.output
    assert "interrupted before it finished: rerun the command to finish" in r.stderr


def _evaluate_reporting(tmp_path, monkeypatch, **summary):
    """``leakloss evaluate`` run on a stub of the library's evaluate that returns ``summary`` (its report written)."""
    import leakloss.evaluate

    (tmp_path / "report" / "comparison").mkdir(parents=True)
    (tmp_path / "report" / "comparison" / "comparison.md").write_text("| system |\n", encoding="utf-8")
    full = {"index": str(tmp_path / "report" / "index.html"), "problems": [], "without_audio": [], **summary}
    monkeypatch.setattr(leakloss.evaluate, "evaluate", lambda *args, **kwargs: full)
    (tmp_path / "sys").mkdir()
    return runner.invoke(app, ["evaluate", f"s1={tmp_path / 'sys'}", "--out", str(tmp_path / "out")])


def test_evaluate_tells_each_failed_reading_and_exits_1(tmp_path, monkeypatch):
    # readings whose scoring failed were only a row of comparison.md, and evaluate exited 0 (score-batch: 1)
    index = tmp_path / "report" / "index.html"
    r = _evaluate_reporting(tmp_path, monkeypatch, scoring={
        "s1": {"failures": [{"id": "r7", "reason": "the recognizer ran out of memory"}]}, "s2": {"failures": []}})
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert "failed s1: r7: the recognizer ran out of memory" in r.stderr
    assert "1 reading(s) failed; rerun the same command to retry them" in r.stderr
    assert f"report: {index}" in r.stdout  # the report was written: it says where


def test_score_batch_interrupted_says_what_it_finished_and_exits_130(tmp_path, models, monkeypatch):
    """Ctrl-C ended it with Lightning's bare exit status 1: no summary, no word that a rerun continues, and
    SIGINT left ignored in the calling process."""
    import signal

    from leakloss.scorer import Scorer

    write_clip(tmp_path / "q.wav")
    lines = [json.dumps({"id": f"x{i}", "query": "q.wav", "text": TEXT, "refs": []}, ensure_ascii=False)
             for i in range(3)]
    real, calls = Scorer.score, []

    def score(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Scorer, "score", score)
    before = signal.getsignal(signal.SIGINT)
    r = _batch(tmp_path, models, lines)
    assert r.exit_code == 130 and "Traceback" not in r.output, r.output
    assert json.loads(r.stdout)["not_scored"] == 2 and json.loads(r.stdout)["processed"] == 3, r.output
    assert "interrupted: 2 of 3 item(s) not scored yet" in r.stderr and "rerun the same command" in r.stderr
    assert (tmp_path / "out" / "x0.json").is_file() and not (tmp_path / "out" / "x1.json").exists()
    assert signal.getsignal(signal.SIGINT) == before
    monkeypatch.setattr(Scorer, "score", real)
    again = _batch(tmp_path, models, lines)
    assert again.exit_code == 0 and json.loads(again.stdout)["skipped_existing"] == 1 and json.loads(again.stdout)["processed"] == 2, again.output


def test_score_batch_truncated_result_is_redone(tmp_path, models):
    write_clip(tmp_path / "q.wav")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x.json").write_text('{"query": "q.wav", "sta', encoding="utf-8")
    r = _batch(tmp_path, models, [GOOD])
    assert r.exit_code == 0 and json.loads(r.stdout)["skipped_existing"] == 0, r.output
    assert json.loads((tmp_path / "out" / "x.json").read_text(encoding="utf-8"))["id"] == "x"


# --- recognizer folders: defect 8 ---------------------------------------------------------------------

@pytest.fixture
def pickle_dir(tmp_path, models):
    d = tmp_path / "pickled"
    d.mkdir()
    shutil.copy(models["a"] / "config.json", d)
    shutil.copy(models["a"] / "vocab.json", d)
    from safetensors.torch import load_file

    torch.save(load_file(models["a"] / "model.safetensors"), d / "pytorch_model.bin")
    return d


def test_recognize_refuses_a_pickle_folder(pickle_dir, clips, monkeypatch):
    def no_unpickling(*a, **k):
        raise AssertionError("torch.load was called on a pickle")

    monkeypatch.setattr(torch, "load", no_unpickling)
    r = runner.invoke(app, ["recognize", str(clips["q"]), "--recognizer", str(pickle_dir)])
    assert_clean_error(r, "pickle")


@pytest.mark.parametrize("damage, needle", [
    ("truncate_weights", "safetensors"), ("garbage_weights", "safetensors"), ("no_vocab", "vocab.json"),
    ("bad_vocab", "vocab.json"), ("no_config", "config.json"),
])
def test_recognize_broken_recognizer_folder(tmp_path, models, clips, damage, needle):
    d = tmp_path / "rec"
    shutil.copytree(models["a"], d)
    weights = d / "model.safetensors"
    if damage == "truncate_weights":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "garbage_weights":
        weights.write_bytes(b"\x00" * 7)
    elif damage == "no_vocab":
        (d / "vocab.json").unlink()
    elif damage == "bad_vocab":
        (d / "vocab.json").write_text("{not json", encoding="utf-8")
    else:
        (d / "config.json").unlink()
    r = runner.invoke(app, ["recognize", str(clips["q"]), "--recognizer", str(d)])
    assert_clean_error(r, needle)


def test_no_loading_weights_progress_bar(models, clips):
    r = runner.invoke(app, ["recognize", str(clips["q"]), "--recognizer", str(models["a"])])
    assert r.exit_code == 0, r.output
    assert "Loading weights" not in r.output


def test_score_with_a_broken_recognizer_is_an_error(tmp_path, models, clips):
    d = tmp_path / "rec"
    shutil.copytree(models["b"], d)
    (d / "vocab.json").unlink()
    r = runner.invoke(app, ["score", str(clips["q"]), "--text", TEXT, "--recognizer-a", str(models["a"]),
                            "--recognizer-b", str(d), "--heads", str(models["heads"])])
    assert_clean_error(r, "vocab.json")


# --- output paths checked before the work: defect 9 --------------------------------------------------------

@pytest.mark.parametrize("opts, needle", [
    (["--json", "{tmp}/missing/r.json"], "does not exist"),
    (["--html", "{tmp}/missing/r.html"], "does not exist"),
    (["--json", "{tmp}/ok.json", "--html", "{tmp}/missing/r.html"], "does not exist"),
    (["--json", "{tmp}/ok.json", "--html", "{tmp}/r.txt"], ".html"),
    (["--json", "{tmp}/ok.json", "--html", "{tmp}"], "is a folder"),
    (["--json", "{tmp}", "--html", "{tmp}/ok.html"], "is a folder"),
    (["--json", "{tmp}/file/r.json"], "not a folder"),
    (["--json", "{tmp}/same.html", "--html", "{tmp}/same.html"], "same file"),
    (["--json", "{tmp}/pipe"], "is not a regular file"),  # was replaced by a regular file (so was /dev/null)
    (["--json", "{tmp}/ok.json", "--html", "{tmp}/pipe.html"], "is not a regular file"),
])
def test_score_output_paths_are_checked_before_scoring(tmp_path, models, clips, no_scoring, opts, needle):
    import os

    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "pipe")
    os.mkfifo(tmp_path / "pipe.html")
    opts = [o.replace("{tmp}", str(tmp_path)) for o in opts]
    r = runner.invoke(app, ["score", str(clips["q"]), "--text", TEXT, *opts, *model_args(models)])
    assert_clean_error(r, needle)
    assert not (tmp_path / "ok.json").exists() and not (tmp_path / "ok.html").exists()


def test_score_unwritable_output_folder(tmp_path, models, clips, no_scoring):
    import os

    if os.geteuid() == 0:
        pytest.skip("root can write anywhere")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        r = runner.invoke(app, ["score", str(clips["q"]), "--text", TEXT, "--json", str(ro / "r.json"),
                                *model_args(models)])
    finally:
        ro.chmod(0o700)
    assert_clean_error(r, "not writable")


def test_score_truncated_query_is_an_error(tmp_path, models, no_scoring):
    q = truncate_wav(write_clip(tmp_path / "q.wav"))
    r = runner.invoke(app, ["score", str(q), "--text", TEXT, *model_args(models)])
    assert_clean_error(r, "truncated")


# --- what the scorer found is said: defect 10 and the all-references-rejected case -------------------------

@pytest.fixture
def passing_query_failing_refs(monkeypatch):
    """The tiny models cannot read: the query passes the word check and every reference fails it."""
    from leakloss.scorer import QUERY_MAX_PER, Scorer

    monkeypatch.setattr(Scorer, "check_words", lambda self, wave, text, expected, max_per:
                        (max_per == QUERY_MAX_PER, "phone error rate 0.90 (limit 0.30)"))


def test_score_says_every_reference_was_rejected(models, clips, passing_query_failing_refs):
    r = runner.invoke(app, ["score", str(clips["q"]), "--text", TEXT, "--ref", str(clips["r"]), *model_args(models)])
    assert r.exit_code == 0, r.output
    first = r.stdout.splitlines()[0]
    assert first.startswith("unscored") and "every reference rejected" in first
    assert "scored" not in r.stdout.replace("unscored", "")


def test_score_reports_clipping_resampling_and_downmixing(tmp_path, models, clips, passing_query_failing_refs):
    x = np.clip(speechlike(1.0, rate=22_050) * 14.0, -1.0, 1.0)  # about 42% of the samples clipped
    stereo = np.stack([x, x], axis=1)
    sf.write(tmp_path / "loud.wav", stereo, 22_050, subtype="FLOAT")
    clipped = float((np.abs(stereo) >= 0.999).mean())
    assert 0.35 < clipped < 0.5
    r = runner.invoke(app, ["score", str(tmp_path / "loud.wav"), "--text", TEXT, "--json", str(tmp_path / "r.json"),
                            "--html", str(tmp_path / "r.html"), *model_args(models)])
    assert r.exit_code == 0, r.output
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    audio = result["audio"]
    assert audio["original_rate"] == 22_050 and audio["channels"] == 2
    assert audio["resampled"] and audio["downmixed"]
    assert audio["clipped_fraction"] == pytest.approx(clipped, abs=1e-4)
    assert audio["duration_s"] == pytest.approx(1.0, abs=1e-3)
    pct = f"{100 * clipped:.1f}%"
    assert any("clipped" in w and pct in w for w in audio["warnings"])
    assert any("resampled" in w for w in audio["warnings"]) and any("downmixed" in w for w in audio["warnings"])
    assert any(pct in w for w in result["warnings"])
    assert "clipped" in r.stdout and pct in r.stdout  # said on the terminal too
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "clipped" in page and pct in page


def test_score_json_stdout_sends_warnings_to_stderr(tmp_path, models, passing_query_failing_refs):
    x = np.clip(speechlike(1.0) * 4.0, -1.0, 1.0)
    sf.write(tmp_path / "loud.wav", x, 16_000, subtype="FLOAT")
    r = runner.invoke(app, ["score", str(tmp_path / "loud.wav"), "--text", TEXT, "--json", "-", *model_args(models)])
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert result["audio"]["warnings"] and "clipped" in r.stderr


# --- the outside check of 2026-12-02 ---------------------------------------------------------------------

@pytest.mark.parametrize("target", ["q", "r"])
def test_score_never_writes_over_an_input(models, clips, no_scoring, target):
    before = clips[target].read_bytes()
    r = runner.invoke(app, ["score", str(clips["q"]), "--text", TEXT, "--ref", str(clips["r"]),
                            "--json", str(clips[target]), *model_args(models)])
    assert_clean_error(r, "input")
    assert clips[target].read_bytes() == before


@pytest.mark.parametrize("command", [["compare", "{tmp}/res"], ["listeners", "{tmp}/labels.csv", "{tmp}/res"], ["demo"]])
def test_out_folders_are_checked_before_any_work(tmp_path, command, monkeypatch):
    import leakloss.demo

    monkeypatch.setattr(leakloss.demo, "run_demo", lambda cfg: pytest.fail("the demo ran with a bad --out"))
    (tmp_path / "file").write_text("x")
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    assert_clean_error(runner.invoke(app, [*args, "--out", str(tmp_path / "file")]), "is a file")
    assert_clean_error(runner.invoke(app, [*args, "--out", str(tmp_path / "file" / "sub")]), "not a folder")


def test_compare_refuses_two_systems_of_one_name(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    r = runner.invoke(app, ["compare", f"X={tmp_path / 'a'}", f"X={tmp_path / 'b'}", "--out", str(tmp_path / "out")])
    assert_clean_error(r, "two systems are named 'X'")
    assert_clean_error(runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "a")]), "two systems are named 'a'")


def test_compare_and_listeners_refuse_results_and_labels_whose_names_are_not_utf8(tmp_path):
    """The comparison and the listener report name their inputs: a results folder named by Latin-1 bytes was a
    UnicodeEncodeError (or matplotlib's TypeError) traceback after the work, and listeners left an empty --out."""
    import os

    from tests.eval.test_compare import reading, write_dir

    bad = os.fsdecode(str(tmp_path).encode() + b"/res\xff")
    write_dir(Path(bad), [reading("flagged", "s1")])
    (tmp_path / "labels.csv").write_text("word,reading,listener,label\n", encoding="utf-8")
    out = tmp_path / "out"
    for args in (["compare", bad], ["compare", f"sys={bad}"], ["listeners", str(tmp_path / "labels.csv"), bad]):
        assert_clean_error(runner.invoke(app, [*args, "--out", str(out)]), "not valid UTF-8")
        assert not out.exists()
    named = os.fsdecode(b"s\xff")  # a good folder under a name that is not UTF-8
    assert_clean_error(runner.invoke(app, ["compare", f"{named}={tmp_path}", "--out", str(out)]), "not valid UTF-8")
    assert not out.exists()


def test_compare_of_the_current_folder_names_the_system_by_it(tmp_path, monkeypatch):
    """`leakloss compare .` said ".: give NAME=DIR with both parts, or a folder" of a folder."""
    from tests.eval.test_compare import reading, write_dir

    res = write_dir(tmp_path / "swar", [reading("flagged", "s1"), reading("no_change", "s2")])
    (res / "sub").mkdir()
    for where, arg in ((res, "."), (res / "sub", "..")):  # ".." was named ".."
        monkeypatch.chdir(where)
        r = runner.invoke(app, ["compare", arg, "--out", str(tmp_path / "out")])
        assert r.exit_code == 0, r.output
        assert list(json.loads((tmp_path / "out" / "comparison.json").read_text(encoding="utf-8"))["systems"]) == ["swar"]


def test_rerank_checks_each_text_as_score_does(tmp_path):
    manifest = tmp_path / "m.jsonl"
    lines = [{"text": "घर", "candidates": ["a.wav"]}, {"text": "घर " + "क" * 500, "candidates": ["a.wav"]}]
    manifest.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines), encoding="utf-8")
    assert_clean_error(runner.invoke(app, ["rerank", str(manifest)]), "m.jsonl:2", "limit")
    manifest.write_text(json.dumps({"text": "hello world", "candidates": ["a.wav"]}), encoding="utf-8")
    assert_clean_error(runner.invoke(app, ["rerank", str(manifest)]), "no Devanagari word")


def test_sites_takes_the_text_or_a_file_not_both(tmp_path):
    words = tmp_path / "w.txt"
    words.write_text("घर", encoding="utf-8")
    assert_clean_error(runner.invoke(app, ["sites", "नेपाल", "--file", str(words)]), "not both")
    assert runner.invoke(app, ["sites", "--file", str(words)]).exit_code == 0


def test_g2p_says_which_user_lexicon_entries_it_left_out(tmp_path):
    lex = tmp_path / "lex.tsv"
    lex.write_text("नेपाल\tn e p aː l\nकखग\t\n", encoding="utf-8")
    r = runner.invoke(app, ["g2p", "--lexicon", str(lex), "--json", "नेपाल"])
    assert r.exit_code == 0 and "1 entry with no phones" in r.stderr and "line 2" in r.stderr
    assert json.loads(r.stdout.splitlines()[0])["source"] == "lexicon"
    # a spelling given twice with other phones: the first wins, said (the second vanished without a word)
    lex.write_text("नेकपा\tn e k ax p aa\nघर\tgh ax r\nनेकपा\tn e k p aa\nघर\tgh ax r\n", encoding="utf-8")
    r = runner.invoke(app, ["g2p", "--lexicon", str(lex), "--json", "नेकपा"])
    assert r.exit_code == 0 and json.loads(r.stdout)["phones"] == ["n", "e", "k", "ʌ", "p", "aː"]
    assert "1 entry left out" in r.stderr and "line 3 'नेकपा' (first on line 1)" in r.stderr, r.stderr  # not line 4
    lex.write_text("कखग\t\n", encoding="utf-8")
    assert_clean_error(runner.invoke(app, ["g2p", "--lexicon", str(lex), "घर"]), "no entry with phones")
    lex.write_text("", encoding="utf-8")
    assert_clean_error(runner.invoke(app, ["g2p", "--lexicon", str(lex), "घर"]), "no entry with phones")


def test_g2p_table_says_on_stderr_that_a_word_was_not_pronounced():
    r = runner.invoke(app, ["g2p", "घर", "hello"])
    assert_clean_error(r, "could not be pronounced")


@pytest.mark.parametrize("opts, needle", [(["--sentences", "0"], "--sentences"), (["--f5-steps", "-1"], "--f5-steps")])
def test_demo_counts_must_be_positive(opts, needle, monkeypatch):
    import leakloss.demo

    monkeypatch.setattr(leakloss.demo, "run_demo", lambda cfg: pytest.fail("the demo ran with a bad count"))
    assert_clean_error(runner.invoke(app, ["demo", *opts]), needle, ">= 1")
    with pytest.raises(ValueError):
        leakloss.demo.DemoConfig(sentences=0)


def test_score_mistyped_ref_path(models, clips):
    r = runner.invoke(app, ["score", str(clips["q"]), "--text", TEXT, "--ref", str(clips["r"]),
                            "--ref", str(clips["r"]) + ".typo", *model_args(models)])
    assert r.exit_code == 2 and "error: --ref" in r.output and "no such file" in r.output


def test_score_refuses_a_folder_as_a_reference(models, clips, tmp_path):
    # it was scored on (a "reference not checked" line) while score-batch fails the same item
    r = runner.invoke(app, ["score", str(clips["q"]), "--text", TEXT, "--ref", str(tmp_path), *model_args(models)])
    assert r.exit_code == 2 and f"error: --ref {tmp_path}: is a folder; give each reference's audio file" in r.output


@pytest.mark.parametrize("command", ["train-heads", "finetune-f5"])
@pytest.mark.parametrize("override", ["bogus=1", "experiment=nope", "trainer.max_epochs=abc"])
def test_training_commands_refuse_bad_overrides_before_starting(command, override, monkeypatch):
    import leakloss.cli as cli

    started = []
    monkeypatch.setattr(cli, "run_module", lambda *a, **k: started.append(a) or 0)
    r = runner.invoke(app, [command, override])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "Traceback" not in r.output, r.output
    assert not started
    runner.invoke(app, [command, "steps=3" if command == "finetune-f5" else "experiment=smoke"])
    assert len(started) == 1  # a good override goes through to the run


def test_small_cli_input_checks(tmp_path):
    r = runner.invoke(app, ["sites", "नेकपा", "--min-confidence", "bogus"])
    assert r.exit_code == 2 and "--min-confidence must be one of low, medium, high" in r.output
    for extra in ([], ["--json"]):  # a byte that is not UTF-8 in argv: written raw into the JSON, or a traceback
        r = runner.invoke(app, ["sites", "क\udcff", *extra])
        assert r.exit_code == 2 and "error: the text is not valid Unicode" in r.output, r.output
    r = runner.invoke(app, ["compare", "x="])
    assert r.exit_code == 2 and "NAME=DIR with both parts" in r.output
    bom = tmp_path / "text.txt"
    bom.write_bytes("\ufeffनेकपा".encode("utf-8"))  # a byte-order mark is not part of the text
    r = runner.invoke(app, ["sites", "--file", str(bom), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["words"][0]["word"] == "नेकपा"


def test_g2p_refuses_a_user_lexicon_entry_that_does_not_fit_its_spelling(tmp_path):
    lex = tmp_path / "lex.tsv"
    lex.write_text("नेपाल\tn e . p aː l\nपाती\tp aː t i h aː l n e\n", encoding="utf-8")
    r = runner.invoke(app, ["g2p", "--lexicon", str(lex), "नेपाल"])
    assert_clean_error(r, f"{lex}:2:", "'पाती'", "vowel")
    assert len([line for line in r.stderr.splitlines() if line.startswith("error:")]) == 1, r.stderr
    assert r.stdout == ""
    # '.' syllable marks are accepted; the fitting entry decides the pronunciation
    lex.write_text("नेपाल\tn e . p aː l\n", encoding="utf-8")
    r = runner.invoke(app, ["g2p", "--lexicon", str(lex), "--json", "नेपाल"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout.splitlines()[0])
    assert (row["phones"], row["source"]) == (["n", "e", "p", "aː", "l"], "lexicon")


@pytest.mark.parametrize("command", ["train-heads", "finetune-f5"])
def test_a_hydra_run_dir_under_a_file_is_one_error_line(tmp_path, command):
    (tmp_path / "file").write_text("x")
    r = runner.invoke(app, [command, f"hydra.run.dir={tmp_path / 'file' / 'run'}"])  # was Hydra's traceback
    assert_clean_error(r, "hydra.run.dir")
    assert "is not a folder" in r.output


def test_a_file_error_in_score_batch_names_the_file(tmp_path, monkeypatch):
    import errno

    import leakloss.batch

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "item7.json"))

    monkeypatch.setattr(leakloss.batch, "score_batch", full_disk)
    (tmp_path / "m.jsonl").write_text("{}\n")
    r = runner.invoke(app, ["score-batch", str(tmp_path / "m.jsonl"), "--out", str(tmp_path / "out")])
    assert_clean_error(r, "No space left on device", "item7.json")  # the file was not named


def test_os_error_text_names_the_file_once():
    from leakloss.cli import os_error_text

    assert os_error_text(OSError(13, "Permission denied", "/a/b.json")) == "Permission denied (/a/b.json)"
    assert os_error_text(OSError("cannot write '/a/b': folder '/a' does not exist")) == \
        "cannot write '/a/b': folder '/a' does not exist"


def test_small_messages_say_what_is_wrong(tmp_path):
    """From an outside check: each message named the wrong cause or none."""
    import os

    import numpy as np
    import soundfile as sf

    assert_clean_error(runner.invoke(app, ["sites", "\u200d"]), "no visible characters")  # "skipped: )"
    (tmp_path / "run=1").mkdir()
    assert_clean_error(runner.invoke(app, ["compare", str(tmp_path / "run=1")]), "write it as NAME=")
    r = runner.invoke(app, ["g2p", "कै", "ै", "--json"])
    assert r.exit_code == 2 and "see the table" not in r.stderr and '"error"' in r.stdout
    os.mkfifo(tmp_path / "pipe.wav")
    assert_clean_error(runner.invoke(app, ["recognize", str(tmp_path / "pipe.wav")]), "not a regular file")
    sf.write(tmp_path / "six.wav", np.zeros((5, 6)), 16000)
    r = runner.invoke(app, ["recognize", str(tmp_path / "six.wav")])
    assert_clean_error(r, "far too short to be speech")
    assert "wave.T" not in r.stderr  # API advice given to a file user


def test_a_library_warning_is_one_warning_line(capsys):
    """Python printed "…/scorer.py:205: UserWarning: …" to a CLI user."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert runner.invoke(app, ["sites", "नेकपा"]).exit_code == 0  # the callback runs before every command
        capsys.readouterr()
        warnings.warn("heads trained on [/x] weights", UserWarning)
    err = capsys.readouterr().err
    assert err.strip() == "warning: heads trained on [/x] weights" and "UserWarning" not in err


def test_a_text_with_a_byte_that_is_not_utf8_is_refused_before_scoring():
    """`leakloss score ... --text $'नेकपा \\xff'` scored for 9 s, then the result's write raised UnicodeEncodeError."""
    from leakloss.cli import _text_problem

    assert _text_problem("नेकपा \udcff") == "is not valid Unicode (a lone surrogate)"
    assert _text_problem("नेकपा") is None


def test_a_failed_html_write_gives_the_existing_json_file_its_content_back(tmp_path, monkeypatch):
    """The rollback deleted the user's old --json file instead of restoring it."""
    import typer

    import leakloss.atomic as atomic
    import leakloss.report as report
    from leakloss.cli import _emit_result

    old = tmp_path / "r.json"
    old.write_text('{"old": 1}', encoding="utf-8")
    real_write = atomic.write_text_atomic

    def failing_html(path, text):
        if str(path).endswith(".html"):
            raise OSError(28, "No space left on device", str(path))
        return real_write(path, text)

    monkeypatch.setattr(atomic, "write_text_atomic", failing_html)
    monkeypatch.setattr(report, "render_report", lambda result, wave: "<html></html>")
    with pytest.raises(typer.Exit):
        _emit_result({"query": str(tmp_path / "missing.wav"), "status": "failed"}, (old, tmp_path / "r.html"))
    assert old.read_text(encoding="utf-8") == '{"old": 1}' and not (tmp_path / "r.html").exists()
    new = tmp_path / "new.json"
    with pytest.raises(typer.Exit):
        _emit_result({"query": str(tmp_path / "missing.wav"), "status": "failed"}, (new, tmp_path / "r.html"))
    assert not new.exists()  # a file the run made is removed


def test_an_output_link_is_replaced_never_written_through(tmp_path, monkeypatch):
    """--json/--html naming a symlink wrote the result into the link's target, outside the folder (issue 43,
    defect 5); a link to a folder or a device is still refused, and a failed run puts the link back."""
    import typer

    import leakloss.atomic as atomic
    import leakloss.report as report
    from leakloss.cli import _check_output_path, _emit_result

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.json").write_text("precious")
    (tmp_path / "r.json").symlink_to(outside / "victim.json")
    (tmp_path / "r.html").symlink_to(outside / "nonexist" / "victim.html")  # would have made a file outside
    (tmp_path / "null.json").symlink_to("/dev/null")
    with pytest.raises(typer.Exit):
        _check_output_path(tmp_path / "null.json", "--json")
    assert _check_output_path(tmp_path / "r.json", "--json") == tmp_path / "r.json"
    assert _check_output_path(tmp_path / "r.html", "--html", (".html",)) == tmp_path / "r.html"
    monkeypatch.setattr(report, "render_report", lambda result, wave: "<html></html>")
    real_write = atomic.write_text_atomic

    def failing_html(path, text):
        if str(path).endswith(".html"):
            raise OSError(28, "No space left on device", str(path))
        return real_write(path, text)

    monkeypatch.setattr(atomic, "write_text_atomic", failing_html)
    with pytest.raises(typer.Exit):
        _emit_result({"query": str(tmp_path / "missing.wav"), "status": "failed"}, (tmp_path / "r.json",
                                                                                     tmp_path / "r.html"))
    assert os.readlink(tmp_path / "r.json") == str(outside / "victim.json")  # the link is back, as it was
    monkeypatch.setattr(atomic, "write_text_atomic", real_write)
    _emit_result({"query": str(tmp_path / "missing.wav"), "status": "failed", "words": []},
                 (tmp_path / "r.json", tmp_path / "r.html"))
    assert (outside / "victim.json").read_text() == "precious" and sorted(p.name for p in outside.iterdir()) == [
        "victim.json"]
    for name in ("r.json", "r.html"):
        assert not (tmp_path / name).is_symlink() and (tmp_path / name).is_file()
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "failed"


@pytest.mark.parametrize("args, needle", [
    (["score", "x.wav", "--text", "x", "--bogus"], "No such option: --bogus (see `leakloss score --help`)"),
    (["score"], "Missing argument 'query'. (see `leakloss score --help`)"),
    (["nosuchcmd"], "No such command 'nosuchcmd'."),
    (["demo", "--sentences", "nan"], "Invalid value for '--sentences'"),
    (["g2p", "--lexicon"], "Option '--lexicon' requires an argument."),
])
def test_usage_errors_are_one_error_line(args, needle):
    """Click's usage errors were a boxed 4-line report ('Usage: ... Try ... ╭─ Error ─╮')."""
    r = runner.invoke(app, args, prog_name="leakloss")
    assert_clean_error(r, needle)
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and r.stderr.startswith("error: "), r.stderr
    assert r.stdout == ""


def test_bare_leakloss_still_prints_its_help_and_help_exits_0():
    r = runner.invoke(app, [], prog_name="leakloss")
    assert r.exit_code == 2 and "Usage: leakloss" in r.output and "score" in r.output
    r = runner.invoke(app, ["--help"], prog_name="leakloss")
    assert r.exit_code == 0 and "Usage: leakloss" in r.stdout


def test_file_names_that_cannot_be_written_or_read_are_refused_before_scoring(tmp_path, models, clips, no_scoring):
    """A query or --ref whose name is not UTF-8 was scored, then the result write died in a traceback; a name
    past 255 bytes was a traceback in Path.exists() (query, --ref, --html)."""
    import os

    latin1 = os.fsdecode(str(tmp_path).encode() + b"/bad\xff.wav")
    shutil.copy(clips["q"], latin1)
    long_name = str(tmp_path / ("a" * 300 + ".wav"))
    cases = [([latin1, "--json", str(tmp_path / "o.json")], "query 'FOLDER/bad\\udcff.wav': its name is not valid UTF-8"),
             ([str(clips["q"]), "--ref", latin1, "--json", str(tmp_path / "o.json")], "--ref "),
             ([long_name], "query "), ([str(clips["q"]), "--ref", long_name], "--ref "),
             ([str(clips["q"]), "--ref", str(clips["r"]), "--html", long_name[:-4] + ".html"], "--html ")]
    for args, needle in cases:
        r = runner.invoke(app, ["score", *args, "--text", TEXT, *model_args(models)])
        assert_clean_error(r, needle.replace("FOLDER", str(tmp_path)))
        assert r.stderr.count("\n") == 1
    assert not (tmp_path / "o.json").exists()
    r = runner.invoke(app, ["recognize", long_name, "--recognizer", str(models["a"])])
    assert_clean_error(r, "a file name longer than 255 bytes")


def test_score_batch_refuses_a_manifest_folder_whose_name_is_not_utf8(tmp_path, models, no_scoring):
    # every result names the folder: the run died at the first write
    import os

    folder = os.fsdecode(str(tmp_path).encode() + b"/dir\xff")
    os.mkdir(folder)
    with open(os.path.join(folder, "manifest.jsonl"), "w", encoding="utf-8") as f:
        f.write('{"id": "a", "query": "q.wav", "text": "आज नेकपा", "refs": []}\n')
    r = runner.invoke(app, ["score-batch", os.path.join(folder, "manifest.jsonl"), "--out", str(tmp_path / "out"),
                            *model_args(models)])
    assert_clean_error(r, "line 1: query ", "its name is not valid UTF-8")
    assert not (tmp_path / "out").exists()


def test_a_float_query_at_the_wrong_scale_is_one_error_line_not_clipping(tmp_path):
    """int16 values stored in a float WAV were scored as "85% clipped" and quarantined (issue 43, defect 8)."""
    sf.write(tmp_path / "q.wav", speechlike(1.0) * 27_000 / 0.3, 16_000, subtype="FLOAT")
    r = runner.invoke(app, ["score", str(tmp_path / "q.wav"), "--text", TEXT])
    assert_clean_error(r, "has samples far beyond full scale")
    assert "clipped" not in r.output


def test_a_rejected_ref_is_warned_on_the_terminal_and_listed_in_the_html_report(tmp_path, models, clips, monkeypatch):
    """--ref of the query itself (or noise) was silent on the terminal and missing from the report's References:
    only --json's reference_checks said why (issue 43, defect 7)."""
    from leakloss.scorer import Scorer

    monkeypatch.setattr(Scorer, "check_words", lambda self, wave, text, expected, max_per: (True, "ok"))
    args = ["score", str(clips["q"]), "--text", TEXT, "--ref", str(clips["q"]), "--ref", str(clips["r"]),
            *model_args(models)]
    r = runner.invoke(app, [*args, "--html", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    warned = f"warning: --ref {clips['q']} not used: the query's own audio"
    assert warned in " ".join(r.stdout.split()), r.stdout
    assert f"--ref {clips['r']} not used" not in r.stdout
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    refs = page[page.index("<h2>References</h2>"):]
    assert "Not used (1)" in refs and str(clips["q"]) in refs and "the query&#x27;s own audio" in refs
    r = runner.invoke(app, [*args, "--json", "-"])
    assert r.exit_code == 0 and warned in " ".join(r.stderr.split()), r.output


def test_g2p_error_for_a_huge_lexicon_line_is_short(tmp_path):
    # issue 43, defect 14: a lexicon line of 1.2 M phones gave a 4.2 MB error line
    lex = tmp_path / "lex.tsv"
    lex.write_text("घर\t" + " ".join(["ɡ", "ʌ", "r"] * 400_000) + "\n", encoding="utf-8")
    r = runner.invoke(app, ["g2p", "--lexicon", str(lex), "घर"])
    assert_clean_error(r, f"{lex}:1:", "characters in all)")
    assert len([line for line in r.stderr.splitlines() if line.startswith("error:")]) == 1, r.stderr[:2000]
    assert len(r.stderr) < 2000, len(r.stderr)


@pytest.mark.parametrize("weights, needle", [
    ("pytorch_model.bin", "refusing to load pickle-based weights (pytorch_model.bin)"),  # was UnpicklingError
    ("model.safetensors", "model.safetensors: not a readable safetensors file"),  # was SafetensorError
])
def test_score_asr_folder_with_pickle_or_damaged_weights_is_one_error_line(tmp_path, models, clips, weights, needle):
    # issue 43, defect 6: `recognize --recognizer DIR` said error:, `score --asr DIR` gave a traceback
    from pathlib import PurePosixPath

    from transformers import Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2Processor

    asr = tmp_path / "asr"
    shutil.copytree(models["a"], asr)
    Wav2Vec2Processor(feature_extractor=Wav2Vec2FeatureExtractor(), tokenizer=Wav2Vec2CTCTokenizer(
        str(asr / "vocab.json"), pad_token="<pad>", unk_token="<unk>")).save_pretrained(asr)
    (asr / "model.safetensors").unlink()
    if weights == "pytorch_model.bin":  # an object torch.load(weights_only=True) refuses: an UnpicklingError
        torch.save({"x": torch.zeros(2), "object": PurePosixPath("x")}, asr / weights)
    else:
        (asr / weights).write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    r = runner.invoke(app, ["score", str(clips["q"]), "--text", TEXT, "--ref", str(clips["r"]), "--asr", str(asr),
                            *model_args(models)])
    assert_clean_error(r, needle)
    assert len([line for line in r.stderr.splitlines() if line.startswith("error:")]) == 1, r.stderr


def test_a_synthesised_reference_not_used_is_not_called_a_ref_of_the_users():
    # with no --ref given, "warning: --ref ~/.cache/.../teacher0-....wav not used" named a --ref the user never gave
    from leakloss.cli import _result_warnings

    checks = [{"reference": "/cache/teacher0.wav", "used": False, "reason": "the query was quarantined"}]
    synthesised = {"reference_checks": checks, "reference_origin": {"origin": "synthesised", "detail": "teacher"}}
    assert _result_warnings(synthesised) == ["synthesised reference /cache/teacher0.wav not used: the query was "
                                             "quarantined"]
    assert _result_warnings({"reference_checks": checks}) == ["--ref /cache/teacher0.wav not used: the query was "
                                                              "quarantined"]


def test_evaluate_exits_1_when_a_reading_was_not_scored(tmp_path, monkeypatch):
    # a missing WAV was printed as "not scored" and evaluate exited 0: a TTS job that lost readings passed CI
    r = _evaluate_reporting(tmp_path, monkeypatch, scoring={"s1": {}}, problems=[
        {"system": "s1", "reading": "ne-002", "reason": "audio ne-002.wav is missing"}])
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert "not scored s1: ne-002: audio ne-002.wav is missing" in r.stderr
    assert "1 reading(s) not scored" in r.stderr


def test_evaluate_reads_a_test_set_from_a_pipe(tmp_path, monkeypatch):
    # <(leakloss testset) was "no such file": only a regular file passed the check
    import os
    import threading

    import leakloss.evaluate

    seen = {}

    def evaluated(systems, out, testset=None, **kwargs):
        seen["sets"] = leakloss.evaluate.read_testset(testset)
        raise leakloss.evaluate.EvaluateError("stop here")

    monkeypatch.setattr(leakloss.evaluate, "evaluate", evaluated)
    fifo = tmp_path / "set.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text("id\ttext\tkey_words\nn1\tघर जाऊँ\tघर\n", encoding="utf-8"))
    writer.start()
    (tmp_path / "sys").mkdir()
    r = runner.invoke(app, ["evaluate", f"s1={tmp_path / 'sys'}", "--out", str(tmp_path / "out"), "--testset", str(fifo)])
    writer.join(timeout=10)
    assert r.exit_code == 2 and "error: stop here" in r.stderr, r.output
    assert list(seen["sets"]) == ["n1"]
    r = runner.invoke(app, ["evaluate", f"s1={tmp_path / 'sys'}", "--out", str(tmp_path / "out"), "--testset",
                            str(tmp_path)])
    assert r.exit_code == 2 and "a folder, not a test set file" in r.stderr
