import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.text.phones import EQUIVALENCE_CLASSES, NEPALI_PHONES, canonical, coarse, espeak_phoneme_input
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


@pytest.mark.parametrize("phone, expected", [
    ("aː", "a"), ("ɾ", "r"), ("ə", "ʌ"), ("ɐ", "ʌ"), ("ʌ", "ʌ"), ("iː", "i"), ("ɪ", "i"), ("uː", "u"),
    ("ã", "a"), ("a\u0303ː", "a"), ("ˈeː", "e"), ("ˌoː", "o"), ("ɛː", "ɛ"), ("ɔː", "ɔ"), ("ʌɪ", "ʌi̯"),
    ("g", "ɡ"), ("kʰ", "kʰ"), ("ɜː", "ʌ"), ("ɾː", "r"),
])
def test_coarse_documented_examples(phone, expected):
    assert coarse(phone) == expected


def test_coarse_merges_long_and_short_but_keeps_aspiration_and_place():
    assert coarse("aː") == coarse("a") != coarse("ʌ")
    assert coarse("t") != coarse("tʰ") and coarse("t") != coarse("ʈ") and coarse("n") != coarse("ɳ")


_MARKS = ["ː", "\u0303", "ˈ", "ˌ", "\u032f", "ʰ", " ", "\u0301"]
_SYMBOLS = sorted({p for cls in EQUIVALENCE_CLASSES for p in cls} | set(NEPALI_PHONES) | {"ɜ", "ɾ", "g", "ã", "ẽ"})


@given(st.lists(st.one_of(st.sampled_from(_SYMBOLS), st.sampled_from(_MARKS), st.characters()), max_size=5)
       .map("".join))
@settings(max_examples=400, deadline=None)
def test_coarse_is_idempotent_and_drops_length_and_nasalisation(phone):
    once = coarse(phone)
    assert coarse(once) == once
    assert "ː" not in once and "\u0303" not in unicodedata.normalize("NFD", once)
    assert "ˈ" not in once and "ˌ" not in once
