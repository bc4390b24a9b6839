"""score_batch: the manifest is checked as a whole before any work, every item ends in an explicit result,
failures are retried on a rerun, and only a valid, non-failed result file counts as done."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from leakloss.batch import (
    MAX_DEVICES,
    BatchConfigError,
    BatchManifestError,
    parse_devices,
    read_batch_manifest,
    result_is_done,
    score_batch,
)
from tests.tiny_models import TEXT, save_tiny_models, truncate_wav, write_clip


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return save_tiny_models(tmp_path_factory.mktemp("tiny-models"))


def _kwargs(models, **extra):
    return dict(recognizer_a=str(models["a"]), recognizer_b=str(models["b"]), heads_dir=models["heads"],
                progress=False, **extra)


def write_manifest(path: Path, lines: list) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in lines) + "\n",
                    encoding="utf-8")
    return path


def item(id_: str, query: str = "q.wav", refs=("r.wav",), text: str = TEXT) -> dict:
    return {"id": id_, "query": query, "text": text, "refs": list(refs)}


@pytest.fixture
def one_process(monkeypatch):
    """Lets predict run only as one process (tests start no others); returns the process counts asked for."""
    real, asked = L.Trainer.predict, []

    def predict(self, *args, **kwargs):
        asked.append(self.num_devices)
        assert self.num_devices == 1, f"predict was started on {self.num_devices} processes"
        return real(self, *args, **kwargs)

    monkeypatch.setattr(L.Trainer, "predict", predict)
    return asked


# --- the manifest, checked up front -----------------------------------------------------------------

@pytest.mark.parametrize("line, message", [
    ('[1, 2]', "must be a JSON object"),
    ('"just a string"', "must be a JSON object"),
    ('{"id": "x", "query": "q.wav", "text": "आज", "refs": [1]}', r"refs\[0\] must be a non-empty path string"),
    ('{"id": "x", "query": "q.wav", "text": "आज", "refs": ["a\\u0000b"]}', r"refs\[0\].*NUL"),
    ('{"id": "x", "query": "q\\u0000.wav", "text": "आज", "refs": []}', "query.*NUL"),
    ('{"id": "x", "query": "", "text": "आज", "refs": []}', "query"),
    ('{"id": "x", "query": "q.wav", "text": "  ", "refs": []}', "text"),
    ('{"id": "x", "query": "q.wav", "text": "आज", "refs": [], "system": 3}', "system"),
    ('{"id": "' + "x" * 300 + '", "query": "q.wav", "text": "आज", "refs": []}', "too long"),
    ('{"id": "a\\u0000b", "query": "q.wav", "text": "आज", "refs": []}', "control character"),
    ('{"id": "a/b", "query": "q.wav", "text": "आज", "refs": []}', "plain file name"),
    ('{"id": "a\\\\b", "query": "q.wav", "text": "आज", "refs": []}', "plain file name"),
    ('{"id": "..", "query": "q.wav", "text": "आज", "refs": []}', "plain file name"),
    ('{"id": ".hidden", "query": "q.wav", "text": "आज", "refs": []}', "plain file name"),
    ('{"id": "\\ud800", "query": "q.wav", "text": "आज", "refs": []}', "not valid Unicode"),
    ('{"id": 7, "query": "q.wav", "text": "आज", "refs": []}', "'id' must be a string"),
    # texts the scorer can never score: a rerun cannot fix them, so they are manifest errors, not failures
    ('{"id": "x", "query": "q.wav", "text": "hello world", "refs": []}', "'text' has no Devanagari word"),
    ('{"id": "x", "query": "q.wav", "text": "।।", "refs": []}', "'text' has no Devanagari word"),
    ('{"id": "x", "query": "q.wav", "text": "' + "क" * 101 + '", "refs": []}', "'text' cannot be read.*limit"),
    ('{"id": "x", "query": "q.wav", "text": "आज \\ud800", "refs": []}', "'text' is not valid Unicode"),
    ('{"id": "x", "query": "q.wav", "text": "आज", "refs": [], "sytem": "f5"}', "unknown field.*'sytem'"),  # was dropped
    # copied into the result: the write's UnicodeEncodeError stopped the whole run, traceback, no result written
    ('{"id": "x", "query": "q.wav", "text": "आज", "refs": [], "system": "f5\\udc80"}', "'system' is not valid Unicode"),
    ('{"id": "x", "query": "q.wav", "text": "आज", "refs": [], "sentence_id": "\\ud800"}', "'sentence_id' is not valid"),
])
def test_bad_manifest_lines_are_clear_errors_with_line_numbers(tmp_path, line, message):
    path = write_manifest(tmp_path / "m.jsonl", [item("fine"), line])
    with pytest.raises(BatchManifestError, match=message) as err:
        read_batch_manifest(path)
    assert "line 2" in str(err.value)


def test_every_bad_line_is_reported_at_once(tmp_path):
    path = write_manifest(tmp_path / "m.jsonl", ["[1]", item("ok"), '{"id": "x"', item("ok"), "[2]"])
    with pytest.raises(BatchManifestError) as err:
        read_batch_manifest(path)
    msg = str(err.value)
    assert "4 problems" in msg
    assert all(f"line {n}" in msg for n in (1, 3, 4, 5)) and "line 2:" not in msg
    assert "duplicate id 'ok'" in msg


def test_an_unknown_field_does_not_hide_the_other_problems_of_its_line(tmp_path):
    """A fix-rerun cycle took two rounds: the unknown field was the only problem said for its line."""
    path = write_manifest(tmp_path / "m.jsonl", ['{"id": "x", "query": "q.wav", "text": "hello", "refs": [], "sytem": 1}'])
    with pytest.raises(BatchManifestError) as err:
        read_batch_manifest(path)
    assert "unknown field(s) 'sytem'" in str(err.value) and "'text' has no Devanagari word" in str(err.value)


def test_empty_manifest_is_an_error(tmp_path):
    with pytest.raises(BatchManifestError, match="no items"):
        read_batch_manifest(write_manifest(tmp_path / "m.jsonl", ["", "  "]))


def test_a_good_manifest_resolves_paths_against_its_folder(tmp_path):
    path = write_manifest(tmp_path / "m.jsonl", ["\ufeff" + json.dumps(item("a b", refs=["r1.wav", "sub/r2.wav"]))])
    (d,) = read_batch_manifest(path)
    assert d["id"] == "a b" and d["query"] == str(tmp_path / "q.wav")
    assert d["refs"] == [str(tmp_path / "r1.wav"), str(tmp_path / "sub" / "r2.wav")]


def test_a_text_holding_a_unicode_line_separator_is_one_manifest_line(tmp_path):
    """str.splitlines broke such a line in two ("Unterminated string"), and shifted every later line number."""
    path = write_manifest(tmp_path / "m.jsonl", [item("a", text=TEXT + "\u2028"), item("b"), "{bad"])
    with pytest.raises(BatchManifestError, match=r"line 3: not valid JSON") as err:
        read_batch_manifest(path)
    assert "line 1" not in str(err.value) and "line 2" not in str(err.value)


# --- run configuration, checked before any work --------------------------------------------------------

@pytest.mark.parametrize("value, expected", [("1", 1), ("4", 4), ("auto", "auto"), ("-1", -1), ("0,1", [0, 1]),
                                             (" 2 ", 2)])
def test_parse_devices(value, expected):
    assert parse_devices(value) == expected


@pytest.mark.parametrize("value", ["abc", "0", "", "1.5", "0,,1", "-2", "1,x", "9" * 23, str(MAX_DEVICES + 1),
                                   "0," + "9" * 23, 0, -2, 10**23, True, 1.0, [], [True], [-1], [0, 10**23]])
def test_parse_devices_rejects_nonsense(value):
    with pytest.raises(BatchConfigError, match="--devices"):
        parse_devices(value)


def test_out_pointing_at_a_file_is_an_error(tmp_path, models):
    manifest = write_manifest(tmp_path / "m.jsonl", [item("x")])
    (tmp_path / "out").write_text("not a folder")
    with pytest.raises(BatchConfigError, match="not a folder"):
        score_batch(manifest, tmp_path / "out", **_kwargs(models))


@pytest.mark.skipif(not Path("/proc/self").is_dir() or os.geteuid() != 0,
                    reason="needs Linux /proc and root (whom os.access lets write anywhere)")
@pytest.mark.parametrize("out", ["/proc", "/proc/x/y"])
def test_out_where_nothing_can_be_created_is_an_error_before_any_work(tmp_path, models, out):
    # os.access says yes to root in /proc: the check passed and the results failed to write after the scoring
    manifest = write_manifest(tmp_path / "m.jsonl", [item("x")])
    with pytest.raises(BatchConfigError, match=r"--out /proc.* (nothing can be created|cannot be created)"):
        score_batch(manifest, Path(out), **_kwargs(models))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_gpu_without_gpu_is_an_error_before_any_work(tmp_path, models):
    manifest = write_manifest(tmp_path / "m.jsonl", [item("x")])
    with pytest.raises(BatchConfigError, match="accelerator 'gpu'"):
        score_batch(manifest, tmp_path / "out", accelerator="gpu", **_kwargs(models))
    assert not (tmp_path / "out").exists()


def test_unusable_devices_and_strategy_are_errors(tmp_path, models):
    manifest = write_manifest(tmp_path / "m.jsonl", [item("x")])
    with pytest.raises(BatchConfigError, match="devices"):
        score_batch(manifest, tmp_path / "out", devices="abc", **_kwargs(models))
    with pytest.raises(BatchConfigError, match="strategy 'nope'"):
        score_batch(manifest, tmp_path / "out", strategy="nope", **_kwargs(models))
    with pytest.raises(BatchConfigError, match="--devices"):  # was an OverflowError from deep in Lightning
        score_batch(manifest, tmp_path / "out", devices="9" * 23, **_kwargs(models))
    assert not (tmp_path / "out").exists()


def test_more_cpu_processes_than_cpus_is_an_error(tmp_path, models, monkeypatch, one_process):
    monkeypatch.setattr("leakloss.batch.os.cpu_count", lambda: 2)
    manifest = write_manifest(tmp_path / "m.jsonl", [item(f"x{i}") for i in range(4)])
    with pytest.raises(BatchConfigError, match="3 processes on the CPU.*2 CPUs; give at most 2"):
        score_batch(manifest, tmp_path / "out", devices="3", **_kwargs(models))
    assert not (tmp_path / "out").exists() and one_process == []


def test_never_more_processes_than_items_to_score(tmp_path, models, monkeypatch, one_process, capsys):
    monkeypatch.setattr("leakloss.batch.os.cpu_count", lambda: 8)
    write_clip(tmp_path / "q.wav")
    manifest = write_manifest(tmp_path / "m.jsonl", [item("only", refs=[])])
    summary = score_batch(manifest, tmp_path / "out", devices="2", **_kwargs(models))  # crashed on rank 1
    assert one_process == [1] and summary["processed"] == 1 and summary["failed"] == 0
    assert "note: 1 item to score: using 1 of the 2 devices" in capsys.readouterr().err


# --- results, statuses and resuming ------------------------------------------------------------------

def test_missing_file_is_failed_counted_and_retried_once_it_appears(tmp_path, models):
    write_clip(tmp_path / "r.wav", seed=1)
    write_clip(tmp_path / "q.wav")
    manifest = write_manifest(tmp_path / "m.jsonl", [item("present"), item("missing", query="later.wav")])
    out = tmp_path / "out"
    summary = score_batch(manifest, out, **_kwargs(models))
    assert summary["total"] == 2 and summary["processed"] == 2 and summary["skipped_existing"] == 0
    assert summary["failed"] == 1 and summary["quarantined"] == 1  # tiny models cannot read: word check fails
    assert summary["scored"] == 0 and summary["unscored"] == 0
    assert [f["id"] for f in summary["failures"]] == ["missing"]
    assert "does not exist" in summary["failures"][0]["reason"]
    failed = json.loads((out / "missing.json").read_text(encoding="utf-8"))
    assert failed["status"] == "failed" and "later.wav" in failed["reason"]

    write_clip(tmp_path / "later.wav", seed=2)
    again = score_batch(manifest, out, **_kwargs(models))
    assert again["skipped_existing"] == 1 and again["processed"] == 1  # the failed one is retried, the other kept
    assert again["failed"] == 0 and again["quarantined"] == 1
    assert json.loads((out / "missing.json").read_text(encoding="utf-8"))["status"] == "quarantined"


def test_statuses_are_counted_with_a_passing_word_check(tmp_path, models):
    write_clip(tmp_path / "q.wav")
    write_clip(tmp_path / "r.wav", seed=1)
    truncate_wav(write_clip(tmp_path / "cut.wav", seed=3))
    manifest = write_manifest(tmp_path / "m.jsonl", [item("with-ref"), item("no-ref", refs=[]),
                                                     item("cut", query="cut.wav")])
    summary = score_batch(manifest, tmp_path / "out", word_check=lambda w, t: (True, "test"), **_kwargs(models))
    statuses = {p.stem: json.loads(p.read_text(encoding="utf-8"))["status"] for p in (tmp_path / "out").glob("*.json")}
    assert statuses["no-ref"] == "unscored" and statuses["cut"] == "failed"
    assert statuses["with-ref"] in ("scored", "unscored")
    counts = {s: list(statuses.values()).count(s) for s in ("scored", "quarantined", "unscored", "failed")}
    assert {k: summary[k] for k in counts} == counts
    assert "truncated" in next(f["reason"] for f in summary["failures"] if f["id"] == "cut")


@pytest.mark.parametrize("content", ["", '{"id": "x", "status": "scor', "[]", '{"status": "scored"}', "\xff"])
def test_truncated_empty_or_invalid_result_files_are_not_done(tmp_path, models, content):
    write_clip(tmp_path / "q.wav")
    write_clip(tmp_path / "r.wav", seed=1)
    manifest = write_manifest(tmp_path / "m.jsonl", [item("x")])
    out = tmp_path / "out"
    out.mkdir()
    (out / "x.json").write_text(content, encoding="utf-8")
    summary = score_batch(manifest, out, **_kwargs(models))
    assert summary["skipped_existing"] == 0 and summary["processed"] == 1
    assert json.loads((out / "x.json").read_text(encoding="utf-8"))["id"] == "x"


def test_result_is_done_only_when_valid_matching_and_not_failed(tmp_path, models):
    write_clip(tmp_path / "q.wav")
    write_clip(tmp_path / "r.wav", seed=1)
    manifest = write_manifest(tmp_path / "m.jsonl", [item("x")])
    out = tmp_path / "out"
    score_batch(manifest, out, **_kwargs(models))
    (entry,) = read_batch_manifest(manifest)
    assert result_is_done(out / "x.json", entry)
    assert not result_is_done(out / "x.json", entry | {"text": "मौसम आज राम्रो छ।"})  # the manifest changed
    result = json.loads((out / "x.json").read_text(encoding="utf-8"))
    (out / "x.json").write_text(json.dumps(result | {"status": "failed", "reason": "r"}), encoding="utf-8")
    assert not result_is_done(out / "x.json", entry)
    assert not result_is_done(out / "nothing.json", entry)


def test_a_result_made_with_other_references_is_scored_again(tmp_path, models):
    write_clip(tmp_path / "q.wav")
    write_clip(tmp_path / "r.wav", seed=1)
    write_clip(tmp_path / "r2.wav", seed=2)
    out, kwargs = tmp_path / "out", _kwargs(models, word_check=lambda w, t: (True, "test"))

    def run(refs):
        summary = score_batch(write_manifest(tmp_path / "m.jsonl", [item("x", refs=refs)]), out, **kwargs)
        checks = json.loads((out / "x.json").read_text(encoding="utf-8"))["reference_checks"]
        return summary["skipped_existing"], [Path(c["reference"]).name for c in checks]

    skipped, synthesised = run([])  # no reference given: the embedded teacher's, synthesised
    assert skipped == 0 and [n.split("-")[0] for n in synthesised] == ["teacher0", "teacher2"]
    assert run([]) == (1, synthesised)  # cached by text: the same references, resumed
    assert run(["r.wav"]) == (0, ["r.wav"])  # the references came: scored again, not kept stale
    assert run(["r.wav"]) == (1, ["r.wav"])  # unchanged: resumed
    assert run(["r.wav", "r2.wav"]) == (0, ["r.wav", "r2.wav"])
    assert run(["r2.wav", "r.wav"]) == (0, ["r2.wav", "r.wav"])


def test_audio_replaced_at_the_same_path_is_scored_again(tmp_path, models, monkeypatch):
    """Done-ness was decided by path strings: the next checkpoint's reading at the same path kept the old result."""
    write_clip(tmp_path / "q.wav")
    write_clip(tmp_path / "r.wav", seed=1)
    out, kwargs = tmp_path / "out", _kwargs(models, word_check=lambda w, t: (True, "test"))
    manifest = write_manifest(tmp_path / "m.jsonl", [item("x")])
    assert score_batch(manifest, out, **kwargs)["processed"] == 1
    assert score_batch(manifest, out, **kwargs)["skipped_existing"] == 1
    write_clip(tmp_path / "q.wav", seed=5)  # a new reading, same path
    assert score_batch(manifest, out, **kwargs)["processed"] == 1
    write_clip(tmp_path / "r.wav", seed=6)  # a new reference, same path
    assert score_batch(manifest, out, **kwargs)["processed"] == 1
    result = json.loads((out / "x.json").read_text(encoding="utf-8"))
    import hashlib

    assert result["input_sha1"] == {"query": hashlib.sha1((tmp_path / "q.wav").read_bytes()).hexdigest(),
                                    "refs": [hashlib.sha1((tmp_path / "r.wav").read_bytes()).hexdigest()]}
    # the same manifest named from another folder: the same (absolute) paths, nothing to redo
    monkeypatch.chdir(tmp_path)
    again = score_batch(Path("m.jsonl"), out, **kwargs)
    assert again["skipped_existing"] == 1 and again["processed"] == 0
    assert Path(json.loads((out / "x.json").read_text(encoding="utf-8"))["query"]).is_absolute()


