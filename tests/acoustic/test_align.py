from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.acoustic import align as align_mod
from leakloss.acoustic.align import (
    DEFAULT_MIN_FIT,
    AlignerUnavailableError,
    AlignmentResult,
    MMSAligner,
    align_batch,
    align_words,
    reduced_emissions,
    romanize_words,
)
from leakloss.text.phoneset import PhoneSet

WORDS = [["n", "e", "k", "ʌ", "p", "aː"], ["r", "ʌ"], ["b", "ʌi̯", "ʈʰ", "ʌ", "k"]]


def test_reduced_emissions_columns_are_set_logsumexp():
    ps = PhoneSet({"<pad>": 0, "ʌ": 1, "ə": 2, "k": 3, "aː": 4})
    lp = torch.randn(7, 5).log_softmax(-1)
    sets = [ps.tokens(p) for p in ["k", "ʌ", "k", "aː"]]
    em, targets = reduced_emissions(lp, sets, ps.blank)
    assert targets == [1, 2, 1, 3]  # repeated set -> same column
    assert em.shape == (7, 4)
    torch.testing.assert_close(em[:, 0], lp[:, 0])
    assert sorted(ps.tokens("ʌ")) == [1, 2]  # ʌ/ə share a set
    torch.testing.assert_close(em[:, 2], torch.logsumexp(lp[:, [1, 2]], dim=1))


def test_align_recovers_word_and_phone_spans(phoneset, peaky, scripted):
    script, spans = scripted(WORDS)
    lp = peaky(script, phoneset)
    res = align_words(lp, lp.shape[0], WORDS, phoneset, 50.0, words=["a", "b", "c"])
    assert res.ok and res.reason is None and res.fit > 0.9
    assert [w.index for w in res.words] == [0, 1, 2] and [w.word for w in res.words] == ["a", "b", "c"]
    for w, (first, last) in zip(res.words, spans):
        assert w.start == pytest.approx(first / 50.0) and w.end == pytest.approx(last / 50.0)
        assert len(w.phone_spans) == len(WORDS[w.index])
        assert w.score > 0.9
    # each phone gets its three frames
    assert res.words[0].phone_spans[1] == pytest.approx(((2 + 5) / 50.0, (2 + 5 + 3) / 50.0))


def test_words_without_phones_are_skipped_but_indices_kept(phoneset, peaky, scripted):
    words = [WORDS[0], [], WORDS[1]]
    script, _ = scripted([WORDS[0], WORDS[1]])
    lp = peaky(script, phoneset)
    res = align_words(lp, lp.shape[0], words, phoneset, 50.0)
    assert res.ok and [w.index for w in res.words] == [0, 2]
    assert res.word(1) is None and res.word(2) is res.words[1]


def test_mismatched_text_is_refused_with_fit(phoneset, peaky, scripted):
    script, _ = scripted(WORDS)
    lp = peaky(script, phoneset)
    other = [["s", "u", "m", "o"], ["ɡ", "i", "l", "o"]]
    res = align_words(lp, lp.shape[0], other, phoneset, 50.0)
    assert not res.ok and res.words == []
    assert res.reason.startswith("text does not match the audio (fit ")
    assert res.fit < DEFAULT_MIN_FIT


@pytest.mark.parametrize("damage", ["nan_rows", "all_nan", "posinf", "phone_impossible", "blank_only"])
def test_log_probs_that_admit_no_alignment_are_explicit_failures(phoneset, peaky, scripted, damage):
    # NaN frames gave ok=True with fit nan (nan < min_fit is False); all-NaN or only-blank a raw IndexError
    script, _ = scripted(WORDS)
    lp = peaky(script, phoneset).clone()
    if damage == "nan_rows":
        lp[5:10] = float("nan")
    elif damage == "all_nan":
        lp[:] = float("nan")
    elif damage == "posinf":
        lp[3, 2] = float("inf")
    elif damage == "phone_impossible":
        lp[:, sorted(phoneset.tokens("k"))] = float("-inf")
    else:
        lp[:, 1:] = float("-inf")
    res = align_words(lp, lp.shape[0], WORDS, phoneset, 50.0, min_fit=0.0)
    assert not res.ok and res.words == [] and res.reason, res
    want = "impossible in every frame" if damage in ("phone_impossible", "blank_only") else "hold NaN/Inf"
    assert want in res.reason


def test_too_short_and_empty_are_explicit(phoneset, peaky):
    lp = peaky([None] * 5, phoneset)
    res = align_words(lp, 5, WORDS, phoneset, 50.0)
    assert not res.ok and res.reason.startswith("audio too short for 13 phones")
    res = align_words(lp, 5, [[], []], phoneset, 50.0)
    assert not res.ok and res.reason == "empty phone sequence"
    res = align_words(lp, 5, [["☃"]], phoneset, 50.0)
    assert not res.ok and "☃" in res.reason
    res = align_words(lp[None], 5, WORDS, phoneset, 50.0)
    assert not res.ok and "frames, vocab" in res.reason


