"""Tests for leakloss.eval.normalize: Devanagari-safe normalisation, CER and WER."""

from __future__ import annotations

import random
import unicodedata

import pytest

from leakloss.eval.normalize import cer, normalize_for_asr, wer


def levenshtein(a: list, b: list) -> int:
    """Naive full-table edit distance (reference implementation)."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        table[i][0] = i
    for j in range(len(b) + 1):
        table[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            table[i][j] = min(
                table[i - 1][j] + 1,
                table[i][j - 1] + 1,
                table[i - 1][j - 1] + (a[i - 1] != b[j - 1]),
            )
    return table[len(a)][len(b)]


# --- what must stay different --------------------------------------------------------------------

def test_matras_and_virama_are_kept():
    forms = ["क", "कि", "का", "की", "कु", "के", "क्", "क्\u200d"]
    out = [normalize_for_asr(f) for f in forms]
    assert out[:7] == forms[:7]  # untouched, not split into fragments
    assert len(set(out[:7])) == 7
    assert out[7] == "क्"  # ZWJ removed, virama kept
    assert out[7] != normalize_for_asr("कि") and out[7] != normalize_for_asr("का")
    assert out[7] != normalize_for_asr("क")


def test_word_with_matras_is_one_word():
    # The failure of a mark-stripping normaliser: "चाहिए" -> "च ह ए".
    assert normalize_for_asr("चाहिए") == "चाहिए"
    assert len(normalize_for_asr("मुझे कल सुबह की अपॉइंटमेंट चाहिए।").split()) == 6


def test_aspiration_and_retroflex_stay_distinct():
    # The contrasts leakloss exists to find must never be folded away.
    for a, b in [("काल", "खाल"), ("टाल", "ताल"), ("दाल", "डाल"), ("बात", "भात")]:
        assert normalize_for_asr(a) != normalize_for_asr(b)


# --- what is folded -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "with_nukta, without",
    [
        ("\u0958", "क"), ("\u0959", "ख"), ("\u095a", "ग"), ("\u095b", "ज"),
        ("\u095c", "ड"), ("\u095d", "ढ"), ("\u095e", "फ"), ("\u095f", "य"),
        ("\u0929", "न"), ("\u0931", "र"), ("\u0934", "ळ"),
        ("क\u093c", "क"), ("ज़रूर", "जरूर"), ("फ़ोन", "फोन"),
    ],
)
def test_nukta_folded_precomposed_and_decomposed(with_nukta, without):
    assert normalize_for_asr(with_nukta) == without


def test_chandrabindu_folds_to_anusvara():
    assert normalize_for_asr("हाँ") == normalize_for_asr("हां") == "हां"
    assert normalize_for_asr("आँखा") == "आंखा"


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("म घर जान्छु।", "म घर जान्छु"),
        ("पहिलो॥ दोस्रो", "पहिलो दोस्रो"),
        ("के हो? ठीक छ!", "के हो ठीक छ"),
        ("नमस्ते, \"साथी\" (राम)", "नमस्ते साथी राम"),
        ("म घर जान्छु | अनि", "म घर जान्छु अनि"),
        ("डा॰ शर्मा", "डा शर्मा"),
        ("  धेरै\t\n  खाली   ठाउँ ", "धेरै खाली ठाउं"),
        ("Hello, WORLD.", "hello world"),
        ("मेरो\u200c नाम", "मेरो नाम"),
        ("शब्द\u200bशब्द", "शब्द शब्द"),
        ("", ""),
        ("।।, !", ""),
    ],
)
def test_punctuation_joiners_whitespace_case(raw, expected):
    assert normalize_for_asr(raw) == expected


def test_output_is_nfc_and_idempotent():
    raw = "Cafe\u0301 ज़रूर हाँ।"
    out = normalize_for_asr(raw)
    assert out == unicodedata.normalize("NFC", out)
    assert out == "café जरूर हां"
    assert normalize_for_asr(out) == out


def test_digits_are_not_converted():
    assert normalize_for_asr("५००") == "५००" and normalize_for_asr("500") == "500"


def test_rejects_non_str():
    with pytest.raises(TypeError, match="str"):
        normalize_for_asr(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str"):
        cer(b"abc", "abc")  # type: ignore[arg-type]


# --- error rates ---------------------------------------------------------------------------------

def test_wer_seed_example():
    # Seed 002: writing "appointment" in Latin costs 1 of 6 words against a Devanagari reference,
    # and nothing against the mixed-script reference.
    hyp = "मुझे कल सुबह की appointment चाहिए"
    assert wer("मुझे कल सुबह की अपॉइंटमेंट चाहिए।", hyp) == pytest.approx(1 / 6)
    assert wer("मुझे कल सुबह की appointment चाहिए।", hyp) == 0.0


def test_spelling_variants_are_not_errors():
    assert cer("ज़रूर हाँ।", "जरूर हां") == 0.0
    assert wer("ज़रूर, हाँ", "जरूर हां") == 0.0


def test_a_wrong_matra_is_one_character_error():
    assert cer("कि", "का") == pytest.approx(1 / 2)
    assert cer("दाल", "डाल") == pytest.approx(1 / 3)
    assert wer("म दाल खान्छु", "म डाल खान्छु") == pytest.approx(1 / 3)


def test_empty_hypothesis_and_insertions():
    assert cer("नमस्ते", "") == 1.0
    assert wer("म घर", "") == 1.0
    assert wer("म", "म घर जान्छु") == 2.0  # insertions can push WER above 1


def test_empty_reference_raises():
    with pytest.raises(ValueError, match="empty after normalisation"):
        cer("", "केही")
    with pytest.raises(ValueError, match="empty after normalisation"):
        wer("।", "केही")


def test_against_naive_edit_distance():
    rng = random.Random(0)
    alphabet = list("कखगघचछजटठडतथदधनपफबभमयरलवसह") + ["ा", "ि", "ी", "ु", "ू", "े", "ै", "ो", "्", "ं"]
    for _ in range(200):
        def word() -> str:
            return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))

        ref = " ".join(word() for _ in range(rng.randint(1, 6)))
        hyp = " ".join(word() for _ in range(rng.randint(0, 6)))
        r, h = normalize_for_asr(ref), normalize_for_asr(hyp)
        assert cer(ref, hyp) == pytest.approx(levenshtein(list(r), list(h)) / len(r))
        assert wer(ref, hyp) == pytest.approx(levenshtein(r.split(), h.split()) / len(r.split()))
