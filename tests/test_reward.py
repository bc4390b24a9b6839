"""The reward's word check uses its recognizer's calibrated limit (as the scorer does)."""


import torch

from leakloss.reward import leak_reward_details, word_check_limit
from leakloss.scorer import QUERY_MAX_PER

TEXT = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"


class _Limits:
    def __init__(self, limits):
        self.word_check_limits = limits


def test_the_limit_is_the_cards_calibrated_query_limit_else_the_scorers():
    assert word_check_limit(_Limits((0.73, 0.22))) == 0.73
    assert word_check_limit(_Limits(None)) == QUERY_MAX_PER
    assert word_check_limit(object()) == QUERY_MAX_PER


def test_the_shipped_real_speech_recognizers_carry_a_calibrated_limit():
    from leakloss.acoustic.recognizer import Recognizer

    for name in ("w", "wb"):
        limit = word_check_limit(Recognizer.load(name))
        assert QUERY_MAX_PER < limit < 0.85, (name, limit)  # above the default, below another text's median PER


def test_a_reading_is_judged_against_its_recognizers_limit(embedded_penalty, monkeypatch):
    """A calibrated limit just below a reading's phone error rate refuses it, just above passes it, and an
    explicit max_per wins over the card: the limit is read from the recognizer, not fixed."""
    from leakloss.speech.synth import HINDI_VOICES, speak_text

    reading = speak_text(TEXT, HINDI_VOICES[0]).waveform
    rec = embedded_penalty.recognizer
    per = leak_reward_details([reading], [TEXT], embedded_penalty)[0].phone_error_rate
    assert per is not None and 0.02 < per <= QUERY_MAX_PER
    for limit, status in ((per - 0.01, "unintelligible"), (per + 0.01, "scored")):
        monkeypatch.setattr(rec, "word_check_limits", (limit, 0.1), raising=False)
        assert leak_reward_details([reading], [TEXT], embedded_penalty)[0].status == status
    explicit = leak_reward_details([reading], [TEXT], embedded_penalty, max_per=per - 0.01)[0]
    assert explicit.status == "unintelligible"


def test_an_unaligned_reading_says_why_in_the_aligner_s_words(embedded_penalty, monkeypatch):
    """The reason of an alignment_failed reward carries the aligner's own reason (it was one fixed sentence)."""
    from types import SimpleNamespace

    import leakloss.reward as reward_module
    from leakloss.site_placement import SitePlacement
    from leakloss.speech.synth import HINDI_VOICES, speak_text

    reading = speak_text(TEXT, HINDI_VOICES[0]).waveform
    failed = SitePlacement([], "alignment_failed", alignment=SimpleNamespace(reason="fit 0.31 < 0.50"))
    monkeypatch.setattr(reward_module, "locate_sites", lambda *args, **kwargs: failed)
    result = leak_reward_details([reading], [TEXT], embedded_penalty)[0]
    assert result.status == "alignment_failed" and result.reward == 0.0
    assert result.reason == "the text's phones do not align to the audio: fit 0.31 < 0.50"


def test_the_reward_and_its_sites_do_not_move_with_the_readings_gain(embedded_penalty):
    """The word check and the placement hear every reading at one level: at the raw level wb's alignment moved a
    site by 40 ms between gains 0.9 and 0.7, and this Hindi reading's reward went 0.985 -> 0.012 (an RL policy could
    buy reward with loudness)."""
    from leakloss.site_placement import locate_sites
    from leakloss.speech.corpus import builtin_sentences, split_sentences
    from leakloss.speech.synth import HELDOUT_HINDI_VOICE, speak_text

    text = next(t for t in split_sentences(builtin_sentences())[1] if t.startswith("यो पसलमा"))
    reading = speak_text(text, HELDOUT_HINDI_VOICE).waveform
    gains = (1.0, 0.9, 0.7, 0.3, 0.05, 2.0)
    results = leak_reward_details([reading * g for g in gains], [text] * len(gains), embedded_penalty)
    assert {r.status for r in results} == {"scored"}
    assert max(r.reward for r in results) - min(r.reward for r in results) < 1e-3, [r.reward for r in results]
    sites = [locate_sites(reading * g, text, embedded_penalty.recognizer).sites for g in gains]
    assert all([(s.start, s.end) for s in x] == [(s.start, s.end) for s in sites[0]] for x in sites), sites