def test_a_result_made_by_another_scorer_is_scored_again(tmp_path, models):
    """Results record the scorer's fingerprint: other heads or thresholds rescore, the same heads moved do not."""
    from leakloss.heads import HeadCard, MLPHead, save_head

    write_clip(tmp_path / "q.wav")
    write_clip(tmp_path / "r.wav", seed=1)
    manifest = write_manifest(tmp_path / "m.jsonl", [item("x")])
    out = tmp_path / "out"
    check = dict(word_check=lambda w, t: (True, "test"))

    def run(**kwargs):
        summary = score_batch(manifest, out, **(_kwargs(models, **check) | kwargs))
        return summary["skipped_existing"], json.loads((out / "x.json").read_text(encoding="utf-8"))["scorer"]

    skipped, first = run()
    assert skipped == 0 and len(first) == 16
    assert run() == (1, first)
    moved = shutil.copytree(models["heads"], tmp_path / "moved-heads")
    assert run(heads_dir=moved) == (1, first)  # the same files elsewhere: the same scorer
    retrained = tmp_path / "retrained-heads"
    for kind in ("deletion", "quality"):
        save_head(retrained / kind, MLPHead(), HeadCard(kind, {}, "b", "1"))
    skipped, other = run(heads_dir=retrained)
    assert skipped == 0 and other != first
    skipped, stricter = run(heads_dir=retrained, flag_threshold=0.9, no_change_threshold=0.1)
    assert skipped == 0 and stricter not in (first, other)
    result = json.loads((out / "x.json").read_text(encoding="utf-8"))
    del result["scorer"]  # written before results recorded their scorer
    (out / "x.json").write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")
    assert run(heads_dir=retrained, flag_threshold=0.9, no_change_threshold=0.1) == (0, stricter)


