from __future__ import annotations

import pytest
import torch

from leakloss.acoustic.align import align_words
from leakloss.acoustic.features import (
    EVIDENCE_NAMES, FEATURE_NAMES, FEATURE_SCHEMA_VERSION, LOG_FLOOR, EvidenceExtractor, SiteEvidence, SiteSpec,
    evidence_from_log_probs, frame_energies, site_feature_vector, site_specs,
)
from leakloss.text.sites import Site, WordSites

NEKPA = ["n", "e", "k", "ʌ", "p", "aː"]
BAITHAK = ["b", "ʌi̯", "ʈʰ", "ʌ", "k"]
SENTENCE = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"


# ----------------------------------------------------------------------------- names and the 57


def test_names_and_version():
    assert FEATURE_SCHEMA_VERSION == "1"
    assert len(EVIDENCE_NAMES) == 13 and len(FEATURE_NAMES) == 57
    assert len(set(FEATURE_NAMES)) == 57
    assert FEATURE_NAMES[17] == "kind_deletion" and FEATURE_NAMES[18] == "query_nepali_peak"
    assert FEATURE_NAMES[-1] == "diff_nepali_vs_greedy"


def _ev(margin, fit_n, fit_h, evidence):
    t = torch.tensor
    return SiteEvidence("deletion", t(margin), t(fit_n), t(fit_h), t(evidence), (True, True, True))


def test_site_feature_vector_layout():
    q = _ev([1.0, -2.0, 4.0], [-1.0, -2.0, -3.0], [0.0, -4.0, 1.0], [float(i) for i in range(13)])
    r = _ev([-1.0, -1.0, -4.0], [0.0] * 3, [0.0] * 3, [1.0] * 13)
    x = site_feature_vector(q, r, "deletion")
    assert x.shape == (57,) and x.dtype == torch.float32
    named = dict(zip(FEATURE_NAMES, x.tolist()))
    assert named["margin_query_mean"] == pytest.approx(1.0)
    assert named["margin_query_median"] == pytest.approx(1.0)
    assert named["margin_query_min"] == -2.0 and named["margin_query_max"] == 4.0
    assert named["margin_query_spread"] == 6.0
    assert named["margin_reference_median"] == -1.0
    # differences per crop: [2, -1, 8]
    assert named["margin_diff_mean"] == pytest.approx(3.0) and named["margin_diff_median"] == 2.0
    assert named["margin_diff_spread"] == 9.0
    assert named["fit_nepali_query"] == pytest.approx(-2.0) and named["fit_hindi_query"] == pytest.approx(-1.0)
    assert named["kind_deletion"] == 1.0
    assert named["query_hindi_peak"] == 2.0 and named["reference_hindi_peak"] == 1.0
    assert named["diff_nepali_vs_greedy"] == 11.0
    assert site_feature_vector(q, r, "quality")[17] == 0.0
    with pytest.raises(ValueError):
        site_feature_vector(q, r, "insertion")


# ----------------------------------------------------------------------------- scoring on scripted emissions


def _spec(phoneset, phones, position, kind, crops, hindi=None, key=(0, 0)):
    nep = tuple(phoneset.tokens(p) for p in phones)
    if kind == "deletion":
        hin = nep[:position] + nep[position + 1:]
        side = nep[position + 1] if position + 1 < len(nep) else frozenset({phoneset.blank})
    else:
        side = phoneset.tokens(hindi)
        hin = nep[:position] + (side,) + nep[position + 1:]
    return SiteSpec(key, kind, position, nep, hin, side, tuple(crops))


def _crops(first, last, n):
    return [(max(first - p, 0), min(last + p, n)) for p in (0, 2, 3)]


