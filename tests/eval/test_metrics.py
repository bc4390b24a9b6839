"""leakloss.eval.metrics: corpus CER / WER / PER as functions and torchmetrics classes, against jiwer and a
naive edit distance."""

from __future__ import annotations

import jiwer
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.eval.metrics import (
    CharErrorRate, PhoneErrorRate, WordErrorRate, char_error_rate, phone_error_rate, word_error_rate,
)
from leakloss.eval.normalize import normalize_for_asr
from tests.eval.test_normalize import levenshtein

# Devanagari letters, signs and marks the normaliser treats specially, Latin, punctuation and spaces
ALPHABET = list("कखगघनमरलसहािीुूेैोौंँ़्ज़ab ।,.\u200d")
texts = st.text(alphabet=ALPHABET, min_size=0, max_size=30)
refs = texts.filter(lambda t: normalize_for_asr(t) != "")
words = refs.filter(lambda t: normalize_for_asr(t).split() != [])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(refs, texts), min_size=1, max_size=5))
def test_char_error_rate_is_jiwers_corpus_cer_on_normalised_text(pairs):
    r, h = [p[0] for p in pairs], [p[1] for p in pairs]
    expected = jiwer.cer([normalize_for_asr(t) for t in r], [normalize_for_asr(t) for t in h])
    assert float(char_error_rate(r, h)) == pytest.approx(expected, rel=1e-6)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(words, texts), min_size=1, max_size=5))
def test_word_error_rate_is_jiwers_corpus_wer_on_normalised_text(pairs):
    r, h = [p[0] for p in pairs], [p[1] for p in pairs]
    expected = jiwer.wer([normalize_for_asr(t) for t in r], [normalize_for_asr(t) for t in h])
    assert float(word_error_rate(r, h)) == pytest.approx(expected, rel=1e-6)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(["ʌ", "ə", "k", "aː", "n"]), min_size=1, max_size=8),
                          st.lists(st.sampled_from(["ʌ", "ə", "k", "aː", "n"]), max_size=8)), min_size=1, max_size=4))
def test_phone_error_rate_is_summed_edits_over_summed_lengths(pairs):
    same = {"ə": "ʌ"}  # canonical(): ʌ and ə are one phone
    edits = sum(levenshtein([same.get(p, p) for p in r], [same.get(p, p) for p in h]) for r, h in pairs)
    total = sum(len(r) for r, _ in pairs)
    assert float(phone_error_rate([r for r, _ in pairs], [h for _, h in pairs])) == pytest.approx(edits / total)


@pytest.mark.parametrize("metric, function, corpus", [
    (CharErrorRate, char_error_rate, (["नेकपा आयो", "हैन"], ["नेक्पा आयो", "हेन"])),
    (WordErrorRate, word_error_rate, (["नेकपा आयो", "हैन त"], ["नेक्पा आयो", "हेन त"])),
    (PhoneErrorRate, phone_error_rate, ([["n", "e", "k", "ʌ"], ["ɦ", "ʌi̯", "n"]], [["n", "e", "k"], ["ɦ", "ɛː", "n"]])),
])
def test_class_updates_equal_the_function_on_the_whole_corpus(metric, function, corpus):
    refs_, hyps_ = corpus
    m = metric()
    for r, h in zip(refs_, hyps_):
        m.update([r], [h])
    assert torch.equal(m.compute(), function(refs_, hyps_))
    assert m.compute().dtype == torch.float32 and 0 < float(m.compute()) < 1
    m.reset()
    with pytest.warns(UserWarning, match="before the ``update``"), pytest.raises(ValueError, match="no reference units"):
        m.compute()


def test_a_single_string_is_one_pair():
    assert float(char_error_rate("कमल", "कमला")) == pytest.approx(1 / 3)
    assert float(word_error_rate("नेकपा आयो", "नेकपा")) == pytest.approx(1 / 2)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="reference 1 is empty"):
        char_error_rate(["क", "।।"], ["क", "क"])  # punctuation only: empty after normalisation
    with pytest.raises(ValueError, match="2 references, 1 hypotheses"):
        word_error_rate(["क", "ख"], ["क"])
    with pytest.raises(TypeError, match="sequence of str"):
        char_error_rate(["क"], [None])


def test_one_utterances_phones_unwrapped_are_refused_not_misread():
    ref, hyp = ["b", "ʌi̯", "ʈʰ", "ʌ"], ["b", "ɛː", "ʈʰ", "ə"]
    assert float(phone_error_rate([ref], [hyp])) == pytest.approx(0.25)
    with pytest.raises(TypeError, match=r"references\[0\] must be a list of phones, got str"):
        phone_error_rate(ref, hyp)  # each phone string was split into characters: 0.3636, no error
    metric = PhoneErrorRate()
    with pytest.raises(TypeError, match="one utterance is"):
        metric.update(ref, hyp)
    with pytest.raises(TypeError, match=r"hypotheses\[0\] holds a NoneType, not a phone string"):
        phone_error_rate([ref], [["b", None]])
    with pytest.raises(TypeError, match="list of phone lists, got str"):
        phone_error_rate("bʌ", "bə")