def test_a_quarantined_result_does_not_depend_on_the_references(tmp_path, models):
    write_clip(tmp_path / "q.wav")
    write_clip(tmp_path / "r.wav", seed=1)
    out = tmp_path / "out"
    score_batch(write_manifest(tmp_path / "m.jsonl", [item("x", refs=[])]), out, **_kwargs(models))
    assert json.loads((out / "x.json").read_text(encoding="utf-8"))["status"] == "quarantined"  # tiny models
    (entry,) = read_batch_manifest(write_manifest(tmp_path / "m.jsonl", [item("x")]))
    assert result_is_done(out / "x.json", entry)  # the query never reached its references: nothing to redo


def test_results_are_written_atomically(tmp_path, models, monkeypatch):
    import leakloss.atomic

    write_clip(tmp_path / "q.wav")
    manifest = write_manifest(tmp_path / "m.jsonl", [item("x", refs=[])])
    out = tmp_path / "out"

    real_replace = leakloss.atomic.os.replace

    def broken_replace(src, dst):
        if str(dst).endswith("x.json"):
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(leakloss.atomic.os, "replace", broken_replace)
    with pytest.raises(OSError, match="No space"):
        score_batch(manifest, out, **_kwargs(models))
    assert list(out.iterdir()) == []  # no half-written result and no temporary file left behind


