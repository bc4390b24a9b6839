"""``benchmarks/short_vowels.py``: no short vowel found gives a ``nan`` rate, not a perfect 0; a bad count is refused."""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("train_heads")
    return load_benchmark("short_vowels")


def test_no_short_vowel_is_nan_not_zero(bench, monkeypatch, capsys):
    card = SimpleNamespace(recognizer="wb@x", features={"layer": 4}, thresholds={"flag": 0.5})
    monkeypatch.setattr(bench, "load_head", lambda path: (object(), card))
    monkeypatch.setattr(bench.Recognizer, "load", staticmethod(lambda name: object()))
    monkeypatch.setattr(bench, "short_vowel_conv_table", lambda *a, **k: [])
    monkeypatch.setattr(bench, "rawconv_scores", lambda head, table: torch.zeros(len(table)))
    monkeypatch.setattr(sys, "argv", ["short_vowels.py", "--syntheses", "2"])
    bench.main()
    figures = load_benchmark("run_all").parse_pairs(capsys.readouterr().out.strip().splitlines()[-1])
    assert math.isnan(float(figures["short_vowel_flag_rate"]))
    assert figures["short_vowels"] == "0" and figures["syntheses"] == "2"


def test_zero_syntheses_is_refused(bench, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["short_vowels.py", "--syntheses", "0"])
    monkeypatch.setattr(bench, "load_head", lambda path: pytest.fail("refuse before loading anything"))
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert exc.value.code == 2 and "--syntheses" in capsys.readouterr().err
