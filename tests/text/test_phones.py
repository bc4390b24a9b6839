"""leakloss.text.phones: espeak's symbols cleaned into the phone inventory."""

from __future__ import annotations

import pytest

from leakloss.text.phones import clean_espeak_ipa, is_vowel


@pytest.mark.parametrize("raw, clean", [("ʌː", "ʌ"), ("oːː", "oː"), ("əə", "ə"), ("iːː", "iː"),
                                        ("ˈaː", "aː"), ("ʌɪ", "ʌi̯"), ("g", "ɡ"), ("tː", "tː"), ("kʰ", "kʰ")])
def test_prolonged_vowels_become_the_vowel_they_prolong(raw, clean):
    assert clean_espeak_ipa(raw) == clean
    assert is_vowel(clean_espeak_ipa(raw)) == is_vowel(clean)  # geminates stay consonants