def test_an_unexpected_error_in_one_item_is_a_failed_result_not_a_crash(tmp_path, models, monkeypatch):
    from leakloss.scorer import Scorer

    write_clip(tmp_path / "q.wav")
    write_clip(tmp_path / "q2.wav", seed=4)
    manifest = write_manifest(tmp_path / "m.jsonl", [item("boom", refs=[]), item("fine", query="q2.wav", refs=[])])
    real = Scorer.score

    def score(self, query, *args, **kw):
        if str(query).endswith("q.wav"):
            raise RuntimeError("kaboom")
        return real(self, query, *args, **kw)

    monkeypatch.setattr(Scorer, "score", score)
    summary = score_batch(manifest, tmp_path / "out", **_kwargs(models))
    assert summary["failed"] == 1 and summary["processed"] == 2
    assert "RuntimeError: kaboom" in summary["failures"][0]["reason"]


def test_recognizer_problems_are_raised_before_any_result(tmp_path, models):
    from leakloss.acoustic.recognizer import RecognizerLoadError

    write_clip(tmp_path / "q.wav")
    manifest = write_manifest(tmp_path / "m.jsonl", [item("x", refs=[])])
    broken = tmp_path / "broken"
    shutil.copytree(models["a"], broken)
    (broken / "vocab.json").unlink()
    kwargs = _kwargs(models) | {"recognizer_a": str(broken)}
    with pytest.raises(RecognizerLoadError, match="vocab.json"):
        score_batch(manifest, tmp_path / "out", **kwargs)
    assert not list((tmp_path / "out").glob("*.json"))


