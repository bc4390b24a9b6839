"""``benchmarks/site_margins.py``: no deletion site gives ``nan`` shares, not 0; bad arguments are refused clearly."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from leakloss.acoustic.recognizer import RecognizerNotFoundError
from tests.conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("site_margins")


def test_no_deletion_site_gives_nan_shares(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench.Recognizer, "load", staticmethod(lambda name: SimpleNamespace(phoneset=None)))
    monkeypatch.setattr(bench, "SiteFinder", lambda phoneset: (lambda text: []))  # no sentence has a phone
    monkeypatch.setattr(bench, "EvidenceExtractor", lambda rec, min_fit: None)
    bench.main(["--sentences", "2"])
    figures = load_benchmark("run_all").parse_pairs(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["sites"] == "0"
    assert math.isnan(float(figures["teacher_negative"])) and math.isnan(float(figures["hindi_positive"]))


def test_an_unknown_recognizer_is_a_clear_error(bench, monkeypatch, capsys):
    def missing(name):
        raise RecognizerNotFoundError(f"cannot load recognizer {name!r}")

    monkeypatch.setattr(bench.Recognizer, "load", staticmethod(missing))
    with pytest.raises(SystemExit) as exc:
        bench.main(["--recognizer", "zzz"])
    assert exc.value.code == 2 and "cannot load recognizer 'zzz'" in capsys.readouterr().err


def test_zero_sentences_is_refused(bench, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--sentences", "0"])
    assert exc.value.code == 2 and "--sentences" in capsys.readouterr().err
