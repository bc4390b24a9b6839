"""Tests for leakloss.eval.compare: key-word flag rates per system, intervals and written files."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from leakloss.eval.compare import compare_results, format_rate, key_units, write_comparison
from leakloss.eval.stats import rate_with_interval, wilson_interval
from leakloss.schema import ResultError


def word(index: int, text: str, decision: str, *, key: bool | None = None, kinds: tuple[str, ...] = ("deletion",)) -> dict:
    w = {"index": index, "word": text, "start": 0.1 * index, "end": 0.1 * index + 0.1, "decision": decision,
         "sites": [] if decision == "not_tested" else
         [{"kind": k, "nepali": "ʌ", "hindi": None, "score": 0.9 if decision == "flagged" else 0.1,
           "decision": decision, "references_used": 2} for k in kinds]}
    if key is not None:
        w["key"] = key
    return w


def reading(key_decision: str, sentence: str, *, status: str = "scored", key_word: str = "नेकपा",
            kinds: tuple[str, ...] = ("deletion",), sentence_id: bool = True) -> dict:
    """A reading whose key word has ``key_decision``; a second, non-key word is always flagged."""
    r = {"query": f"{sentence}.wav", "text": f"आज {key_word} आए {sentence}", "status": status,
         "words": [word(0, "आज", "not_tested"), word(1, key_word, key_decision, key=True, kinds=kinds),
                   word(2, "आए", "flagged", key=False)],
         "references": ["ref.wav"]}
    if sentence_id:
        r["sentence_id"] = sentence
    if status == "quarantined":
        r["reason"] = "word check failed"
    return r


def write_dir(folder: Path, results: list[dict]) -> Path:
    folder.mkdir(parents=True)
    for i, r in enumerate(results):
        (folder / f"r{i:03d}.json").write_text(json.dumps(r, ensure_ascii=False), encoding="utf-8")
    return folder


def test_key_units_prefers_marked_key_words_else_tested_words():
    units, marked = key_units(reading("flagged", "s1"))
    assert marked and [w["word"] for w in units] == ["नेकपा"]
    r = reading("flagged", "s1")
    for w in r["words"]:
        w.pop("key", None)
    units, marked = key_units(r)
    assert not marked and [w["word"] for w in units] == ["नेकपा", "आए"]  # not_tested आज left out


def test_counts_key_words_of_scored_readings_only(tmp_path):
    results = (
        [reading("flagged", f"s{i % 5}") for i in range(4)]
        + [reading("no_change", f"s{i % 5}") for i in range(4, 9)]
        + [reading("uncertain", "s0"), reading("unscored", "s1")]
        + [reading("flagged", "s2", status="quarantined")] * 2
    )
    out = compare_results({"swar": write_dir(tmp_path / "swar", results)})
    s = out["systems"]["swar"]
    assert (s["readings"], s["scored"], s["quarantined"]) == (13, 11, 2)
    k = s["key_flagged"]
    # the always-flagged non-key word, the quarantined flags and the unscored key word do not count
    assert (k["count"], k["total"], k["text"]) == (4, 10, "4 of 10 (40.0%)")
    w = wilson_interval(4, 10)
    assert (k["wilson"]["low"], k["wilson"]["high"]) == (w.low, w.high)
    assert k["bootstrap"]["low"] <= k["rate"] <= k["bootstrap"]["high"]
    assert s["decisions"] == {"flagged": 4, "uncertain": 1, "no_change": 5, "unscored": 1, "not_tested": 0}
    assert s["quarantine_reasons"] == {"word check failed": 2}
    assert s["sentences"] == 5 and s["readings_without_key_word"] == []


def test_bootstrap_resamples_sentences_not_readings(tmp_path):
    flags = ["flagged"] * 3 + ["no_change"] * 5
    # same 8 readings: all from one sentence, or each its own sentence
    one = compare_results({"a": write_dir(tmp_path / "a", [reading(d, "s1") for d in flags])})
    many = compare_results({"a": write_dir(tmp_path / "b", [reading(d, f"s{i}") for i, d in enumerate(flags)])})
    b_one = one["systems"]["a"]["key_flagged"]["bootstrap"]
    b_many = many["systems"]["a"]["key_flagged"]["bootstrap"]
    assert b_one is None  # one cluster resamples to itself: no interval (it was a zero-width [37.5–37.5])
    expected = rate_with_interval([d == "flagged" for d in flags], [f"s{i}" for i in range(8)])["bootstrap"]
    assert (b_many["low"], b_many["high"]) == (expected.low, expected.high)


def test_sentence_falls_back_to_text(tmp_path):
    rs = [reading(d, "s1", sentence_id=False) for d in ("flagged", "no_change")]
    out = compare_results({"a": write_dir(tmp_path / "a", rs)})
    assert out["systems"]["a"]["sentences"] == 1


def test_reading_without_key_word_counts_its_tested_words(tmp_path):
    r = reading("no_change", "s1")
    for w in r["words"]:
        w.pop("key", None)
    out = compare_results({"a": write_dir(tmp_path / "a", [r, reading("flagged", "s2")])})
    s = out["systems"]["a"]
    assert s["key_flagged"]["text"] == "2 of 3 (66.7%)"  # r gives नेकपा (no change) and आए (flagged)
    assert s["readings_without_key_word"] == ["r000.json"]


def test_by_kind_and_by_word(tmp_path):
    rs = [
        reading("flagged", "s1", kinds=("deletion",)),
        reading("no_change", "s2", kinds=("deletion",)),
        reading("flagged", "s3", kinds=("quality",), key_word="हैन"),
        reading("no_change", "s4", kinds=("deletion", "quality"), key_word="हैन"),
    ]
    s = compare_results({"a": write_dir(tmp_path / "a", rs)})["systems"]["a"]
    assert s["by_kind"]["deletion"]["text"] == "1 of 3 (33.3%)"
    assert s["by_kind"]["quality"]["text"] == "1 of 2 (50.0%)"
    assert s["by_word"]["नेकपा"]["text"] == "1 of 2 (50.0%)"
    assert s["by_word"]["हैन"]["text"] == "1 of 2 (50.0%)"
    assert s["by_word"]["हैन"]["bootstrap"] is None and s["by_word"]["हैन"]["wilson"] is not None


def test_format_rate_matches_the_seed():
    flags = [True] * 36 + [False] * 64
    r = rate_with_interval(flags)
    as_dict = {**r, "wilson": {"low": r["wilson"].low, "high": r["wilson"].high}}
    assert format_rate(as_dict) == "36 of 100 (36.0%) [27.3–45.8]"
    assert format_rate({"text": "0 of 0 (no data)", "wilson": None}) == "0 of 0 (no data)"


def test_all_quarantined_system_has_no_rate_but_is_reported(tmp_path):
    out = compare_results({
        "swar": write_dir(tmp_path / "s", [reading("flagged", "s1")]),
        "broken": write_dir(tmp_path / "b", [reading("flagged", "s1", status="quarantined")]),
    })
    b = out["systems"]["broken"]
    assert b["key_flagged"]["text"] == "0 of 0 (no data)" and b["key_flagged"]["wilson"] is None
    paths = write_comparison(out, tmp_path / "out")
    assert "| broken | 0 of 0 (no data) | — |" in paths["md"].read_text(encoding="utf-8")


def test_system_names_are_plain_text_in_the_chart(tmp_path):
    """A name like "x$\\bad{$" was parsed as mathtext: a traceback after json and md were already written."""
    out = compare_results({"x$\\bad{$": write_dir(tmp_path / "s", [reading("flagged", "s1")])})
    paths = write_comparison(out, tmp_path / "out")
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"


def test_a_failed_chart_writes_no_file(tmp_path, monkeypatch):
    import leakloss.eval.compare as compare

    out = compare_results({"swar": write_dir(tmp_path / "s", [reading("flagged", "s1")])})

    def broken(result):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(compare, "_plot_png", broken)
    with pytest.raises(RuntimeError, match="no fonts"):
        write_comparison(out, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # the folder it would have made is not left behind, empty
    (tmp_path / "mine").mkdir()
    with pytest.raises(RuntimeError, match="no fonts"):
        write_comparison(out, tmp_path / "mine")
    assert list((tmp_path / "mine").iterdir()) == []  # a folder that was there stays


def test_a_write_that_fails_after_making_the_folders_removes_the_ones_it_made(tmp_path, monkeypatch):
    import leakloss.eval.compare as compare

    out = compare_results({"swar": write_dir(tmp_path / "s", [reading("flagged", "s1")])})

    def full_disk(files):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(compare, "write_files_atomic", full_disk)
    with pytest.raises(OSError, match="No space"):
        write_comparison(out, tmp_path / "new" / "deeper" / "out")
    assert not (tmp_path / "new").exists()


def test_write_comparison_files(tmp_path):
    rs = [reading("flagged", f"s{i}") for i in range(3)] + [reading("no_change", f"s{i}") for i in range(3, 10)]
    out = compare_results({"swar": write_dir(tmp_path / "swar", rs),
                           "teacher": write_dir(tmp_path / "teacher", [reading("no_change", "s1")] * 4)})
    paths = write_comparison(out, tmp_path / "run" / "cmp")
    assert json.loads(paths["json"].read_text(encoding="utf-8")) == out
    md = paths["md"].read_text(encoding="utf-8")
    w = wilson_interval(3, 10)
    assert f"| swar | 3 of 10 (30.0%) [{100 * w.low:.1f}–{100 * w.high:.1f}] |" in md
    assert "| teacher | 0 of 4 (0.0%) [0.0–" in md
    assert "नेकपा" in md
    png = paths["png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5_000
    assert sorted(p.name for p in paths["md"].parent.iterdir()) == ["comparison.json", "comparison.md", "comparison.png"]
    mask = os.umask(0)
    os.umask(mask)
    # not the private 0600 of a temporary file: others can read a run's results
    assert {stat.S_IMODE(p.stat().st_mode) for p in paths.values()} == {0o666 & ~mask}


def test_pipe_in_names_does_not_break_the_table(tmp_path):
    out = compare_results({"a|b": write_dir(tmp_path / "a", [reading("flagged", "s1")])})
    md = write_comparison(out, tmp_path / "o")["md"].read_text(encoding="utf-8")
    assert "| a\\|b | 1 of 1" in md


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: {}, "at least one system"),
        (lambda p: {"a": p / "missing"}, "does not exist"),
        (lambda p: {"a": (p / "empty").mkdir() or p / "empty"}, r"no \*\.json"),
        (lambda p: {"": write_dir(p / "x", [reading("flagged", "s1")])}, "non-empty strings"),
    ],
)
def test_bad_inputs_are_clear_errors(tmp_path, setup, message):
    with pytest.raises(ValueError, match=message):
        compare_results(setup(tmp_path))


def test_malformed_result_file_is_named(tmp_path):
    folder = write_dir(tmp_path / "a", [reading("flagged", "s1")])
    (folder / "zz_bad.json").write_text('{"query": "x"}', encoding="utf-8")
    with pytest.raises(ResultError, match=r"zz_bad\.json.*missing required field 'text'"):
        compare_results({"a": folder})


def test_write_comparison_rejects_other_dicts(tmp_path):
    with pytest.raises(ValueError, match="compare_results"):
        write_comparison({"systems": {}}, tmp_path)


def other_status(status: str, sentence: str, reason: str) -> dict:
    """A reading the scorer did not score; a failed one holds no words (unreadable audio)."""
    r = reading("unscored", sentence)
    r["status"], r["reason"] = status, reason
    if status == "failed":
        r["words"] = []
    return r


def mixed_statuses() -> list[dict]:
    # 1 scored (its key word unscored), 1 quarantined, 2 unscored, 4 failed readings
    return ([reading("unscored", "s1"), reading("flagged", "s2", status="quarantined")]
            + [other_status("unscored", f"u{i}", "every reference rejected") for i in range(2)]
            + [other_status("failed", f"f{i}", "audio unreadable") for i in range(4)])


def test_every_reading_status_is_counted_in_the_summary(tmp_path):
    s = compare_results({"bo2": write_dir(tmp_path / "bo2", mixed_statuses())})["systems"]["bo2"]
    assert (s["readings"], s["scored"], s["quarantined"], s["unscored"], s["failed"]) == (8, 1, 1, 2, 4)
    assert s["statuses"] == {"scored": 1, "quarantined": 1, "unscored": 2, "failed": 4}
    assert s["reasons"] == {"quarantined": {"word check failed": 1},
                            "unscored": {"every reference rejected": 2}, "failed": {"audio unreadable": 4}}
    assert s["quarantine_reasons"] == {"word check failed": 1}
    assert s["decisions"]["unscored"] == 1  # words: the scored reading's one key word


def test_report_shows_readings_of_every_status_apart_from_words(tmp_path):
    out = compare_results({"bo2": write_dir(tmp_path / "bo2", mixed_statuses()),
                           "ok": write_dir(tmp_path / "ok", [reading("flagged", "s1")])})
    md = write_comparison(out, tmp_path / "out")["md"].read_text(encoding="utf-8")
    # word columns say they count words; reading counts have their own table, one column per status
    assert "| System | Key words flagged | Sentence bootstrap | Uncertain words | Unscored words | Not-tested words |" in md
    assert "| bo2 | 0 of 0 (no data) | — | 0 | 1 | 0 |" in md  # its one key word is unscored: beside the rate, not in it
    assert "| System | Readings | Scored | Quarantined | Unscored | Failed | References |" in md
    assert "| bo2 | 8 | 1 | 1 | 2 | 4 | given 8 |" in md
    assert "| ok | 1 | 1 | 0 | 0 | 0 | given 1 |" in md
    assert "Unscored (2 readings, left out): every reference rejected (2)" in md
    assert "Failed (4 readings, left out): audio unreadable (4)" in md
    assert "Quarantined (1 reading, left out): word check failed (1)" in md


def test_what_decided_the_sites_is_counted_and_a_mix_is_said(tmp_path):
    # a reference-free system sat beside a reference-scored one without a word (README: "labelled so in every page")
    free = [reading("flagged", "s1") | {"reference_origin": {"origin": "reference_free", "detail": "rawconv"},
                                        "references": []}]
    synthesised = [reading("no_change", "s2") | {"reference_origin": {"origin": "synthesised", "detail": "teacher"}}]
    given = write_dir(tmp_path / "given", [reading("flagged", "s1")])
    out = compare_results({"given": given, "free": write_dir(tmp_path / "free", free)})
    assert out["systems"]["free"]["reference_origins"] == {"reference_free": 1}
    md = write_comparison(out, tmp_path / "o1")["md"].read_text(encoding="utf-8")
    assert "| free | 1 | 1 | 0 | 0 | 0 | reference-free 1 |" in md
    assert "**Not comparable as they stand:** the systems were scored against different kinds of reference" in md
    both = write_dir(tmp_path / "both", free + synthesised)
    md = write_comparison(compare_results({"both": both}), tmp_path / "o2")["md"].read_text(encoding="utf-8")
    assert "| both | 2 | 2 | 0 | 0 | 0 | synthesised 1, reference-free 1 |" in md and "both mixes readings" in md
    md = write_comparison(compare_results({"a": given, "b": write_dir(tmp_path / "b", [reading("flagged", "s3")])}),
                          tmp_path / "o3")["md"].read_text(encoding="utf-8")
    assert "Not comparable" not in md


def test_scored_reading_with_nothing_to_count_is_named(tmp_path):
    empty = reading("no_change", "s1")
    empty["words"] = [word(0, "आज", "not_tested")]
    out = compare_results({"a": write_dir(tmp_path / "a", [reading("flagged", "s2"), empty])})
    assert out["systems"]["a"]["readings_without_counted_word"] == ["r001.json"]
    md = write_comparison(out, tmp_path / "out")["md"].read_text(encoding="utf-8")
    assert "1 scored reading gave no word to count (no key word or tested word the scorer judged): r001.json" in md


@pytest.mark.parametrize("where, relation", [("{res}", "is"), ("{res}/sub", "is inside"), ("{tmp}", "contains")])
def test_write_comparison_refuses_a_results_folder(tmp_path, monkeypatch, where, relation):
    from leakloss.eval.compare import OutputFolderError

    res = write_dir(tmp_path / "bo3", [reading("flagged", "s1")])
    out = compare_results({"bo3": res})
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    target = Path(where.format(res=res, tmp=tmp_path))
    with pytest.raises(OutputFolderError, match=f"output folder .* {relation} the results folder of system 'bo3'"):
        write_comparison(out, target)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
    # the same by a relative path
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputFolderError):
        write_comparison(compare_results({"bo3": Path("bo3")}), Path(where.format(res="bo3", tmp=".")))
    assert issubclass(OutputFolderError, OSError) and issubclass(OutputFolderError, ValueError)


def test_cli_compare_refuses_its_results_folder_as_out(tmp_path):
    from typer.testing import CliRunner

    from leakloss.cli import app

    res = write_dir(tmp_path / "bo3", [reading("flagged", "s1")])
    r = CliRunner().invoke(app, ["compare", str(res), "--out", str(res)])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    assert "error:" in r.stderr and "is the results folder of system 'bo3'" in r.stderr
    assert "Traceback" not in r.output
    assert sorted(p.name for p in res.iterdir()) == ["r000.json"]
    # the folder still compares
    assert CliRunner().invoke(app, ["compare", str(res), "--out", str(tmp_path / "cmp")]).exit_code == 0


def test_unjudged_key_words_are_reported_beside_the_rate_not_in_it(tmp_path):
    """A not-tested or unscored key word counted as "not flagged" lowered the rate (schema.TESTED is the
    denominator of every flag rate)."""
    r = reading("flagged", "s1")
    r["words"].append(word(3, "घर", "not_tested", key=True))
    s = compare_results({"a": write_dir(tmp_path / "a", [r, reading("unscored", "s2")])})["systems"]["a"]
    assert s["key_flagged"]["text"] == "1 of 1 (100.0%)"
    assert (s["decisions"]["not_tested"], s["decisions"]["unscored"]) == (1, 1)
    md = write_comparison({"systems": {"a": s}, "n_resamples": 2000, "seed": 0}, tmp_path / "out")["md"]
    assert "| a | 1 of 1 (100.0%) [20.7–100.0] | — | 0 | 1 | 1 |" in md.read_text(encoding="utf-8")


def test_words_and_sentences_are_compared_in_nfc(tmp_path):
    nfc, nfd = "\u0929ाम", "\u0928\u093cाम"  # ऩ precomposed, and न + nukta
    a, b = reading("flagged", "s1", key_word=nfc, sentence_id=False), reading("no_change", "s1", key_word=nfd,
                                                                             sentence_id=False)
    assert a["text"] != b["text"]  # the same sentence, spelt in the other form: one cluster, one word
    s = compare_results({"a": write_dir(tmp_path / "a", [a, b])})["systems"]["a"]
    assert list(s["by_word"]) == [nfc]  # NFC composes न + nukta into ऩ
    assert next(iter(s["by_word"].values()))["text"] == "1 of 2 (50.0%)" and s["sentences"] == 1


def test_not_tested_words_of_readings_without_key_words_are_counted_beside_the_rate(tmp_path):
    """score/score-batch results mark no key word: the not-tested column was 0 by construction."""
    results = []
    for i in range(3):
        r = reading("flagged", f"s{i}")
        for w in r["words"]:
            w.pop("key", None)
        results.append(r)
    s = compare_results({"a": write_dir(tmp_path / "a", results)})["systems"]["a"]
    assert s["key_flagged"]["text"] == "6 of 6 (100.0%)"  # नेकपा and आए of each reading; आज is not tested
    assert s["decisions"]["not_tested"] == 3


def test_plot_labels_never_overlap_the_title(tmp_path):
    """A system flagged on (nearly) every key word has its whisker at 100%: the count label above it sat on the
    title (the demo's Hindi base, 17 of 18)."""
    from leakloss.eval.compare import _plot_figure

    folders = {"teacher": write_dir(tmp_path / "t", [reading("no_change", f"s{i}") for i in range(18)]),
               "Hindi base": write_dir(tmp_path / "h", [reading("flagged", f"s{i}") for i in range(17)]
                                       + [reading("no_change", "s17")]),
               "all": write_dir(tmp_path / "a", [reading("flagged", f"s{i}") for i in range(18)])}
    fig = _plot_figure(compare_results(folders))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    title = ax.title.get_window_extent(renderer)
    labels = [t for t in ax.texts if " of " in t.get_text()]
    assert len(labels) == 3
    figure_box = fig.bbox
    for label in labels:
        box = label.get_window_extent(renderer)
        assert not box.overlaps(title), label.get_text()
        assert figure_box.contains(box.x0, box.y0) and figure_box.contains(box.x1, box.y1), label.get_text()


def test_html_in_names_words_and_reasons_is_plain_text_in_the_markdown(tmp_path):
    """comparison.md carried raw HTML from a system name or a word: '|' was escaped, '<' and '>' were not
    (issue 43, defect 11)."""
    evil = "<script>alert(1)</script>"
    quarantined = reading("flagged", "s2", status="quarantined")
    quarantined["reason"] = "<img src=x onerror=alert(2)>"
    out = compare_results({evil: write_dir(tmp_path / "res", [reading("flagged", "s1", key_word=evil + "नेकपा"),
                                                              quarantined])})
    md = write_comparison(out, tmp_path / "o")["md"].read_text(encoding="utf-8")
    assert "<" not in md and ">" not in md
    assert "| &lt;script&gt;alert(1)&lt;/script&gt; | 1 of 1" in md and "&lt;img src=x onerror=alert(2)&gt;" in md
    from leakloss.eval.compare import markdown_text

    assert markdown_text("a|b<c>&d\r\ne") == "a\\|b&lt;c&gt;&amp;d  e"


@pytest.mark.parametrize("plant", ["file", "dangling", "loop"])
def test_cli_compare_replaces_a_symlink_planted_in_out_never_writes_through(tmp_path, plant):
    """comparison.md -> victim2.txt: the comparison overwrote a file outside the output folder (issue 43, defect 5)."""
    from typer.testing import CliRunner

    from leakloss.cli import app

    res = write_dir(tmp_path / "res", [reading("flagged", "s1")])
    out, outside = tmp_path / "cmp", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    victim = outside / "victim2.txt"
    if plant == "file":
        victim.write_text("precious")
    for name in ("comparison.md", "comparison.json", "comparison.png"):
        (out / name).symlink_to(out / name if plant == "loop" else victim)
    r = CliRunner().invoke(app, ["compare", f"sys={res}", "--out", str(out)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert sorted(p.name for p in outside.iterdir()) == (["victim2.txt"] if plant == "file" else [])
    if plant == "file":
        assert victim.read_text() == "precious"
    for name in ("comparison.md", "comparison.json", "comparison.png"):
        assert not (out / name).is_symlink() and (out / name).is_file()
    assert "| sys | 1 of 1" in (out / "comparison.md").read_text(encoding="utf-8")


def test_a_folder_in_the_way_of_the_chart_leaves_no_new_json_or_markdown(tmp_path):
    # the json and md were written, then the png failed: new numbers beside an old chart
    out = compare_results({"swar": write_dir(tmp_path / "s", [reading("flagged", "s1")])})
    (tmp_path / "out" / "comparison.png").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        write_comparison(out, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["comparison.png"]


def test_systems_or_readings_scored_by_different_scorers_are_said_not_comparable(tmp_path):
    # other heads or thresholds flag at other rates: two systems scored so sat side by side without a word
    a = [reading("flagged", f"s{i}") | {"scorer": "heads-a"} for i in range(2)]
    b = [reading("flagged", f"s{i}") | {"scorer": "heads-b"} for i in range(2)]
    out = compare_results({"a": write_dir(tmp_path / "a", a), "b": write_dir(tmp_path / "b", b)})
    assert out["systems"]["a"]["scorers"] == {"heads-a": 2}
    md = write_comparison(out, tmp_path / "o1")["md"].read_text(encoding="utf-8")
    assert "**Not comparable as they stand:** the systems were scored by different scorers" in md
    # within one system (a results folder holding an earlier run's results)
    both = write_dir(tmp_path / "both", a + [reading("no_change", "s3") | {"scorer": "heads-b"}])
    md = write_comparison(compare_results({"both": both}), tmp_path / "o2")["md"].read_text(encoding="utf-8")
    assert "both mixes readings scored by different scorers" in md
    # one scorer, or results that record none (older files): nothing to say
    same = write_dir(tmp_path / "same", [reading("flagged", "s4") | {"scorer": "heads-a"}, reading("flagged", "s5")])
    md = write_comparison(compare_results({"a": tmp_path / "a", "same": same}), tmp_path / "o3")["md"].read_text(
        encoding="utf-8")
    assert "Not comparable" not in md


def test_markdown_text_escapes_links_and_leaves_lone_brackets():
    from leakloss.eval.compare import markdown_text

    # a system name that was a link (or an image) in a Markdown viewer; brackets alone print as they are
    assert markdown_text("[see](javascript:alert(1))") == "[see]\\(javascript:alert(1))"
    assert markdown_text("![x](http://e/i.png)") == "![x]\\(http://e/i.png)"
    assert markdown_text("[a][ref]") == "[a]\\[ref]"
    assert markdown_text("f5[v1]; OSError: [Errno 2]") == "f5[v1]; OSError: [Errno 2]"


def test_markdown_text_shows_terminal_escapes_and_bidi_controls_as_codes():
    # comparison.md and listeners.md are printed to the terminal: an ESC in a result's word cleared the screen
    from leakloss.eval.compare import markdown_text

    shown = markdown_text("घर\x1b[2J\x1b]0;PWNED\x07 \u202eabc")
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert shown == "घर[U+001B]\\[2J[U+001B]]0;PWNED[U+0007] [U+202E]abc"  # "][" escaped as a link's would be
    assert markdown_text("राष्\u200dट्रपतिको") == "राष्\u200dट्रपतिको"  # a joiner inside a word is the word's


def test_the_bootstrap_does_not_depend_on_the_result_files_names(tmp_path):
    # clusters were resampled in the order of the files' names: renaming files moved the interval
    results = [reading("flagged" if i % 3 else "no_change", f"s{i}") for i in range(9)]
    one = compare_results({"a": write_dir(tmp_path / "a", results)})
    other = tmp_path / "b"
    other.mkdir()
    for i, r in enumerate(results):  # the same results, named in the opposite order
        (other / f"r{len(results) - i:03d}.json").write_text(json.dumps(r, ensure_ascii=False), encoding="utf-8")
    two = compare_results({"a": other})
    assert one["systems"]["a"]["key_flagged"]["bootstrap"] == two["systems"]["a"]["key_flagged"]["bootstrap"]
    assert one["systems"]["a"]["by_kind"] == two["systems"]["a"]["by_kind"]


def test_a_judged_words_sites_of_a_kind_none_decided_are_counted_beside_the_kinds_rate(tmp_path):
    r = reading("flagged", "s1", kinds=("deletion", "quality"))
    r["words"][1]["sites"][1]["decision"] = "unscored"  # its quality site was not decided
    out = compare_results({"a": write_dir(tmp_path / "a", [r, reading("no_change", "s2", kinds=("quality",))])})
    s = out["systems"]["a"]
    assert s["by_kind"]["deletion"]["total"] == 1 and s["by_kind"]["quality"]["total"] == 1
    assert s["by_kind_undecided"] == {"deletion": 0, "quality": 1}
    md = write_comparison(out, tmp_path / "out")["md"].read_text(encoding="utf-8")
    assert "| a | 1 of 1 (100.0%) [20.7–100.0] | 0 | 0 of 1 (0.0%) [0.0–79.3] | 1 |" in md


def test_a_key_word_of_a_one_kind_test_set_counts_by_its_sites_of_that_kind(tmp_path):
    # a --kind quality set's key word flagged for its deletion site raised the quality set's "key words flagged"
    r = reading("no_change", "s1", kinds=("deletion", "quality"))
    key = r["words"][1]
    key["sites"][0]["decision"], key["decision"] = "flagged", "flagged"  # the deletion site flagged, quality not
    key["key_kinds"] = ["quality"]
    units, marked = key_units(r)
    assert marked and units[0]["decision"] == "no_change" and [s["kind"] for s in units[0]["sites"]] == ["quality"]
    assert r["words"][1]["decision"] == "flagged"  # the result itself is left as it is
    summary = compare_results({"q": write_dir(tmp_path / "q", [r])})["systems"]["q"]
    assert summary["key_flagged"]["count"] == 0 and summary["key_flagged"]["total"] == 1
    assert summary["by_kind"]["deletion"]["total"] == 0 and summary["by_kind"]["quality"]["total"] == 1
    key["key_kinds"] = ["deletion", "quality"]  # both kinds: the word as the scorer decided it
    assert key_units(r)[0][0]["decision"] == "flagged"


@pytest.mark.parametrize("kinds", [[], ["vowel"], "quality", [None]])
def test_key_kinds_that_are_not_contrast_kinds_are_refused(tmp_path, kinds):
    r = reading("flagged", "s1")
    r["words"][1]["key_kinds"] = kinds
    with pytest.raises(ResultError, match="key_kinds must be a non-empty list"):
        compare_results({"q": write_dir(tmp_path / "q", [r])})


def test_a_word_left_unscored_as_a_whole_is_counted_undecided_for_each_kind_it_has(tmp_path):
    # its decision "unscored" kept it out of the judged words, and the kind table said "0 of 0, 0 undecided"
    r = reading("unscored", "s1", kinds=("quality",))
    for site in r["words"][1]["sites"]:
        site["decision"] = "unscored"
    out = compare_results({"a": write_dir(tmp_path / "a", [r, reading("no_change", "s2")])})
    s = out["systems"]["a"]
    assert s["by_kind"]["quality"]["total"] == 0 and s["by_kind_undecided"] == {"deletion": 0, "quality": 1}


def test_left_out_readings_are_named_by_file(tmp_path):
    # only their reasons were counted: which reading was quarantined could not be found from the report
    results = [reading("flagged", "s1"), reading("flagged", "s2", status="quarantined")]
    out = compare_results({"a": write_dir(tmp_path / "a", results)})
    assert out["systems"]["a"]["left_out"]["quarantined"] == ["r001.json"]
    md = write_comparison(out, tmp_path / "out")["md"].read_text(encoding="utf-8")
    assert "Files: r001.json" in md