# --- any user input: a clear error or a usable item, nothing else (hypothesis) -------------------------

_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                            lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=5), kids,
                                                                                      max_size=3), max_leaves=6)
_lines = st.one_of(
    st.text(max_size=40),  # anything at all, JSON or not
    _json_values.map(json.dumps),
    st.fixed_dictionaries({"id": st.text(max_size=260) | _json_values, "query": st.text(max_size=20) | _json_values,
                           "text": st.text(max_size=20), "refs": st.lists(st.text(max_size=10) | _json_values,
                                                                          max_size=3)}).map(json.dumps),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_lines, min_size=1, max_size=5))
def test_any_manifest_is_items_or_a_manifest_error(tmp_path, lines):
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(line.replace("\n", " ").replace("\r", " ") for line in lines), encoding="utf-8",
                    errors="surrogatepass")
    try:
        items = read_batch_manifest(path)
    except BatchManifestError as err:
        assert "line" in str(err) or "no items" in str(err)
        return
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    for d in items:  # every accepted id is a file name the results can be written under
        target = out / f"{d['id']}.json"
        assert target.parent == out
        target.write_text("{}", encoding="utf-8")
        target.unlink()
        assert all(isinstance(r, str) for r in d["refs"]) and isinstance(d["query"], str)


@given(st.text(max_size=12) | st.integers() | st.lists(st.integers(), max_size=3))
def test_any_devices_text_parses_or_is_a_config_error(value):
    try:
        parsed = parse_devices(value)
    except BatchConfigError:
        return
    assert parsed == "auto" or (isinstance(parsed, int) and (0 < parsed <= MAX_DEVICES or parsed == -1)) or (
        isinstance(parsed, list) and parsed and all(isinstance(i, int) and 0 <= i < MAX_DEVICES for i in parsed))


