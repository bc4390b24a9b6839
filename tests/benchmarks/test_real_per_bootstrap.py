"""The speaker bootstrap of ``benchmarks/real_per_bootstrap.py`` against a naive recomputation."""

from __future__ import annotations

import random
import sys

from tests.conftest import load_benchmark


def test_the_paired_speaker_bootstrap_matches_a_naive_one():
    bench = load_benchmark("real_per_bootstrap")
    speakers = ["s1", "s1", "s2", "s3", "s3", "s3"]
    edits = {"base": [(3, 10), (1, 8), (4, 12), (0, 5), (2, 9), (5, 11)],
             "cand": [(2, 10), (1, 8), (5, 12), (0, 5), (1, 9), (3, 11)]}
    boot = bench.speaker_bootstrap(edits, speakers, "base", resamples=200, seed=3)
    rng, ids, naive_per, naive_diff = random.Random(3), ["s1", "s2", "s3"], [], []
    for _ in range(200):
        drawn = [i for s in (rng.choice(ids) for _ in ids) for i, who in enumerate(speakers) if who == s]
        phones = sum(edits["base"][i][1] for i in drawn)
        naive_per.append(sum(edits["cand"][i][0] for i in drawn) / phones)
        naive_diff.append((sum(edits["cand"][i][0] for i in drawn) - sum(edits["base"][i][0] for i in drawn)) / phones)
    assert boot["cand"]["per"] == sorted(naive_per) and boot["cand"]["diff"] == sorted(naive_diff)
    assert boot["base"]["diff"] == [0.0] * 200
    assert bench.interval(list(range(100))) == (2, 97)


def _figures(out: str) -> dict[str, str]:
    run_all = load_benchmark("run_all")
    return run_all.parse_pairs(out.strip().splitlines()[-1])


def test_without_the_real_recordings_it_skips_with_a_nan_last_line(monkeypatch, capsys):
    """Absent data: a message, then the key=value last line run_all reads (prose last was recorded as a failure)."""
    from leakloss.speech import real

    bench = load_benchmark("real_per_bootstrap")
    monkeypatch.setattr(real, "real_clips", lambda *a, **k: [])
    monkeypatch.setattr(sys, "argv", ["real_per_bootstrap.py"])
    bench.main()
    out = capsys.readouterr().out
    assert "skipped: no real test-speaker recording" in out
    figures = _figures(out)
    assert list(figures)[: len(bench.FIGURES)] == list(bench.FIGURES)
    assert all(figures[k] == "nan" for k in bench.FIGURES) and figures["clips"] == "0"


def test_without_any_candidate_it_skips_with_a_nan_last_line(monkeypatch, capsys):
    import torch

    from leakloss.acoustic import recognizer
    from leakloss.speech import real

    class Clip:
        text, speaker = "घर", "s1"

        def load(self):
            return torch.zeros(1600)

    def missing(name):
        raise recognizer.RecognizerNotFoundError(f"no {name}")

    bench = load_benchmark("real_per_bootstrap")
    monkeypatch.setattr(real, "real_clips", lambda *a, **k: [Clip(), Clip()])
    monkeypatch.setattr(recognizer.Recognizer, "load", staticmethod(missing))
    monkeypatch.setattr(sys, "argv", ["real_per_bootstrap.py", "--base", "x", "--candidates", "y"])
    bench.main()
    figures = _figures(capsys.readouterr().out)
    assert figures["per_base"] == "nan" and figures["clips"] == "2" and figures["speakers"] == "1"


def test_zero_resamples_is_refused(monkeypatch, capsys):
    import pytest

    monkeypatch.setattr(sys, "argv", ["real_per_bootstrap.py", "--resamples", "0"])
    with pytest.raises(SystemExit) as exc:
        load_benchmark("real_per_bootstrap").main()
    assert exc.value.code == 2 and "--resamples" in capsys.readouterr().err
