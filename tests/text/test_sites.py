import pytest

from leakloss.text.phoneset import PhoneSet
from leakloss.text.sites import SiteFinder, align_phones, find_sites


@pytest.fixture(scope="module")
def finder():
    return SiteFinder()


def _word(finder, word):
    (w,) = [w for w in finder(word) if w.skipped is None]
    return w


def test_nekpa_testable_deletion_after_ka(finder):
    w = _word(finder, "नेकपा")
    deletions = [s for s in w.sites if s.kind == "deletion"]
    assert len(deletions) == 1
    site = deletions[0]
    assert site.testable and site.nepali == "ʌ" and site.hindi is None
    assert w.nepali[site.position - 1] == "k"  # the vowel after क


def test_hain_quality_site(finder):
    w = _word(finder, "हैन")
    quality = [s for s in w.sites if s.kind == "quality"]
    assert [(s.nepali, s.hindi) for s in quality] == [("ʌi̯", "ɛː")]
    assert quality[0].testable


def test_tarkari_no_testable_deletion_after_ra(finder):
    w = _word(finder, "तरकारी")
    r_index = w.nepali.index("r")
    assert not [s for s in w.sites if s.kind == "deletion" and s.testable and s.position == r_index + 1]


def test_low_confidence_sites_not_testable():
    sites = find_sites(["n", "e", "k", "ʌ", "p", "aː"], ["n", "eː", "k", "p", "aː"], confidence="low")
    assert sites and not any(s.testable for s in sites)
    sites = find_sites(["n", "e", "k", "ʌ", "p", "aː"], ["n", "eː", "k", "p", "aː"], confidence="low",
                       min_confidence="low")
    assert all(s.testable for s in sites)


def test_open_central_vowels_are_one_phone():
    assert find_sites(["t", "ʌ", "r"], ["t", "ə", "ɾ"]) == []


def test_alignment_with_vocabulary_phoneset():
    vocab = {"<pad>": 0, "n": 1, "e": 2, "k": 3, "ə": 4, "p": 5, "a": 6, "ɛ": 7, "h": 8, "aɪ": 9}
    ps = PhoneSet(vocab)
    sites = find_sites(["n", "e", "k", "ʌ", "p", "aː"], ["n", "eː", "k", "p", "aː"], phoneset=ps)
    assert [(s.kind, s.position) for s in sites] == [("deletion", 3)]
    sites = find_sites(["h", "ʌi̯", "n"], ["h", "ɛː", "n"], phoneset=ps)
    assert [(s.kind, s.nepali, s.hindi) for s in sites] == [("quality", "ʌi̯", "ɛː")]


def test_align_phones_pairs_cover_both_sequences():
    a, b = ["k", "ʌ", "m", "ʌ", "l"], ["k", "ə", "m", "l"]
    pairs = align_phones(a, b)
    assert [i for i, _ in pairs if i is not None] == list(range(len(a)))
    assert [j for _, j in pairs if j is not None] == list(range(len(b)))


def test_non_devanagari_words_are_skipped_not_dropped(finder):
    words = finder("नेकपा Hello 123 , हैन")
    assert [w.word for w in words] == ["नेकपा", "Hello", "123", ",", "हैन"]
    assert [w.skipped is not None for w in words] == [False, True, True, True, False]
    assert all(w.sites == [] for w in words if w.skipped)


def test_json_shape(finder):
    d = finder.to_json("नेकपा।")
    w = d["words"][0]
    assert set(w) >= {"index", "word", "nepali", "hindi", "confidence", "sites"}
    assert set(w["sites"][0]) == {"kind", "position", "nepali", "hindi", "testable"}
