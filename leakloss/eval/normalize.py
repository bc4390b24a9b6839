"""Devanagari-safe text normalisation and error rates (CER, WER) for ASR round trips.

The normaliser removes only differences that are spelling, not recognition errors:
punctuation, zero-width joiners, case, whitespace, the nukta dot (ज़ = ज) and the
chandrabindu/anusvara distinction (हाँ = हां). It keeps every vowel sign (matra) and the
virama, because in Devanagari those are letters of the word: a mark-stripping normaliser
(Whisper's ``BasicTextNormalizer``) turns "चाहिए" into "च ह ए" and makes WER meaningless.

Digits are not converted (५०० and 500 stay different): choose one form for references.
"""

from __future__ import annotations

import unicodedata

import jiwer

from leakloss.text.normalize import ANUSVARA, CHANDRABINDU, NUKTA, OTHER_INVISIBLE

__all__ = ["normalize_for_asr", "cer", "wer"]

# Removed outright: they join or split glyphs inside a word, they are not word breaks.
# ZWNJ, ZWJ, BOM, soft hyphen, word joiner, and the other invisible format characters the frontend reads without
_DELETE = {"\u200c", "\u200d", "\ufeff", "\u00ad", "\u2060", *OTHER_INVISIBLE}
# ASCII symbols used as punctuation in Nepali typing ("|" for the danda) but not in category P.
_PUNCT_SYMBOLS = {"|", "`", "~", "^"}


def _is_separator(ch: str) -> bool:
    """True for characters that become a space: punctuation (incl. danda ।॥) and ZWSP."""
    return unicodedata.category(ch).startswith("P") or ch in _PUNCT_SYMBOLS or ch == "\u200b"


def normalize_for_asr(text: str) -> str:
    """Normalise Devanagari (or mixed-script) text before computing CER/WER.

    Steps: fold nukta (decomposed or precomposed, e.g. क़ U+0958 -> क), fold chandrabindu into
    anusvara, lower-case, delete ZWJ/ZWNJ and other invisible joiners, replace punctuation
    (danda, double danda, abbreviation sign, Latin punctuation, "|") with spaces, collapse
    whitespace, NFC. Vowel signs and virama are kept, so कि, का, क् and क remain distinct.

    Raises:
        TypeError: ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    # NFD splits the precomposed nukta letters (U+0929, U+0931, U+0934, U+0958-U+095F) into
    # base + nukta, so one removal folds both spellings.
    text = unicodedata.normalize("NFD", text).replace(NUKTA, "")
    text = text.replace(CHANDRABINDU, ANUSVARA).lower()
    text = "".join(
        "" if ch in _DELETE else " " if _is_separator(ch) else ch for ch in text
    )
    return unicodedata.normalize("NFC", " ".join(text.split()))


def _prepare(reference: str, hypothesis: str) -> tuple[str, str]:
    if not isinstance(reference, str) or not isinstance(hypothesis, str):
        raise TypeError(
            f"reference and hypothesis must be str, got {type(reference).__name__} "
            f"and {type(hypothesis).__name__}"
        )
    ref, hyp = normalize_for_asr(reference), normalize_for_asr(hypothesis)
    if not ref:
        raise ValueError(
            f"reference {reference!r} is empty after normalisation; an error rate needs "
            "at least one reference character"
        )
    return ref, hyp


def cer(reference: str, hypothesis: str) -> float:
    """Character error rate of ``hypothesis`` against ``reference`` after :func:`normalize_for_asr`.

    Characters are Unicode code points of the NFC text, spaces included, so a wrong matra
    or a dropped virama is one error. An empty hypothesis gives 1.0. Can exceed 1.0.

    Raises:
        ValueError: the reference is empty after normalisation.
    """
    ref, hyp = _prepare(reference, hypothesis)
    return float(jiwer.cer(ref, hyp))


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate after :func:`normalize_for_asr` (words split on whitespace).

    Raises:
        ValueError: the reference is empty after normalisation.
    """
    ref, hyp = _prepare(reference, hypothesis)
    return float(jiwer.wer(ref, hyp))
