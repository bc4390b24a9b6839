"""``benchmarks/recognizers.py``: an unknown recognizer is a clear error before any synthesis; no edit pair gives a
``nan`` pick accuracy, not 0."""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pytest

from leakloss.acoustic.recognizer import RecognizerNotFoundError
from tests.conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("recognizers")


def test_an_unknown_recognizer_is_a_clear_error(bench, monkeypatch, capsys):
    def missing(name):
        raise RecognizerNotFoundError(f"cannot load recognizer {name!r}")

    monkeypatch.setattr(bench.Recognizer, "load", staticmethod(missing))
    monkeypatch.setattr(bench, "speak_phones", lambda *a, **k: pytest.fail("refuse before the synthesis"))
    monkeypatch.setattr(sys, "argv", ["recognizers.py", "--recognizers", "zzz", "--limit", "1"])
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2 and "cannot load recognizer 'zzz'" in capsys.readouterr().err


def test_no_edit_pair_is_nan(bench):
    assert math.isnan(bench.edit_pick_accuracy(SimpleNamespace(vocab=[]), [], None))


def test_zero_limit_is_refused(bench, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["recognizers.py", "--limit", "0"])
    monkeypatch.setattr(bench.Recognizer, "load", staticmethod(lambda name: pytest.fail("refuse first")))
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2 and "--limit" in capsys.readouterr().err