# --- the command line: bad input is one error line and exit 2, before any work -------------------------

@pytest.mark.parametrize("text, extra, needle", [
    ("hello world", [], "line 2: field 'text' has no Devanagari word"),
    (TEXT, ["--devices", "9" * 23], "--devices must be a number"),
])
def test_cli_bad_text_or_devices_is_exit_2(tmp_path, models, one_process, text, extra, needle):
    from leakloss.cli import app

    manifest = write_manifest(tmp_path / "m.jsonl", [item("ok", refs=[]), item("latin", query="latin.wav", refs=[], text=text)])
    r = CliRunner().invoke(app, ["score-batch", str(manifest), "--out", str(tmp_path / "out"), "--recognizer-a",
                                 str(models["a"]), "--recognizer-b", str(models["b"]), "--heads", str(models["heads"]),
                                 *extra])
    assert r.exit_code == 2 and "Traceback" not in r.output and r.stderr.startswith("error:"), r.output
    assert needle in r.stderr and not (tmp_path / "out").exists() and one_process == []


def test_a_result_that_would_overwrite_an_input_is_refused(tmp_path, models):
    """A manifest named manifest.json with an item "manifest" scored into its own folder was replaced by a result."""
    write_clip(tmp_path / "q.wav")
    manifest = write_manifest(tmp_path / "manifest.json", [item("manifest", refs=[])])
    before = manifest.read_bytes()
    with pytest.raises(BatchManifestError, match="is the manifest: writing it would destroy it"):
        score_batch(manifest, tmp_path, **_kwargs(models))
    assert manifest.read_bytes() == before
    (tmp_path / "q.json").write_bytes(b"RIFF")  # audio that happens to be named like a result
    manifest = write_manifest(tmp_path / "m.jsonl", [item("q", query="q.json", refs=[])])
    with pytest.raises(BatchManifestError, match="item 'q''s query"):
        score_batch(manifest, tmp_path, **_kwargs(models))
    assert (tmp_path / "q.json").read_bytes() == b"RIFF"


