"""Helpers of ``benchmarks/signal_domains.py`` (the benchmark itself is run by ``benchmarks/run_all.py``)."""

from __future__ import annotations

import math
import sys
from types import SimpleNamespace

import pytest
import torch

from leakloss.penalty import RewardResult
from leakloss.speech.synth import Reading
from leakloss.text.sites import Site, WordSites
from leakloss.timing import TimedSite
from tests.conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("signal_domains")


DELETION = Site("deletion", 1, "ʌ", None, True)


def test_judged_share_counts_scored_and_no_testable_site(bench):
    results = [RewardResult(0.7, "scored"), RewardResult(1.0, "no_testable_site"),
               RewardResult(0.0, "unintelligible"), RewardResult(0.0, "alignment_failed")]
    assert bench.judged_share(results) == 0.5
    assert math.isnan(bench.judged_share([]))


def test_auc_or_nan(bench):
    assert bench.auc_or_nan([0.9, 0.8], [0.1]) == 1.0
    assert math.isnan(bench.auc_or_nan([], [0.1]))
    assert math.isnan(bench.auc_or_nan([0.1], []))


class FakePenalty:
    """Site probability = the mean |sample| inside the site's window; inactive past the wave's end."""

    recognizer = SimpleNamespace(name="fake")
    flag_threshold = 0.4

    def __call__(self, waves, sites, wave_lengths=None):
        wave = waves[0]
        probs, active = [], []
        for s in sites[0]:
            a, b = int(s.start * 16000), int(s.end * 16000)
            piece = wave[a:b]
            probs.append(float(piece.abs().mean()) if piece.numel() else 0.0)
            active.append(piece.numel() > 0)
        return torch.zeros(()), SimpleNamespace(site_probs=torch.tensor(probs), site_active=torch.tensor(active))


def make_fake_penalty():
    return FakePenalty()


def test_site_probs_and_cut_pairs_through_a_signal(bench):
    signal = bench.Signal("fake", FakePenalty(), None, 0.4, None, None)
    wave = torch.cat([torch.zeros(1600), torch.ones(1600), torch.zeros(1600)])  # a loud 0.1-0.2 s "vowel"
    site = TimedSite(0.1, 0.2, "deletion", "ʌ->∅", "x")
    assert signal.site_probs(wave, [site, TimedSite(5.0, 5.1, "deletion", "ʌ->∅", "x")]) == [
        pytest.approx(1.0), None]
    assert signal.site_probs(wave, []) == []
    cut, sham = bench.cut_pair_probs(signal, wave, (0.1, 0.2), site)
    assert cut == pytest.approx(0.0)  # the vowel is gone from the window
    assert sham == pytest.approx(1.0, abs=0.05)  # put back (2 ms fades at the joins)
    short = torch.ones(2400)  # a window past the wave's end has no frame: no pair
    assert bench.cut_pair_probs(signal, short, (0.01, 0.02), TimedSite(0.2, 0.3, "deletion", "ʌ->∅", "x")) is None


def test_load_signal_wraps_a_penalty_from_module_callable(bench, monkeypatch):
    monkeypatch.setitem(sys.modules, "fake_signal_module", SimpleNamespace(build=make_fake_penalty))
    signal = bench.load_signal("fake_signal_module:build")
    assert isinstance(signal.penalty, FakePenalty)
    assert signal.recognizer.name == "fake" and signal.flag_threshold == 0.4
    from leakloss.penalty import leak_reward_details, locate_sites

    assert signal.reward_details is leak_reward_details and signal.locate_sites is locate_sites


@pytest.mark.parametrize("spec", ["nothing", "module:", ":attr"])
def test_load_signal_rejects_bad_specs(bench, spec):
    with pytest.raises(ValueError, match="MODULE:CALLABLE"):
        bench.load_signal(spec)


def test_load_signal_refuses_shipped_options_with_a_callable(bench, monkeypatch):
    monkeypatch.setitem(sys.modules, "fake_signal_module", SimpleNamespace(build=make_fake_penalty))
    with pytest.raises(ValueError, match="--recognizer/--head"):
        bench.load_signal("fake_signal_module:build", recognizer="w")


def test_short_vowel_sites_keeps_40_to_60_ms_retained_schwas(bench):
    words = [WordSites(0, "x", ["k", "ʌ", "r"], sites=[DELETION]), WordSites(1, "y", ["m", "ʌ", "t"], sites=[DELETION])]
    reading = Reading(torch.zeros(8000), ["k", "ʌ", "r", "m", "ʌ", "t"], [0.0, 0.05, 0.10, 0.2, 0.25, 0.33],
                      [0, 0, 0, 1, 1, 1])
    # word 0's schwa lasts 50 ms (kept), word 1's 80 ms (too long)
    sites = bench.short_vowel_sites(reading, words, 0.04, 0.06)
    assert sites == [TimedSite(0.05, 0.10, "deletion", "ʌ->∅", "x")]
    said_otherwise = Reading(torch.zeros(8000), ["k", "r", "m", "ʌ", "t"], [0.0, 0.05, 0.2, 0.25, 0.33], [0, 0, 1, 1, 1])
    assert bench.short_vowel_sites(said_otherwise, words, 0.04, 0.06) == []


def test_false_short_vowels_pools_fresh_syntheses(bench, monkeypatch):
    """Each synthesis is its own draw of the breath noise (espeak is seeded per request: a repeated request would
    be the same reading): every one is scored and pooled."""
    from leakloss.speech import synth

    words = [WordSites(0, "x", ["k", "ʌ", "r"], sites=[DELETION])]
    calls, draws = [], []

    def fake_speak(phones, voice):  # draw k: the schwa is loud (flagged by FakePenalty) on every other draw
        calls.append(voice.rate)
        draws.append(voice.noise_draw)
        wave = torch.zeros(8000)
        wave[800:1600] = 1.0 if len(calls) % 2 else 0.0
        return Reading(wave, ["k", "ʌ", "r"], [0.0, 0.05, 0.10], [0, 0, 0])

    monkeypatch.setattr(synth, "speak_phones", fake_speak)
    signal = bench.Signal("fake", FakePenalty(), None, 0.4, None, None)
    one = bench.short_vowel_domain(signal, ["t"], {"t": words}, syntheses=1)
    assert len(calls) == len(bench.FAST_RATES)
    calls.clear()
    pooled = bench.short_vowel_domain(signal, ["t"], {"t": words}, syntheses=3)
    assert len(calls) == 3 * len(bench.FAST_RATES)  # every reading drawn afresh each time
    assert sorted(set(draws)) == [0, 1, 2]  # with another noise draw: seeded, the same draw repeats one reading
    assert one["false_short_vowels"] == pytest.approx(4 / 7)  # draws 1, 3, 5, 7 of 7 loud
    assert pooled["false_short_vowels"] == pytest.approx(11 / 21)


def test_false_site_rate_counts_the_flag_threshold_and_gives_its_interval(bench):
    share, interval = bench.false_site_rate([0.1, 0.5, 0.49, 0.9])
    assert share == 0.5  # 0.5 itself is flagged (p >= FALSE_SITE_P)
    assert interval.low < 0.5 < interval.high
    share, interval = bench.false_site_rate([0.2] * 32 + [0.7])  # 1 of 33: the interval holds 2% and far above it
    assert share == pytest.approx(1 / 33) and interval.low < 0.02 and interval.high > 0.1
    share, interval = bench.false_site_rate([])
    assert math.isnan(share) and interval is None