def test_repeated_set_needs_a_blank_frame(phoneset, peaky):
    # "k k" needs 3 frames (k, blank, k); 2 are too few
    lp = peaky(["k", None, "k"], phoneset)
    assert align_words(lp, 3, [["k", "k"]], phoneset, 50.0, min_fit=0.0).ok
    res = align_words(lp[:2], 2, [["k", "k"]], phoneset, 50.0, min_fit=0.0)
    assert not res.ok and "need at least 3 frames" in res.reason


def test_align_batch_matches_single(phoneset, peaky, scripted):
    script, _ = scripted(WORDS)
    lp = peaky(script, phoneset)
    batch = torch.stack([lp, lp])
    out = align_batch(batch, torch.tensor([lp.shape[0], 4]), [WORDS, WORDS], phoneset, 50.0)
    single = align_words(lp, lp.shape[0], WORDS, phoneset, 50.0)
    assert out[0] == single and not out[1].ok


def test_random_recognizer_contract(tiny_recognizer):
    torch.manual_seed(1)
    wave = 0.1 * torch.randn(16000)
    lp, n = tiny_recognizer(wave[None])
    res = align_words(lp[0], int(n[0]), WORDS, tiny_recognizer.phoneset, tiny_recognizer.frame_rate, min_fit=0.0)
    assert isinstance(res, AlignmentResult) and res.ok
    ends = [w.end for w in res.words]
    starts = [w.start for w in res.words]
    assert all(0.0 <= s < e <= 1.0 + 1e-6 for s, e in zip(starts, ends))
    assert all(e1 <= s2 + 1e-9 for e1, s2 in zip(ends, starts[1:]))  # words in order, no overlap


# ----------------------------------------------------------------------------- MMS (no network)


def test_mms_missing_weights_is_explicit_and_never_downloads(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))

    def no_network(*a, **k):
        raise AssertionError("tried to download")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)
    with pytest.raises(AlignerUnavailableError) as info:
        MMSAligner()
    msg = str(info.value)
    assert str(tmp_path / "checkpoints" / "model.pt") in msg and "weights_path" in msg
    with pytest.raises(AlignerUnavailableError, match="not found"):
        MMSAligner(weights_path=tmp_path / "nope.pt")


def test_mms_damaged_weights_are_unavailable(tmp_path):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(AlignerUnavailableError, match="could not be loaded"):
        MMSAligner(weights_path=bad)


def test_romanize_needs_uroman_for_devanagari(monkeypatch):
    assert romanize_words(["Neka", "pa"]) == ["neka", "pa"]
    monkeypatch.setattr(align_mod, "_uroman", lambda: None)
    with pytest.raises(AlignerUnavailableError, match="pip install uroman"):
        romanize_words(["नेकपा"])


def test_mms_aligner_with_provided_weights(monkeypatch, tmp_path):
    """With weights present (a fake model here), align() returns the common result type."""
    from torchaudio.pipelines import MMS_FA

    labels = MMS_FA.get_labels(star=None)
    ids = {c: i for i, c in enumerate(labels)}

    class FakeModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x):
            script = [None, "n", "e", None, "k", "a", None, "p", "a", None]
            logits = torch.zeros(1, len(script), len(labels))
            for t, c in enumerate(script):
                logits[0, t, 0 if c is None else ids[c]] = 10.0
            return logits.log_softmax(-1), None

    weights = tmp_path / "model.pt"
    weights.write_bytes(b"x")
    monkeypatch.setattr(type(MMS_FA), "get_model", lambda self, with_star=True, dl_kwargs=None: FakeModel())
    aligner = MMSAligner(weights_path=weights)
    res = aligner.align(torch.zeros(3200), ["नेक", "पा"], romanized=["nek", "pa"])
    assert res.ok and [w.word for w in res.words] == ["नेक", "पा"]
    assert res.words[0].start == pytest.approx(1 / 50) and res.words[1].end == pytest.approx(9 / 50)


# ----------------------------------------------------------------------------- trained recognizer


