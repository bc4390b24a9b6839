"""``benchmarks/domains.py``: a domain whose readings are absent (no Festival voice, no real recording) prints
``nan``, never a perfect 0."""

from __future__ import annotations

import math

import pytest

from tests.conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("domains")


def test_an_empty_domain_has_no_phone_error_rate(bench):
    assert math.isnan(bench.corpus_per([]))
    assert bench.corpus_per([(["k", "a"], ["k"])]) == 0.5


def test_the_last_line_without_unseen_voices_or_real_recordings_is_nan(bench):
    nan = float("nan")
    line = bench.headline({"espeak": 0.03}, nan, nan, caught=0, cuts=0, false_flags=0, shams=0,
                          share={"deletion": nan, "quality": nan}, recognizer="wb")
    figures = load_benchmark("run_all").parse_pairs(line)
    assert figures["per_espeak"] == "0.0300" and figures["recognizer"] == "wb"
    for key in ("per_unseen_family", "per_real", "caught_unseen", "false_unseen", "quarantine_unseen"):
        assert figures[key] == "nan", key
    line = bench.headline({}, 0.1, 1.0, caught=3, cuts=4, false_flags=0, shams=4,
                          share={"deletion": 0.0, "quality": 0.0}, recognizer="wb")
    assert "caught_unseen=0.7500 false_unseen=0 " in line


@pytest.mark.parametrize("args", [["--limit", "-1"], ["--real-limit", "-2"], ["--pair-sentences", "-1"],
                                  ["--scorer-recognizers", "no-such-recognizer", "w"],
                                  ["--heads-dir", "/nonexistent/heads"]])
def test_bad_arguments_are_refused_before_any_reading_is_made(bench, args, monkeypatch, capsys):
    # an unknown scorer recognizer failed only after minutes of synthesis; a negative --limit dropped sentences
    def no_synthesis(*a, **k):
        raise AssertionError("synthesised before the arguments were checked")

    monkeypatch.setattr(bench, "speak_phones", no_synthesis)
    monkeypatch.setattr(bench, "speak_text", no_synthesis)
    with pytest.raises(SystemExit) as exit_:
        bench.main(args)
    assert exit_.value.code == 2 and "error:" in capsys.readouterr().err