def test_a_silent_reading_gets_the_worst_reward_however_it_is_scaled(embedded_penalty):
    """Heard at one level, digital silence (a reading at 1e-5 of its gain) had been scored 0.98 like the reading:
    an RL policy lost nothing by going inaudible."""
    from leakloss.site_placement import locate_sites
    from leakloss.speech.synth import HELDOUT_HINDI_VOICE, speak_text

    reading = speak_text(TEXT, HELDOUT_HINDI_VOICE).waveform
    quiet = reading / reading.abs().max() * 5e-5
    results = leak_reward_details([quiet, torch.zeros(16_000)], [TEXT, TEXT], embedded_penalty)
    assert [(r.status, r.reward) for r in results] == [("silent", 0.0), ("silent", 0.0)]
    assert locate_sites(quiet, TEXT, embedded_penalty.recognizer).status == "silent"
    loud_enough = leak_reward_details([reading / reading.abs().max() * 1e-3], [TEXT], embedded_penalty)[0]
    assert loud_enough.status != "silent"


def test_a_site_on_the_last_phone_ends_by_the_audios_end(embedded_penalty):
    # the last phone's segment reaches 60 ms past its frames: a site placed on it ended after the audio
    from leakloss.site_placement import locate_sites
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES, speak_phones
    from leakloss.text.sites import SiteFinder

    text = "तिमी कहाँ जाँदै छौ है"  # है's one phone after h is its quality site
    wave = speak_phones([w.nepali for w in SiteFinder()(text) if w.skipped is None], TRAIN_TEACHER_VOICES[0]).waveform
    loud = (wave.abs() > 0.02 * wave.abs().max()).nonzero()
    wave = wave[: int(loud[-1]) + 1 - 800]  # cut 50 ms inside its last vowel, as a tightly trimmed clip can be
    placed = locate_sites(wave, text, embedded_penalty.recognizer)
    assert placed.status == "placed" and placed.sites
    assert all(s.end <= wave.numel() / 16_000 + 1e-9 for s in placed.sites), placed.sites


def test_an_unintelligible_reading_names_the_words_it_says_that_are_not_read(embedded_penalty):
    """Numbers and Latin words are spoken but have no expected phones: a correct reading failed the word check
    with only "phone error rate 0.79 > 0.73" as its reason."""
    from leakloss.speech.synth import HINDI_VOICES, speak_text

    text = "आज 2024 मा COVID " + TEXT
    reading = speak_text(TEXT, HINDI_VOICES[0]).waveform
    result = leak_reward_details([reading], [text], embedded_penalty, max_per=1e-6)[0]
    assert result.status == "unintelligible" and result.reward == 0.0
    assert result.reason.endswith("words not read, left out of the expected phones: '2024', 'COVID'"), result.reason
    plain = leak_reward_details([reading], [TEXT], embedded_penalty, max_per=1e-6)[0]
    assert plain.status == "unintelligible" and "not read" not in plain.reason


def test_readings_at_another_rate_are_resampled_when_the_rate_is_given(embedded_penalty):
    """F5 speaks at 24 kHz: its waves were heard as slowed 16 kHz speech and scored (PER 0.31 instead of 0.17)."""
    import pytest

    from leakloss.audio import resample
    from leakloss.speech.synth import HINDI_VOICES, speak_text

    reading = speak_text(TEXT, HINDI_VOICES[0]).waveform
    at_24k = resample(reading, 16_000, 24_000)
    (base,) = leak_reward_details([reading], [TEXT], embedded_penalty)
    (given,) = leak_reward_details([at_24k], [TEXT], embedded_penalty, sample_rate=24_000)
    assert given.status == base.status and abs(given.phone_error_rate - base.phone_error_rate) <= 0.03
    assert abs(given.reward - base.reward) < 0.05
    from leakloss.reward import leak_reward

    assert float(leak_reward([at_24k], [TEXT], embedded_penalty, sample_rate=24_000)[0]) == given.reward
    for bad in (0, 16_000.0, True, "16000"):
        with pytest.raises(ValueError, match="sample_rate must be a whole number of Hz"):
            leak_reward_details([reading], [TEXT], embedded_penalty, sample_rate=bad)