@pytest.mark.slow
def test_trained_recognizer_accepts_the_text_and_refuses_another(trained_recognizer):
    from leakloss.speech.corpus import builtin_sentences
    from leakloss.speech.synth import TEACHER_VOICES, speak_phones
    from leakloss.text.sites import SiteFinder

    rec = trained_recognizer
    finder = SiteFinder()
    s1, s2 = builtin_sentences()[:2]
    w1 = [w.nepali for w in finder(s1)]
    w2 = [w.nepali for w in finder(s2)]
    reading = speak_phones([p for p in w1 if p], TEACHER_VOICES[-1])
    with torch.no_grad():
        lp, n = rec(reading.waveform[None])
    good = align_words(lp[0], int(n[0]), w1, rec.phoneset, rec.frame_rate)
    bad = align_words(lp[0], int(n[0]), w2, rec.phoneset, rec.frame_rate)
    assert good.ok, good.reason
    assert not bad.ok and "does not match" in bad.reason
    # word boundaries close to espeak's own (within 80 ms at the start of words)
    truth = reading.word_spans
    aligned = [w for w in good.words]
    errs = [abs(w.start - truth[k][0]) for k, w in enumerate(aligned)]
    assert sorted(errs)[len(errs) // 2] < 0.08


def _result(word_spans: list[list[tuple[float, float]]]) -> AlignmentResult:
    from leakloss.acoustic.align import WordAlignment

    words = [WordAlignment(i, str(i), s[0][0], s[-1][1], s, 1.0) for i, s in enumerate(word_spans)]
    return AlignmentResult(ok=True, words=words)


def test_phone_segments_take_the_blank_frames_to_the_midpoints_and_no_further_than_the_reach():
    # one-frame spikes 0.1 s apart inside a word, then a 1 s pause before the next word
    res = _result([[(0.50, 0.52), (0.60, 0.62), (0.70, 0.72)], [(1.72, 1.74)]])
    first = res.phone_segments(0, reach_s=0.06)
    flat = lambda segs: [x for seg in segs for x in seg]  # approx takes flat lists
    assert flat(first) == pytest.approx([0.44, 0.56, 0.56, 0.66, 0.66, 0.78])
    assert flat(res.phone_segments(1, reach_s=0.06)) == pytest.approx([1.66, 1.80])
    assert res.phone_segments(2) is None  # not aligned
    assert flat(_result([[(0.01, 0.03)]]).phone_segments(0, reach_s=0.06)) == pytest.approx([0.0, 0.09])


def test_phone_segments_of_peaky_alignment_cover_the_phones_between_the_spikes(phoneset, peaky, scripted):
    script, _ = scripted(WORDS, frames_per_phone=1, gap=3)  # a 20 ms spike per phone, 60 ms of blank between
    res = align_words(peaky(script, phoneset), len(script), WORDS, phoneset, 50.0)
    assert res.ok
    for w in res.words:
        segs = res.phone_segments(w.index)
        assert all(b - a == pytest.approx(0.02) for a, b in w.phone_spans)
        assert all(sa <= a and b <= sb for (a, b), (sa, sb) in zip(w.phone_spans, segs))
        assert all(sb - sa == pytest.approx(0.08) for sa, sb in segs[1:-1])  # 20 ms + 30 ms each side


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 5)), min_size=1, max_size=12),
       st.integers(1, 4), st.floats(0.0, 0.2))
def test_phone_segments_are_ordered_disjoint_and_contain_their_spans(steps, per_word, reach):
    t, spans = 0, []
    for gap, width in steps:
        t += gap
        spans.append((t / 50.0, (t + width) / 50.0))
        t += width
    words = [spans[i:i + per_word] for i in range(0, len(spans), per_word)]
    res = _result(words)
    segs = [s for w in res.words for s in res.phone_segments(w.index, reach_s=reach)]
    assert len(segs) == len(spans)
    for (a, b), (sa, sb) in zip(spans, segs):
        assert sa <= a + 1e-12 and sb >= b - 1e-12
        assert a - sa <= reach + 1e-9 and sb - b <= reach + 1e-9
    assert all(segs[j][1] <= segs[j + 1][0] + 1e-12 for j in range(len(segs) - 1))


def test_no_monotone_path_fails_and_bad_arguments_are_reasons_not_exceptions():
    # A is possible only at frame 3, B only at frame 0: no path; exp(-inf) = 0 passed the finite check and, with
    # min_fit 0, the alignment claimed success through an impossible frame
    import math

    from leakloss.acoustic.align import align_columns, align_words

    em = torch.full((5, 3), -math.inf)
    em[:, 0] = math.log(0.5)  # blank anywhere
    em[3, 1], em[0, 2] = 0.0, 0.0
    for min_fit in (0.0, 0.6):
        result = align_columns(em, 5, [[1, 2]], 50.0, min_fit=min_fit)
        assert not result.ok and "no path" in result.reason
    lp = torch.log_softmax(torch.randn(20, 5), -1)

    class Set:
        blank = 0

        def tokens(self, phone):
            return frozenset({1})

    for kwargs, reason in (({"frame_rate": 0.0}, "frame_rate must be"), ({"frame_rate": float("nan")}, "frame_rate"),
                           ({"frame_rate": 50.0, "words": ["a"]}, "1 word names for 2 words")):
        result = align_words(lp, 20, [["x"], ["x"]], Set(), **kwargs)
        assert not result.ok and reason in result.reason, (kwargs, result.reason)
