"""Tests for leakloss.eval.confusion: edits of one minimum-edit alignment, summing to the edit distance."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torchaudio.functional import edit_distance

from leakloss.eval.confusion import GAP, corpus_confusions, phone_confusions
from leakloss.scorer import phone_error_rate
from leakloss.text.phones import coarse

PHONES = st.lists(st.sampled_from(["k", "ʌ", "a", "aː", "t", "ə", "n", "i"]), max_size=12)


def apply_edits(reference: list[str], hypothesis: list[str], edits: Counter) -> bool:
    """The edits account for the hypothesis: every reference phone kept or edited, every inserted one listed."""
    subs = sum(c for (r, h), c in edits.items() if r != GAP and h != GAP)
    dels = sum(c for (r, h), c in edits.items() if h == GAP)
    ins = sum(c for (r, h), c in edits.items() if r == GAP)
    return len(reference) - dels + ins == len(hypothesis) and subs + dels <= len(reference)


@given(PHONES, PHONES)
@settings(max_examples=200, deadline=None)
def test_counts_sum_to_the_edit_distance(reference, hypothesis):
    edits = phone_confusions(reference, hypothesis, str)  # the phones as they are
    assert sum(edits.values()) == edit_distance(reference, hypothesis)
    assert apply_edits(reference, hypothesis, edits)
    assert all(r != h for r, h in edits)


@given(PHONES, PHONES)
@settings(max_examples=100, deadline=None)
def test_phone_class_breaks_down_the_phone_error_rate(reference, hypothesis):
    edits = phone_confusions(reference, hypothesis, coarse)
    if not reference:  # no rate of nothing
        with pytest.raises(ValueError, match="no phones"):
            phone_error_rate(reference, hypothesis, coarse)
        return
    assert abs(sum(edits.values()) / len(reference) - phone_error_rate(reference, hypothesis, coarse)) < 1e-12
    assert all(coarse(p) == p for pair in edits for p in pair if p != GAP)


def test_named_edits():
    assert phone_confusions(["k", "ʌ", "t"], ["k", "a"], str) == Counter({("ʌ", "a"): 1, ("t", GAP): 1})
    assert phone_confusions([], ["j"], str) == Counter({(GAP, "j"): 1})
    assert phone_confusions(["a"], ["a"], str) == Counter()
    assert phone_confusions(["aː"], ["a"], coarse) == Counter()  # length dropped: the same coarse phone


def test_corpus_confusions_sum_over_pairs():
    pairs = [(["k", "ʌ"], ["k", "a"]), (["ʌ", "t"], ["a"])]
    edits, phones = corpus_confusions(pairs, str)
    assert edits == Counter({("ʌ", "a"): 2, ("t", GAP): 1}) and phones == 4


@given(PHONES, PHONES)
@settings(max_examples=100, deadline=None)
def test_by_default_they_break_down_the_default_phone_error_rate(reference, hypothesis):
    """The default phone class is every phone error rate's (canonical): ʌ heard as ə was a confusion, no error."""
    from leakloss.eval.metrics import phone_error_rate as corpus_per

    edits, phones = corpus_confusions([(reference, hypothesis)])
    if reference:
        assert abs(sum(edits.values()) / phones - float(corpus_per([reference], [hypothesis]))) < 1e-6
    assert phone_confusions(["k", "ʌ", "t"], ["k", "ə", "t"]) == Counter()