def test_deletion_margin_sign_follows_the_audio(phoneset, peaky, scripted):
    nep_script, (span,) = scripted([NEKPA])
    hin_script, (hspan,) = scripted([[p for i, p in enumerate(NEKPA) if i != 3]])
    lp_n, lp_h = peaky(nep_script, phoneset, 6.0), peaky(hin_script, phoneset, 6.0)
    s_n = _spec(phoneset, NEKPA, 3, "deletion", _crops(*span, lp_n.shape[0]))
    s_h = _spec(phoneset, NEKPA, 3, "deletion", _crops(*hspan, lp_h.shape[0]))
    ev_n, m_n = evidence_from_log_probs(lp_n, [s_n], phoneset.blank, 50.0)
    ev_h, _ = evidence_from_log_probs(lp_h, [s_h], phoneset.blank, 50.0)
    a, b = ev_n[(0, 0)], ev_h[(0, 0)]
    assert (a.margin < 0).all() and (b.margin > 0).all()
    assert a.feasible == (True, True, True)
    assert a.margin.shape == (3,) and a.evidence.shape == (13,)
    ea, eb = dict(zip(EVIDENCE_NAMES, a.evidence.tolist())), dict(zip(EVIDENCE_NAMES, b.evidence.tolist()))
    assert ea["nepali_peak"] > -0.5 and eb["nepali_peak"] < -3.0  # the vowel fires only where spoken
    assert ea["nepali_argmax_share"] > 0.5 and eb["nepali_argmax_share"] == 0.0
    assert eb["hindi_argmax_share"] > 0.0  # deletion: the next consonant takes the site's place
    assert ea["site_duration_s"] == pytest.approx(3 / 50.0, abs=0.02)
    assert eb["site_duration_s"] < ea["site_duration_s"]
    assert ea["relative_position"] == pytest.approx(3 / 6)
    assert ea["energy_db"] == 0.0  # no waveform given
    assert m_n[(0, 0)].shape == (span[1] - span[0],)
    torch.testing.assert_close(m_n[(0, 0)].mean(), a.margin[0], atol=0.5, rtol=0)


def test_quality_margin_sign(phoneset, peaky, scripted):
    script, (span,) = scripted([BAITHAK])
    swapped = [p if p != "ʌi̯" else "ɛː" for p in BAITHAK]
    script_h, (span_h,) = scripted([swapped])
    lp, lp_h = peaky(script, phoneset, 6.0), peaky(script_h, phoneset, 6.0)
    sa = _spec(phoneset, BAITHAK, 1, "quality", _crops(*span, lp.shape[0]), hindi="ɛː")
    sb = _spec(phoneset, BAITHAK, 1, "quality", _crops(*span_h, lp_h.shape[0]), hindi="ɛː")
    a = evidence_from_log_probs(lp, [sa], phoneset.blank, 50.0)[0][(0, 0)]
    b = evidence_from_log_probs(lp_h, [sb], phoneset.blank, 50.0)[0][(0, 0)]
    assert (a.margin < 0).all() and (b.margin > 0).all()
    assert a.evidence[EVIDENCE_NAMES.index("hindi_peak")] < b.evidence[EVIDENCE_NAMES.index("hindi_peak")]


def test_batch_items_do_not_interact(phoneset, peaky, scripted):
    script, (w1, w2) = scripted([NEKPA, BAITHAK])
    lp = peaky(script, phoneset, 4.0) + 0.3 * torch.randn(len(script), len(phoneset))
    lp = lp.log_softmax(-1)
    n = lp.shape[0]
    s1 = _spec(phoneset, NEKPA, 3, "deletion", _crops(*w1, n), key=(0, 3))
    s2 = _spec(phoneset, BAITHAK, 1, "quality", _crops(*w2, n), hindi="ɛː", key=(1, 1))
    both, _ = evidence_from_log_probs(lp, [s1, s2], phoneset.blank, 50.0)
    alone, _ = evidence_from_log_probs(lp, [s2], phoneset.blank, 50.0)
    torch.testing.assert_close(both[(1, 1)].margin, alone[(1, 1)].margin)
    torch.testing.assert_close(both[(1, 1)].evidence, alone[(1, 1)].evidence)


def test_gradient_flows_to_log_probs(phoneset, peaky, scripted):
    script, (span,) = scripted([NEKPA])
    logits = (peaky(script, phoneset, 4.0) + 0.5 * torch.randn(len(script), len(phoneset))).requires_grad_(True)
    lp = logits.log_softmax(-1)
    spec = _spec(phoneset, NEKPA, 3, "deletion", _crops(*span, lp.shape[0]))
    ev, margins = evidence_from_log_probs(lp, [spec], phoneset.blank, 50.0)
    e = ev[(0, 0)]
    (e.margin.sum() + e.evidence[:2].sum() + margins[(0, 0)].sum()).backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all() and logits.grad.abs().sum() > 0


def test_unalignable_path_is_floored_and_flagged(phoneset, peaky):
    lp = peaky(["n", "e"], phoneset)  # 2 frames cannot hold 6 phones
    spec = _spec(phoneset, NEKPA, 3, "deletion", [(0, 2)] * 3)
    e = evidence_from_log_probs(lp, [spec], phoneset.blank, 50.0)[0][(0, 0)]
    assert e.feasible == (False, False, False)
    assert (e.fit_nepali == LOG_FLOOR).all() and torch.isfinite(e.evidence).all()


