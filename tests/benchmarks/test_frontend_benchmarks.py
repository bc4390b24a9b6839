"""``benchmarks/frontend_agreement.py`` and ``frontend_learning_curve.py``: without the shared dev lexicon they skip
(a message, the last line's figures ``nan``, exit 0); a missing ``--lexicon`` given by hand stays an error; a share
with nothing to count is ``nan``, not 0 (and no part is divided by zero)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from tests.conftest import load_benchmark


def _figures(out: str) -> dict[str, str]:
    return load_benchmark("run_all").parse_pairs(out.strip().splitlines()[-1])


@pytest.mark.parametrize("name", ["frontend_agreement", "frontend_learning_curve"])
def test_without_the_shared_lexicon_it_skips_with_nan_figures(name, tmp_path, monkeypatch, capsys):
    bench = load_benchmark(name)
    monkeypatch.setattr(bench, "DEFAULT_LEXICON", tmp_path / "absent" / "lexicon-dev.tsv")
    assert bench.main([]) == 0
    out = capsys.readouterr().out
    assert "skipped: no lexicon at" in out
    figures = _figures(out)
    assert list(figures) == list(bench.FIGURES) and all(v == "nan" for v in figures.values())


@pytest.mark.parametrize("name", ["frontend_agreement", "frontend_learning_curve"])
def test_a_missing_lexicon_given_by_hand_is_an_error(name, tmp_path, capsys):
    assert load_benchmark(name).main(["--lexicon", str(tmp_path / "nope.tsv")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_frontend_agreement_refuses_a_zero_limit(capsys):
    with pytest.raises(SystemExit) as exc:
        load_benchmark("frontend_agreement").main(["--limit", "0"])
    assert exc.value.code == 2 and "--limit" in capsys.readouterr().err


def test_frontend_agreement_shares_with_nothing_to_count_are_nan(monkeypatch):
    bench = load_benchmark("frontend_agreement")
    empty = bench.score([], fe=None, espeak=None)  # divided by zero before
    assert empty["n"] == 0 and math.isnan(empty["agreement"]) and math.isnan(empty["high_coverage"])
    # one word, agreeing, decided with low confidence: no `high` word and no deletion site to be precise about
    monkeypatch.setattr(bench, "inherent_vowel_pattern", lambda word, phones: (True,))
    fe = SimpleNamespace(pronounce=lambda w: SimpleNamespace(phones=("k", "ʌ"), source="rules", confidence="low"))
    got = bench.score([("क", (True,))], fe, espeak=None, hindi={"क": ["k"]})
    assert got["agreement"] == 1.0 and got["high_coverage"] == 0.0
    assert math.isnan(got["high_agreement"]) and math.isnan(got["deletion_precision"])