def test_a_folder_where_a_result_goes_is_refused_before_any_item_is_scored(tmp_path, models):
    """OUT/<id>.json as a folder stopped the run at that item, naming a temporary file that did not exist."""
    write_clip(tmp_path / "q.wav")
    manifest = write_manifest(tmp_path / "m.jsonl", [item("first", refs=[]), item("blocked", refs=[])])
    (tmp_path / "out" / "blocked.json").mkdir(parents=True)
    with pytest.raises(BatchManifestError, match=r"1 item\(s\) cannot write their result: 'blocked' \(.*blocked.json "
                                                 r"is a folder\)"):
        score_batch(manifest, tmp_path / "out", **_kwargs(models))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["blocked.json"]  # "first" was not scored


def test_a_devanagari_id_with_zwj_or_zwnj_is_a_plain_id():
    # bidi controls and zero-width spaces are refused in ids (file names); ZWJ/ZWNJ spell Nepali words
    from leakloss.batch import _id_problem

    assert _id_problem("क्\u200dष-1") is None and _id_problem("र\u200c्य") is None
    assert "invisible format character" in _id_problem("x\u202enosj.exe")


@pytest.mark.parametrize("plant", ["file", "dangling", "loop"])
def test_cli_a_symlink_planted_in_out_is_replaced_never_written_through(tmp_path, models, one_process, plant):
    """res/a2.json -> victim.txt: the result overwrote the file outside the output folder (issue 43, defect 5)."""
    from leakloss.cli import app

    write_clip(tmp_path / "q.wav")
    manifest = write_manifest(tmp_path / "m.jsonl", [item("a1", refs=[]), item("a2", refs=[])])
    out, outside = tmp_path / "res", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    victim = outside / "victim.txt"
    if plant == "file":
        victim.write_text("precious")
        (out / "a2.json").symlink_to(victim)
    elif plant == "dangling":  # the result would have created a file outside the folder
        (out / "a2.json").symlink_to(victim)
    else:
        (out / "a2.json").symlink_to(out / "a2.json")
    r = CliRunner().invoke(app, ["score-batch", str(manifest), "--out", str(out), "--recognizer-a", str(models["a"]),
                                 "--recognizer-b", str(models["b"]), "--heads", str(models["heads"])])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert sorted(p.name for p in outside.iterdir()) == (["victim.txt"] if plant == "file" else [])
    if plant == "file":
        assert victim.read_text() == "precious"
    written = out / "a2.json"
    assert not written.is_symlink() and written.is_file()
    assert json.loads(written.read_text(encoding="utf-8"))["id"] == "a2"
    assert sorted(p.name for p in out.iterdir()) == ["a1.json", "a2.json"]
    # stdout is the summary, one JSON line (it was a progress bar and a Rich-printed dict)
    assert json.loads(r.stdout)["total"] == 2