def test_frame_energies():
    wave = torch.cat([torch.zeros(320), torch.ones(320), 0.5 * torch.ones(100)])
    e = frame_energies(wave, 320, 3)
    torch.testing.assert_close(e, torch.tensor([0.0, 1.0, 0.25 * 100 / 320]))


# ----------------------------------------------------------------------------- extractor


class ScriptedRecognizer:
    """Stands in for a Recognizer: one frame per 320 samples, emissions from a fixed phone script."""

    def __init__(self, phoneset, log_probs):
        self.phoneset, self.blank = phoneset, phoneset.blank
        self.frame_rate, self.samples_per_frame = 50.0, 320
        self.lp = log_probs

    def __call__(self, waves):
        n = min(waves.shape[-1] // 320, self.lp.shape[0])
        return self.lp[None, :n], torch.tensor([n])


def _words(phoneset, word_phones, sites):
    out = []
    for i, (phones, site) in enumerate(zip(word_phones, sites)):
        out.append(WordSites(i, f"w{i}", list(phones), [], "high", "lexicon", [site] if site else []))
    return out


def test_extractor_scripted_ok_and_statuses(phoneset, peaky, scripted):
    phones = [NEKPA, BAITHAK]
    script, _ = scripted(phones)
    rec = ScriptedRecognizer(phoneset, peaky(script, phoneset, 6.0))
    sites = [Site("deletion", 3, "ʌ", None, True), Site("quality", 1, "ʌi̯", "ɛː", True)]
    words = _words(phoneset, phones, sites)
    wave = 0.1 * torch.randn(len(script) * 320)
    ex = EvidenceExtractor(rec)
    out = ex.extract(wave, phones, words)
    assert out.ok and out.reason is None and set(out.sites) == {(0, 3), (1, 1)}
    assert out.alignment.ok and out.log_probs.shape == (len(script), len(phoneset))
    assert out.duration == pytest.approx(len(script) / 50.0)
    assert all((e.margin < 0).all() for e in out.sites.values())
    assert set(out.margins_per_frame) == {(0, 3), (1, 1)}

    # text that does not match the audio
    other = [["s", "u", "m", "o"], ["ɡ", "i", "l", "o"]]
    bad = ex.extract(wave, other, _words(phoneset, other, [None, None]))
    assert bad.status == "alignment_failed" and "text does not match the audio" in bad.reason

    # a word with no testable site
    untestable = _words(phoneset, phones, [Site("deletion", 3, "ʌ", None, False), None])
    none = ex.extract(wave, phones, untestable)
    assert none.status == "no_testable_site" and none.sites == {} and none.alignment.ok

    # silence, garbage and mismatched inputs
    assert ex.extract(torch.zeros(16000), phones, words).status == "silent"
    assert ex.extract(torch.tensor([float("nan")] * 400), phones, words).status == "bad_input"
    assert ex.extract(wave, phones[:1], words).status == "bad_input"
    assert ex.extract(torch.zeros(0), phones, words).status == "bad_input"

    # a site whose phone does not match the word's phones is skipped, with a reason
    wrong = _words(phoneset, phones, [Site("deletion", 2, "ʌ", None, True), None])
    skipped = ex.extract(wave, phones, wrong)
    assert skipped.status == "no_testable_site" and "not at position 2" in skipped.skipped[(0, 2)]


def test_locate_is_extract_without_the_evidence(phoneset, peaky, scripted):
    """locate() stops at the site specs: same status, alignment, specs and skipped as extract(), no evidence."""
    phones = [NEKPA, BAITHAK]
    script, _ = scripted(phones)
    rec = ScriptedRecognizer(phoneset, peaky(script, phoneset, 6.0))
    sites = [Site("deletion", 3, "ʌ", None, True), Site("quality", 1, "ʌi̯", "ɛː", True)]
    wave = 0.1 * torch.randn(len(script) * 320)
    ex = EvidenceExtractor(rec)
    cases = [(wave, phones, _words(phoneset, phones, sites)),
             (wave, [["s", "u", "m", "o"], ["ɡ", "i", "l", "o"]], _words(phoneset, phones, [None, None])),
             (wave, phones, _words(phoneset, phones, [Site("deletion", 2, "ʌ", None, True), None])),
             (torch.zeros(16000), phones, _words(phoneset, phones, sites))]
    for args in cases:
        full, located = ex.extract(*args), ex.locate(*args)
        assert (located.status, located.reason, located.specs, located.skipped) == \
            (full.status, full.reason, full.specs, full.skipped)
        assert located.sites == {} and located.margins_per_frame == {}
    located = ex.locate(*cases[0])
    assert located.ok and [(sp.key, sp.kind, len(sp.crops)) for sp in located.specs] == \
        [((0, 3), "deletion", 3), ((1, 1), "quality", 3)]
    assert [ex.locate(*c).status for c in cases[1:]] == ["alignment_failed", "no_testable_site", "silent"]


def test_extractor_short_clip_for_long_sentence(tiny_recognizer):
    from leakloss.text.sites import SiteFinder

    finder = SiteFinder(phoneset=tiny_recognizer.phoneset)
    words = finder(SENTENCE)
    phones = [w.nepali for w in words]
    clip = 0.1 * torch.randn(4800)  # 0.3 s
    out = EvidenceExtractor(tiny_recognizer, min_fit=0.0).extract(clip, phones, words)
    assert out.status == "alignment_failed" and "audio too short for" in out.reason


def test_extractor_real_audio_contract(tiny_recognizer):
    """Random tiny recognizer on a synthetic reading: shapes, finiteness, one pass, gradient to the wave."""
    from leakloss.speech.synth import TEACHER_VOICES, speak_phones
    from leakloss.text.sites import SiteFinder

    finder = SiteFinder(phoneset=tiny_recognizer.phoneset)
    words = finder(SENTENCE)
    phones = [w.nepali for w in words]
    reading = speak_phones([p for p in phones if p], TEACHER_VOICES[-1])
    wave = reading.waveform.clone().requires_grad_(True)
    out = EvidenceExtractor(tiny_recognizer, min_fit=0.0).extract(wave, phones, words)
    assert out.ok, out.reason
    expected = {(w.index, s.position) for w in words for s in w.testable_sites}
    assert set(out.sites) == expected and expected
    for key, ev in out.sites.items():
        x = site_feature_vector(ev, ev, ev.kind)
        assert x.shape == (57,) and torch.isfinite(x).all()
        assert (x[10:15] == 0).all()  # query == reference -> zero differences
    total = sum(ev.margin.sum() for ev in out.sites.values())
    total.backward()
    assert wave.grad is not None and torch.isfinite(wave.grad).all() and wave.grad.abs().sum() > 0


def test_site_specs_crops_and_hindi_side(phoneset, peaky, scripted):
    phones = [NEKPA, ["ɡ", "ʌ", "r", "ʌ"]]
    script, spans = scripted(phones)
    lp = peaky(script, phoneset)
    al = align_words(lp, lp.shape[0], phones, phoneset, 50.0)
    words = _words(phoneset, phones, [Site("deletion", 3, "ʌ", None, True), Site("deletion", 3, "ʌ", None, True)])
    specs, skipped = site_specs(words, phones, al, phoneset, 50.0, lp.shape[0], lp.shape[0] / 50.0)
    assert not skipped and len(specs) == 2
    assert specs[0].crops[0] == spans[0]  # tight crop = aligned word frames
    assert specs[0].crops[1] == (spans[0][0] - 2, spans[0][1] + 2)  # ±30 ms -> 1.5 frames -> 2 outward
    assert specs[0].hindi_side == phoneset.tokens("p")
    assert specs[1].hindi_side == frozenset({phoneset.blank})  # word-final deletion
    assert len(specs[1].hindi) == 3


@pytest.mark.slow
def test_trained_recognizer_teacher_vs_hindi_margins(trained_recognizer):
    from leakloss.speech.synth import HINDI_VOICES, TEACHER_VOICES, speak_phones, speak_text
    from leakloss.text.sites import SiteFinder

    text = SENTENCE
    words = SiteFinder(phoneset=trained_recognizer.phoneset)(text)
    phones = [w.nepali for w in words]
    ex = EvidenceExtractor(trained_recognizer)
    teacher = ex.extract(speak_phones([p for p in phones if p], TEACHER_VOICES[-1]).waveform, phones, words)
    hindi = ex.extract(speak_text(text, HINDI_VOICES[-1]).waveform, phones, words)
    assert teacher.ok and hindi.ok, (teacher.reason, hindi.reason)
    key = (1, 3)  # नेकपा's schwa
    assert teacher.sites[key].margin.mean() < 0 < hindi.sites[key].margin.mean()
