"""leakloss.text.phones: espeak's symbols cleaned into the phone inventory."""

from __future__ import annotations

import pytest

from leakloss.text.phones import clean_espeak_ipa, is_vowel, unprolonged


@pytest.mark.parametrize("raw, clean", [("ʌː", "ʌ"), ("oːː", "oː"), ("əə", "ə"), ("iːː", "iː"),
                                        ("ˈaː", "aː"), ("ʌɪ", "ʌi̯"), ("g", "ɡ"), ("tː", "tː"), ("kʰ", "kʰ")])
def test_prolonged_vowels_become_the_vowel_they_prolong(raw, clean):
    assert unprolonged(clean_espeak_ipa(raw)) == clean
    assert is_vowel(unprolonged(clean_espeak_ipa(raw))) == is_vowel(clean)  # geminates stay consonants


def test_cleaning_keeps_a_recognizers_long_vowels():
    assert clean_espeak_ipa("ɜː") == "ɜː"  # a vocabulary token of its own: merging it changed phone ids
