"""Tests for leakloss.eval.listeners: scorer vs listener labels, agreement, MOS correlation, errors."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from leakloss.eval.stats import krippendorff_alpha_nominal
from leakloss.eval.listeners import ListenerDataError, listener_agreement, write_listener_report
from leakloss.schema import ResultError


def w(index: int, text: str, decision: str) -> dict:
    return {"index": index, "word": text, "start": None, "end": None, "decision": decision,
            "sites": [] if decision == "not_tested" else
            [{"kind": "deletion", "nepali": "ʌ", "hindi": None, "score": 0.5, "decision": decision,
              "references_used": 2}]}


def result(words: list[dict], status: str = "scored") -> dict:
    return {"query": "q.wav", "text": " ".join(x["word"] for x in words), "status": status,
            "words": words, "references": ["ref.wav"]} | ({} if status == "scored" else {"reason": "word check"})


RESULTS = {
    "r1": result([w(0, "आज", "not_tested"), w(1, "नेकपा", "flagged"), w(2, "र", "no_change"),
                  w(3, "अरू", "uncertain")]),
    "r2": result([w(0, "हैन", "flagged"), w(1, "बैठक", "no_change")]),
    "rq": result([w(0, "तलको", "flagged")], status="quarantined"),
    "r3": result([w(0, "र", "flagged"), w(1, "म", "no_change"), w(2, "र", "no_change")]),
}

# (word, reading, listener, label); rejected = the listener hears a Hindi leak
LABELS = [
    ("नेकपा", "r1", "L1", "rejected"), ("नेकपा", "r1", "L2", "rejected"), ("नेकपा", "r1", "L3", "accepted"),
    ("र", "r1", "L1", "accepted"), ("र", "r1", "L2", "accepted"), ("र", "r1", "L3", "rejected"),
    ("अरू", "r1", "L1", "rejected"), ("अरू", "r1", "L2", "accepted"), ("अरू", "r1", "L3", "accepted"),
    ("हैन", "r2", "L1", "rejected"), ("हैन", "r2", "L2", "accepted"),
    ("बैठक", "r2", "L1", "accepted"), ("बैठक", "r2", "L2", "accepted"),
    ("आज", "r1", "L1", "rejected"),
    ("तलको", "rq", "L1", "accepted"),
]


def write_results(folder: Path, results: dict[str, dict] = RESULTS) -> Path:
    folder.mkdir(exist_ok=True)
    for name, r in results.items():
        (folder / f"{name}.json").write_text(json.dumps(r, ensure_ascii=False), encoding="utf-8")
    return folder


def write_csv(path: Path, rows: list[tuple], header: str = "word,reading,listener,label", bom: bool = False) -> Path:
    text = header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows)
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")
    return path


def run(tmp_path: Path, rows: list[tuple] = LABELS, **kw) -> dict:
    return listener_agreement(write_csv(tmp_path / "labels.csv", rows, **kw), write_results(tmp_path / "res"))


def test_confusion_counts_and_rates(tmp_path):
    out = run(tmp_path)
    d = out["detection"]
    # judged words of scored readings: tp L1/L2 नेकपा, L1 हैन; fp L3 नेकपा, L2 हैन;
    # fn L3 र, L1 अरू (uncertain counts as not flagged); the rest tn
    assert (d["tp"], d["fp"], d["fn"], d["tn"], d["n"]) == (3, 2, 2, 6, 13)
    assert d["precision"]["estimate"] == pytest.approx(3 / 5)
    assert d["recall"]["estimate"] == pytest.approx(3 / 5)
    assert d["false_alarm_rate"]["estimate"] == pytest.approx(2 / 8)
    for key in ("precision", "recall", "false_alarm_rate"):
        assert d[key]["low"] <= d[key]["estimate"] <= d[key]["high"]
    assert (out["n_labels"], out["n_listeners"], out["n_readings"], out["n_resamples"]) == (15, 3, 3, 2000)


def test_uncertain_not_judged_and_quarantined_are_reported_separately(tmp_path):
    out = run(tmp_path)
    assert out["uncertain"]["text"] == "1 of 3 (33.3%)"  # अरू: L1 rejected
    assert out["not_judged"]["text"] == "1 of 1 (100.0%)"  # आज is not tested
    assert out["quarantined_labels"] == 1
    assert out["left_out_labels"] == {"quarantined": 1, "unscored": 0, "failed": 0}
    assert out["left_out_reasons"]["quarantined"] == {"word check": 1}


def test_bootstrap_is_over_listeners(tmp_path):
    # one listener: every resample is the same listener, a zero-width interval that measures nothing: none
    rows = [r for r in LABELS if r[2] == "L1"]
    out = run(tmp_path, rows)
    d = out["detection"]
    assert d["recall"] is None and d["listeners"] == 1 and d["note"] == "one listener: no bootstrap interval"
    assert (d["tp"], d["fn"]) == (2, 1)  # L1 alone: recall 2 of 3 (अरू missed), as a count
    from leakloss.eval.listeners import _markdown

    assert "| Recall | 0.667 [no interval: 1 listener] |" in _markdown(out)
    d3 = run(tmp_path, LABELS)["detection"]
    assert d3["recall"]["low"] < d3["recall"]["high"]


def test_alpha_is_krippendorff_over_all_labelled_words(tmp_path):
    out = run(tmp_path)
    units: dict = {}
    for word, reading, listener, label in LABELS:
        units.setdefault((reading, word), {})[listener] = label
    assert out["alpha"] == pytest.approx(krippendorff_alpha_nominal(units))
    assert out["alpha_note"] is None
    agree = [r for r in LABELS if r[2] == "L1"] + [(a, b, "L2", d) for a, b, _, d in LABELS if _ == "L1"]
    assert run(tmp_path, agree)["alpha"] == pytest.approx(1.0)


def test_alpha_undefined_is_reported_not_raised(tmp_path):
    out = run(tmp_path, [r for r in LABELS if r[2] == "L1"])  # one listener: no pairs
    assert out["alpha"] is None and "two or more coders" in out["alpha_note"]


def test_word_by_index_resolves_repeated_words(tmp_path):
    out = run(tmp_path, [("#0", "r3", "L1", "rejected"), ("#2", "r3", "L1", "accepted")])
    assert (out["detection"]["tp"], out["detection"]["tn"]) == (1, 1)


def test_header_and_cells_are_normalised(tmp_path):
    rows = [(" नेकपा ", "r1", "L1", " Rejected ")]
    out = run(tmp_path, rows, header="Word, Reading ,listener,LABEL", bom=True)
    assert out["detection"]["tp"] == 1


def test_no_judged_words_gives_a_note_not_a_crash(tmp_path):
    out = run(tmp_path, [("आज", "r1", "L1", "rejected")])
    assert out["detection"]["n"] == 0 and "no labelled word" in out["detection"]["note"]


def test_mos_spearman_against_flag_share(tmp_path):
    results = {
        "a": result([w(0, "क", "no_change"), w(1, "ख", "no_change")]),  # share 0
        "b": result([w(0, "क", "flagged"), w(1, "ख", "no_change")]),  # share 0.5
        "c": result([w(0, "क", "flagged"), w(1, "ख", "flagged")]),  # share 1
        "q": result([w(0, "क", "flagged")], status="quarantined"),  # left out
    }
    rows = [("क", "a", "L1", "accepted", 5), ("ख", "a", "L1", "accepted", 5), ("क", "a", "L2", "accepted", 4),
            ("क", "b", "L1", "rejected", 3), ("क", "c", "L1", "rejected", 1), ("क", "c", "L2", "rejected", ""),
            ("क", "q", "L1", "rejected", 5)]
    labels = write_csv(tmp_path / "l.csv", rows, header="word,reading,listener,label,mos")
    mos = listener_agreement(labels, write_results(tmp_path / "res", results))["mos"]
    assert mos["rho"] == pytest.approx(-1.0) and mos["readings"] == ["a", "b", "c"]
    assert run(tmp_path, LABELS)["mos"] is None  # no mos column


def test_mos_undefined_is_a_note(tmp_path):
    rows = [("नेकपा", "r1", "L1", "rejected", 3)]
    labels = write_csv(tmp_path / "l.csv", rows, header="word,reading,listener,label,mos")
    mos = listener_agreement(labels, write_results(tmp_path / "res"))["mos"]
    assert mos["rho"] is None and "at least 2 pairs" in mos["note"]


@pytest.mark.parametrize(
    "rows, header, message",
    [
        ([("नेकपा", "r1", "L1")], "word,reading,listener", "lacks column.*label"),
        ([("नेकपा", "r1", "L1", "leak")], None, "label must be accepted or rejected, got 'leak'"),
        ([("नेकपा", "r1", "", "rejected")], None, "'listener' is empty"),
        ([("नेकपा", "r9", "L1", "rejected")], None, "no result .* for reading.*r9"),
        ([("पानी", "r1", "L1", "rejected")], None, "'पानी' is not in the reading"),
        ([("र", "r3", "L1", "rejected")], None, "occurs 2 times.*#0, #2"),
        ([("#7", "r3", "L1", "rejected")], None, "no word with index 7"),
        ([("#²", "r3", "L1", "rejected")], None, "word '#²' is not in the reading"),  # was int('²'): ValueError
        ([("नेकपा", "r1", "L1", "rejected")] * 2, None, "already labelled"),
        ([("नेकपा", "r1", "L1", "rejected", "6")], "word,reading,listener,label,mos", "mos must be between 1 and 5"),
        ([("नेकपा", "r1", "L1", "rejected", "good")], "word,reading,listener,label,mos", "mos must be a number"),
        ([("नेकपा", "r1", "L1", "rejected", "2"), ("र", "r1", "L1", "accepted", "4")],
         "word,reading,listener,label,mos", "mos 4 here but 2"),
        ([], None, "no labels"),
        ([("नेकपा", "r1", "L1", "rejected", "EXTRA")], None, "line 2: 5 fields, the header has 4"),  # dropped
        ([("नेकपा", "r1", "L1", "rejected", "accepted")], "word,reading,listener,label,label",
         "label appear more than once"),  # the last label column was used silently
        ([("नेकपा", "../res/r1", "L1", "rejected")], None, "not a path"),  # read results outside the folder
        ([("नेकपा", "/tmp/r1", "L1", "rejected")], None, "not a path"),
    ],
)
def test_bad_labels_are_clear_errors(tmp_path, rows, header, message):
    kw = {"header": header} if header else {}
    with pytest.raises(ListenerDataError, match=message):
        run(tmp_path, rows, **kw)


def test_a_reading_is_found_whatever_unicode_form_its_file_name_has(tmp_path):
    """NFC rewrites क़ (U+0958) as क + nukta: a result saved under the precomposed name was not found."""
    name = "\u0958लम"
    write_results(tmp_path / "res", {name: RESULTS["r1"]})
    labels = write_csv(tmp_path / "labels.csv", [("नेकपा", name, "L1", "rejected")])
    out = listener_agreement(labels, tmp_path / "res")
    assert out["n_labels"] == 1 and out["n_readings"] == 1


def test_error_names_the_line(tmp_path):
    rows = [("नेकपा", "r1", "L1", "rejected"), ("र", "r1", "L1", "maybe")]
    with pytest.raises(ListenerDataError, match="line 3"):
        run(tmp_path, rows)


def test_a_field_beyond_the_csv_limit_is_a_listener_error(tmp_path):
    res = write_results(tmp_path / "res")
    big = tmp_path / "big.csv"
    big.write_text("word,reading,listener,label\nनेकपा,r1,L1," + "x" * 200_000 + "\n", encoding="utf-8")
    with pytest.raises(ListenerDataError, match=r"line \d+: not readable CSV \(field larger than field limit"):
        listener_agreement(big, res)


def test_missing_or_empty_files(tmp_path):
    res = write_results(tmp_path / "res")
    with pytest.raises(ListenerDataError, match="does not exist"):
        listener_agreement(tmp_path / "none.csv", res)
    (tmp_path / "empty.csv").write_text("", encoding="utf-8")
    with pytest.raises(ListenerDataError, match="is empty"):
        listener_agreement(tmp_path / "empty.csv", res)
    with pytest.raises(ListenerDataError, match="results folder"):
        listener_agreement(write_csv(tmp_path / "l.csv", LABELS), tmp_path / "nofolder")


def test_malformed_result_file_is_a_result_error(tmp_path):
    res = write_results(tmp_path / "res")
    (res / "r1.json").write_text('{"query": 1}', encoding="utf-8")
    with pytest.raises(ResultError, match=r"r1\.json"):
        listener_agreement(write_csv(tmp_path / "l.csv", LABELS), res)


def test_write_listener_report(tmp_path):
    out = run(tmp_path)
    paths = write_listener_report(out, tmp_path / "report")
    assert json.loads(paths["json"].read_text(encoding="utf-8")) == out
    md = paths["md"].read_text(encoding="utf-8")
    p = out["detection"]["precision"]
    assert f"| Precision | {p['estimate']:.3f} [{p['low']:.3f}–{p['high']:.3f}] | 3 of 5 flags" in md
    assert "| False-alarm rate |" in md and "2 of 8 accepted words flagged" in md
    assert "listeners rejected 1 of 3 (33.3%)" in md
    assert f"{out['alpha']:.3f}" in md
    assert sorted(x.name for x in paths["md"].parent.iterdir()) == ["listeners.json", "listeners.md"]
    with pytest.raises(ValueError, match="listener_agreement"):
        write_listener_report({"detection": {}}, tmp_path / "x")


def other(status: str, reason: str, words: list[dict]) -> dict:
    r = result(words, status=status)
    r["reason"] = reason
    return r


MIXED = {
    **RESULTS,
    "ru1": other("unscored", "every reference rejected", [w(0, "नेकपा", "unscored")]),
    "ru2": other("unscored", "every reference rejected", [w(0, "हैन", "unscored")]),
    "rf": other("failed", "audio unreadable", []),  # a failed reading holds no words
}
MIXED_LABELS = [("नेकपा", "r1", "L1", "rejected"), ("नेकपा", "ru1", "L1", "rejected"),
                ("हैन", "ru2", "L1", "accepted"), ("नेकपा", "rf", "L1", "rejected"),
                ("नेकपा", "rf", "L2", "rejected"), ("तलको", "rq", "L1", "accepted")]


def run_mixed(tmp_path: Path, rows: list[tuple] = MIXED_LABELS) -> dict:
    return listener_agreement(write_csv(tmp_path / "labels.csv", rows), write_results(tmp_path / "res", MIXED))


def test_left_out_labels_are_counted_by_the_reading_status(tmp_path):
    out = run_mixed(tmp_path)
    assert out["left_out_labels"] == {"quarantined": 1, "unscored": 2, "failed": 2}
    assert out["quarantined_labels"] == 1  # only labels on quarantined readings
    assert out["left_out_reasons"] == {"quarantined": {"word check": 1},
                                       "unscored": {"every reference rejected": 2},
                                       "failed": {"audio unreadable": 2}}
    assert out["detection"]["n"] == 1 and out["n_labels"] == 6 and out["n_readings"] == 5
    md = write_listener_report(out, tmp_path / "report")["md"].read_text(encoding="utf-8")
    assert "- Labels on quarantined readings, left out: 1 (word check: 1)." in md
    assert "- Labels on unscored readings, left out: 2 (every reference rejected: 2)." in md
    assert "- Labels on failed readings, left out: 2 (audio unreadable: 2)." in md
    # each left-out reading named, not only counted by reason
    assert out["left_out_readings"] == {"quarantined": ["rq"], "unscored": ["ru1", "ru2"], "failed": ["rf"]}
    assert "  Readings: ru1, ru2." in md and "  Readings: rf." in md


def test_unscored_readings_are_not_called_quarantined(tmp_path):
    out = run_mixed(tmp_path, [("नेकपा", "ru1", "L1", "rejected"), ("हैन", "ru2", "L1", "accepted")])
    assert out["quarantined_labels"] == 0 and out["left_out_labels"]["unscored"] == 2
    md = write_listener_report(out, tmp_path / "report")["md"].read_text(encoding="utf-8")
    assert "quarantined readings" not in md
    assert "- Labels on unscored readings, left out: 2" in md


def test_label_on_a_failed_reading_is_left_out_not_an_error(tmp_path):
    out = run_mixed(tmp_path, [("नेकपा", "rf", "L1", "rejected"), ("#3", "rf", "L2", "accepted")])
    assert out["left_out_labels"] == {"quarantined": 0, "unscored": 0, "failed": 2}
    assert out["detection"]["n"] == 0
    # still one label per listener per word
    with pytest.raises(ListenerDataError, match="already labelled"):
        run_mixed(tmp_path, [("नेकपा", "rf", "L1", "rejected")] * 2)
    # a failed reading that kept its words: labels still resolve (by text or index) and are left out
    kept = {**MIXED, "rf": other("failed", "audio unreadable", [w(0, "नेकपा", "unscored")])}
    res2 = write_results(tmp_path / "res2", kept)
    labels = write_csv(tmp_path / "k.csv", [("नेकपा", "rf", "L1", "rejected"),
                                            ("#0", "rf", "L2", "rejected")])
    assert listener_agreement(labels, res2)["left_out_labels"]["failed"] == 2
    same = write_csv(tmp_path / "s.csv", [("नेकपा", "rf", "L1", "rejected"), ("#0", "rf", "L1", "accepted")])
    with pytest.raises(ListenerDataError, match="already labelled"):  # the text and #0 are one word
        listener_agreement(same, res2)


def test_no_left_out_labels_is_said(tmp_path):
    md = write_listener_report(run(tmp_path, LABELS[:3]), tmp_path / "report")["md"].read_text(encoding="utf-8")
    assert "left out: 0." in md


@pytest.mark.parametrize("where, relation", [("{res}", "is"), ("{res}/sub", "is inside"), ("{tmp}", "contains")])
def test_write_listener_report_refuses_the_results_folder(tmp_path, where, relation):
    from leakloss.eval.compare import OutputFolderError

    out = run(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    target = Path(where.format(res=tmp_path / "res", tmp=tmp_path))
    with pytest.raises(OutputFolderError, match=f"output folder .* {relation} the results folder"):
        write_listener_report(out, target)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written


def test_write_listener_report_never_writes_over_the_labels(tmp_path):
    from leakloss.eval.compare import OutputFolderError

    (tmp_path / "rep").mkdir()
    labels = write_csv(tmp_path / "rep" / "listeners.md", LABELS)
    before = labels.read_bytes()
    out = listener_agreement(labels, write_results(tmp_path / "res"))
    with pytest.raises(OutputFolderError, match="labels file"):
        write_listener_report(out, tmp_path / "rep")
    assert labels.read_bytes() == before and sorted(p.name for p in (tmp_path / "rep").iterdir()) == ["listeners.md"]


def test_cli_listeners_refuses_its_results_folder_as_out(tmp_path):
    from typer.testing import CliRunner

    from leakloss.cli import app

    res = write_results(tmp_path / "res")
    labels = write_csv(tmp_path / "labels.csv", LABELS)
    r = CliRunner().invoke(app, ["listeners", str(labels), str(res), "--out", str(res)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert "error:" in r.stderr and "is the results folder" in r.stderr and "Traceback" not in r.output
    assert sorted(p.name for p in res.iterdir()) == sorted(f"{n}.json" for n in RESULTS)


def test_result_files_that_are_one_name_in_two_unicode_forms_are_an_error(tmp_path):
    """Both files stood for one reading: one was silently dropped and its labels scored against the other."""
    excluded, composed = "\u095bाम", "\u091c\u093cाम"  # ज़ as U+095B (NFC decomposes it) and as ज + nukta
    assert unicodedata.normalize("NFC", excluded) == composed
    res = write_results(tmp_path / "res", {excluded: RESULTS["r2"], composed: RESULTS["r3"]})
    labels = [("हैन", excluded, "L1", "rejected"), ("र", composed, "L1", "accepted")]
    with pytest.raises(ListenerDataError, match="same reading name in another Unicode form"):
        listener_agreement(write_csv(tmp_path / "labels.csv", labels), res)


def test_a_folder_in_the_way_of_the_markdown_leaves_no_new_json(tmp_path):
    # listeners.json was written, then listeners.md failed: a new json beside an old report
    out = run(tmp_path)
    (tmp_path / "report" / "listeners.md").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        write_listener_report(out, tmp_path / "report")
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["listeners.md"]


def test_bootstrap_interval_does_not_depend_on_the_row_order(tmp_path):
    # the same labels sorted otherwise in a spreadsheet gave another interval: clusters went in row order
    import random

    rng = random.Random(1)
    words = [("नेकपा", "r1"), ("र", "r1"), ("अरू", "r1"), ("हैन", "r2"), ("बैठक", "r2")]
    rows = [(wd, rd, f"L{i}", rng.choice(["accepted", "rejected"])) for i in range(6) for wd, rd in words]
    res = write_results(tmp_path / "res")
    a = listener_agreement(write_csv(tmp_path / "a.csv", rows), res)["detection"]
    b = listener_agreement(write_csv(tmp_path / "b.csv", rows[::-1]), res)["detection"]
    assert a["listeners"] == 6 and a == b
