import pytest

from leakloss.text.phones import NEPALI_PHONES, canonical, espeak_phoneme_input
from leakloss.text.phoneset import PhoneSet, UnmappablePhoneError


def test_open_central_vowel_accepts_all_symbols():
    ps = PhoneSet({"<pad>": 0, "ʌ": 1, "ə": 2, "ɐ": 3, "k": 4})
    assert ps.tokens("ʌ") == {1, 2, 3}
    assert ps.tokens("ə") == {1, 2, 3}


def test_length_variants_and_diacritic_fallback():
    ps = PhoneSet({"<pad>": 0, "i": 1, "iː": 2, "a": 3, "tʃ": 4, "aɪ": 5})
    assert ps.tokens("i") == {1, 2}
    assert ps.tokens("aː") == {3}
    assert ps.tokens("c") == {4}
    assert ps.tokens("ʌi̯") == {5}
    assert ps.tokens("aː\u0303") == {3}  # nasalised vowel falls back to the vowel


def test_unmappable_phone_raises():
    ps = PhoneSet({"<pad>": 0, "a": 1})
    with pytest.raises(UnmappablePhoneError, match="ʈʰ"):
        ps.tokens("ʈʰ")


def test_missing_blank_rejected():
    with pytest.raises(ValueError, match="blank"):
        PhoneSet({"a": 0})


def test_canonical_merges_equivalents():
    assert canonical("ə") == canonical("ʌ") == "ʌ"
    assert canonical("ˈiː") == "i"
    assert canonical("ɾ") == "r"
    assert canonical("ʌɪ") == "ʌi̯"


def test_every_nepali_phone_has_an_espeak_mnemonic():
    for phone in NEPALI_PHONES:
        assert espeak_phoneme_input([phone])