def test_a_symlink_to_a_folder_where_a_result_goes_is_refused_before_any_item_is_scored(tmp_path, models):
    write_clip(tmp_path / "q.wav")
    manifest = write_manifest(tmp_path / "m.jsonl", [item("first", refs=[]), item("blocked", refs=[])])
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "blocked.json").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BatchManifestError, match=r"'blocked' \(.*blocked.json is a folder\)"):
        score_batch(manifest, tmp_path / "out", **_kwargs(models))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["blocked.json"]
    assert not list((tmp_path / "elsewhere").iterdir())


def test_relabelled_items_are_scored_again_and_a_manifest_path_spelt_otherwise_resumes(tmp_path, models):
    # a changed sentence_id / system kept the old labels (compare clustered by them); a manifest given through
    # '..' re-scored every finished item
    write_clip(tmp_path / "q.wav")
    write_clip(tmp_path / "r.wav", seed=1)
    out, kwargs = tmp_path / "out", _kwargs(models, word_check=lambda w, t: (True, "test"))
    labelled = item("x") | {"sentence_id": "ONE", "system": "s1"}
    manifest = write_manifest(tmp_path / "m.jsonl", [labelled])
    assert score_batch(manifest, out, **kwargs)["processed"] == 1
    (tmp_path / "sub").mkdir()
    assert score_batch(tmp_path / "sub" / ".." / "m.jsonl", out, **kwargs)["skipped_existing"] == 1
    write_manifest(manifest, [labelled | {"sentence_id": "S0"}])
    assert score_batch(manifest, out, **kwargs)["processed"] == 1
    assert json.loads((out / "x.json").read_text(encoding="utf-8"))["sentence_id"] == "S0"


def test_an_interrupted_summary_counts_only_what_this_run_wrote(tmp_path):
    # an earlier run's failure, not retried before the Ctrl-C, was counted as this run's
    from leakloss.batch import _count_results, _stamp

    out = tmp_path / "out"
    out.mkdir()
    stale = {"query": "q.wav", "text": TEXT, "status": "failed", "reason": "query does not exist", "words": [],
             "references": [], "reference_checks": [], "id": "old"}
    (out / "old.json").write_text(json.dumps(stale), encoding="utf-8")
    todo = [item("old"), item("new")]
    before = {d["id"]: _stamp(out / f"{d['id']}.json") for d in todo}
    summary = _count_results(todo, out, {"failures": []}, interrupted=True, before=before)
    assert summary["not_scored"] == 2 and summary["failures"] == []
    from leakloss.atomic import write_text_atomic

    write_text_atomic(out / "old.json", json.dumps(stale | {"reason": "this run's failure"}))  # rewritten now
    summary = _count_results(todo, out, {"failures": []}, interrupted=True, before=before)
    assert summary["not_scored"] == 1 and summary["failures"] == [{"id": "old", "reason": "this run's failure"}]


def test_one_audio_on_two_manifest_lines_is_said(tmp_path, capsys):
    # scored twice and counted twice by compare without a word
    path = write_manifest(tmp_path / "m.jsonl", [item("a"), item("b", query="./q.wav"), item("c", query="other.wav")])
    assert [i["id"] for i in read_batch_manifest(path)] == ["a", "b", "c"]
    err = capsys.readouterr().err
    assert "warning: manifest line 2: query './q.wav' is the audio of line 1 again" in err and "line 3" not in err
