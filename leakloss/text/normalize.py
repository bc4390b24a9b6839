"""Devanagari text normalisation and word splitting for the Nepali frontend.

Normal form (what :func:`normalize_devanagari` returns):

* Unicode NFC. The precomposed nukta letters U+0958..U+095F (क़ ख़ ग़ ज़ ड़ ढ़ फ़ य़) are composition
  exclusions, so NFC always writes them as base letter + NUKTA (U+093C); ऩ ऱ ऴ stay precomposed. Either
  input spelling therefore gives the same string.
* ZWJ / ZWNJ (they only select a glyph shape: half forms, eyelash र), soft hyphen, BOM, the word joiner, the
  bidirectional controls and the other invisible format characters (:data:`OTHER_INVISIBLE`) removed; a zero-width
  space read as a space.
* ``अ`` + ``ा`` (a common typing error for आ) folded to ``आ``, and likewise अो, अौ, आे, आै, एे to ओ, औ, ओ, औ, ऐ; ``ा`` + ``े``/``ै`` to ``ो``/``ौ``; a
  doubled vowel sign or virama written once; a virama directly before a vowel sign dropped; ASCII ``:`` between a
  Devanagari letter and a Devanagari letter (``दु:ख``) is the visarga typed on a Latin keyboard and becomes ``ः``; a
  colon before a space, a digit or the end is punctuation (``उदाहरण: यो``; a word-final visarga typed as ``अत:``
  is read as अत and a colon: type ``ः``).
* Devanagari digits are kept as they are; runs of whitespace become one space; ends stripped.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = [
    "TextError", "TextTooLongError", "WordToken", "normalize_devanagari", "split_words", "is_devanagari_letter",
    "MAX_WORD_CHARS", "MAX_TEXT_CHARS", "check_text_length", "punctuation_side",
]


class TextError(ValueError):
    """Text the frontend cannot pronounce (empty, not Devanagari, mixed script)."""


class TextTooLongError(TextError):
    """A word or a text beyond the frontend's length limits (:data:`MAX_WORD_CHARS`, :data:`MAX_TEXT_CHARS`)."""


#: Longest word (characters, normalised) the frontend pronounces: the longest of the 34k lexicon words has
#: 66; the spelling/phone alignments cost ``O(len(word)^2)`` time and memory, so a runaway token (a file
#: with no spaces) must be refused, not aligned.
MAX_WORD_CHARS = 100
#: Longest text (characters) one call of the site finder takes: about 150k words.
MAX_TEXT_CHARS = 1_000_000


def check_text_length(text: str) -> None:
    """Raise :class:`TextTooLongError` for a text over :data:`MAX_TEXT_CHARS` (words over
    :data:`MAX_WORD_CHARS` are refused where they are pronounced); :class:`TextError` for a non-string."""
    if not isinstance(text, str):
        raise TextError(f"expected a string, got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise TextTooLongError(f"the text has {len(text)} characters; the limit is {MAX_TEXT_CHARS}")


#: Devanagari signs the frontend's layers name (one home: g2p, morphology and the eval normaliser import them)
NUKTA = "\u093c"
CHANDRABINDU = "\u0901"
ANUSVARA = "\u0902"
VIRAMA = "\u094d"
VISARGA = "\u0903"
AVAGRAHA = "\u093d"  # ऽ: marks an elided vowel; a letter by category, no sound of its own
#: Invisible format characters a text is read without: joiners, soft hyphen, BOM, word joiner, the
#: bidirectional controls (they reorder how a text is shown, never how it is read) and :data:`OTHER_INVISIBLE`; a
#: zero-width space is a word boundary, read as a space.
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
#: Other invisible format characters (Unicode Cf, default-ignorable) a text is read without: invisible operators
#: U+2061-2064, deprecated format controls U+206A-206F, U+180E, interlinear annotation U+FFF9-FFFB, shorthand format
#: controls, musical format controls and the tag characters. Left in, one cut a word in two (its site lost) and read
#: as "punctuation" no one could see. Likewise the other default-ignorable characters that are marks or fillers: the
#: combining grapheme joiner U+034F, the variation selectors (but U+FE0E/U+FE0F, part of an emoji: a symbol), the
#: Mongolian free variation selectors, Khmer's inherent vowels and the Hangul fillers; left in, one made its Nepali
#: word "mixed script" (skipped, no sites).
OTHER_INVISIBLE = "".join(map(chr, [0x180E, *range(0x2061, 0x2065), *range(0x206A, 0x2070), *range(0xFFF9, 0xFFFC),
                                    *range(0x1BCA0, 0x1BCA4), *range(0x1D173, 0x1D17B), 0xE0001,
                                    *range(0xE0020, 0xE0080),
                                    0x034F, *range(0xFE00, 0xFE0E), *range(0xE0100, 0xE01F0), *range(0x180B, 0x180E),
                                    0x180F, 0x17B4, 0x17B5, 0x115F, 0x1160, 0x3164, 0xFFA0]))
#: Shown as ``[U+XXXX]`` by :func:`visible`: the bidirectional controls, the control characters (C0 but tab,
#: newline and return; DEL; C1) and the other invisible format characters (:data:`OTHER_INVISIBLE`).
_SHOWN_AS_CODES = {c: f"[U+{c:04X}]" for c in [*map(ord, BIDI_CONTROLS + OTHER_INVISIBLE),
                                               *(c for c in range(0x20) if c not in (9, 10, 13)), *range(0x7F, 0xA0)]}


def visible(text: str) -> str:
    """``text`` with bidirectional controls and control characters shown as ``[U+202E]`` / ``[U+001B]``, for a
    page or a terminal: raw, a bidi control reorders what follows it (a name shown other than it is), an ESC
    drives the terminal, a NUL is not allowed in HTML."""
    return text.translate(_SHOWN_AS_CODES)


_INVISIBLE = dict.fromkeys(map(ord, "\u200c\u200d\u00ad\ufeff\u2060" + BIDI_CONTROLS + OTHER_INVISIBLE), None) \
    | {0x200B: " "}
_WS = re.compile(r"\s+")
# ASCII colon used as visarga: only between a Devanagari letter/sign and a Devanagari letter (दु:ख). A colon
# before a space, a digit or the end is punctuation ("उदाहरण: यो", "समय: १०:३०"): made visarga, it changed the
# word's phones and glued "नाम:राम"-like words (until 2026-12-07, when only a digit after it kept it). A run of
# colons is one visarga (as a doubled sign is one), taken in one pass: one colon a pass was quadratic.
_COLON_VISARGA = re.compile(r"(?<=[\u0900-\u0963\u0971-\u097f]):+(?=[\u0904-\u0939\u0958-\u0961\u0972-\u097f])")

_DOUBLED_SIGN = re.compile(r"([\u0900-\u0903\u093c\u093e-\u094d])\1+")
_VIRAMA_MATRA = re.compile(r"\u094d([\u093e-\u094c])")



def is_devanagari_letter(ch: str) -> bool:
    """Letters, vowel signs and marks of the Devanagari block (not digits, dandas or abbreviation sign)."""
    cp = ord(ch)
    return 0x0900 <= cp <= 0x097F and not (0x0964 <= cp <= 0x096F) and ch != "\u0970"


def _is_dev_digit(ch: str) -> bool:
    return 0x0966 <= ord(ch) <= 0x096F


def normalize_devanagari(text: str) -> str:
    """Return ``text`` in the frontend's normal form (see the module docstring)."""
    if not isinstance(text, str):
        raise TextError(f"expected a string, got {type(text).__name__}")
    text = unicodedata.normalize("NFC", text).translate(_INVISIBLE)
    # One fold can make another (removing a virama joins ा+े; the first ':' made visarga leaves a doubled
    # one): repeat to the fixed point, so that normalising twice changes nothing. Each pass shortens the text
    # or leaves it as it was.
    while True:
        folded = _fold_once(text)
        if folded == text:
            break
        text = folded
    return _WS.sub(" ", text).strip()


#: An independent vowel + a vowel sign that renders as another independent vowel (अ+ो looks like ओ).
TYPED_INDEPENDENT = {"अा": "आ", "अो": "ओ", "अौ": "औ", "आे": "ओ", "आै": "औ", "एे": "ऐ"}


def _fold_once(text: str) -> str:
    for typed, vowel in TYPED_INDEPENDENT.items():
        text = text.replace(typed, vowel)
    # Typing errors that render like the intended word: ा+े / ा+ै typed for ो / ौ, a doubled sign,
    # a virama left before a vowel sign (्‍ा after the ZWJ is gone).
    text = text.replace("\u093e\u0947", "\u094b").replace("\u093e\u0948", "\u094c")
    text = _DOUBLED_SIGN.sub(r"\1", text)
    text = _VIRAMA_MATRA.sub(r"\1", text)
    text = _COLON_VISARGA.sub(VISARGA, text)
    # Removing ZWJ can leave sequences NFC would order differently; normalise once more.
    return unicodedata.normalize("NFC", text)


@dataclass(frozen=True)
class WordToken:
    """One item of the text. ``skipped`` is why it gets no pronunciation, or None for a Nepali word."""

    index: int
    text: str
    skipped: str | None


# Emoji presentation / variation selectors and skin-tone / keycap marks: part of the symbol before them.
_SYMBOL_MARKS = frozenset("\ufe0e\ufe0f\u20e3") | frozenset(chr(c) for c in range(0x1F3FB, 0x1F400))


def _char_class(ch: str) -> str:
    """``dev`` / ``digit`` / ``other`` (letters and marks of other scripts) / ``symbol`` (emoji, math,
    currency and other Unicode symbols, category S*) / ``control`` (Cc, Cs) / ``punct`` (the rest: dandas, quotes,
    dashes...)."""
    if not ch:  # the neighbour of the first/last character
        return "none"
    if unicodedata.category(ch) in ("Cc", "Cs"):  # NUL, BEL, ESC, a lone surrogate: typed by no one
        return "control"
    if is_devanagari_letter(ch):
        return "dev"
    if _is_dev_digit(ch) or ch.isdigit():
        return "digit"
    cat = unicodedata.category(ch)
    if ch in _SYMBOL_MARKS or cat.startswith("S") or cat == "Co" or 0x1F000 <= ord(ch) <= 0x1FAFF:
        return "symbol"
    if ch.isalpha() or cat.startswith("M"):
        return "other"
    return "punct"


_SEPARABLE = frozenset({"punct", "symbol", "control"})


def _classify(chunk: str) -> str | None:
    classes = {_char_class(c) for c in chunk if c not in ".,"}  # separators inside a number
    if classes == {"dev"}:
        # A word cannot start with a vowel sign, virama or nukta.
        if unicodedata.category(chunk[0]).startswith("M"):
            return "stray vowel sign"
        if not any(unicodedata.category(c) == "Lo" and c != AVAGRAHA for c in chunk):
            return "no letter to pronounce"  # e.g. a lone avagraha ऽ: signs only
        return None
    if classes == {"digit"}:
        return "digits"
    if classes == {"other"}:
        return "not Devanagari"
    return "mixed script"


def split_words(text: str) -> list[WordToken]:
    """Split normalised text into word tokens.

    Every whitespace-separated item appears: leading/trailing/inner punctuation (dandas, quotes, commas,
    hyphens, ...) is split off into its own ``"punctuation"`` entry, and symbols (emoji, ``+ % ₹ ©``...)
    into their own ``"symbol"`` entry (a run mixing both is ``"symbol"``); runs of digits (with the ``.``/``,``
    inside a number) are ``"digits"`` entries, also where they are glued to a Devanagari word (``२०८०सालमा``: the
    digits, then the word); Latin and other scripts are ``"not Devanagari"``; a chunk mixing Devanagari letters
    with other letters is ``"mixed script"``; control characters (NUL, BEL,
    ESC...) are split off as ``"control character U+0007"`` entries (not read; the scorer warns about them).
    """
    out: list[WordToken] = []
    for item in normalize_devanagari(text).split(" "):
        if not item:
            continue
        for chunk in (part for piece in _split_punct(item) for part in _split_digits(piece)):
            classes = {_char_class(c) for c in chunk}
            if "control" in classes:  # was "punctuation": a word nobody sees, never warned about
                codes = sorted({f"U+{ord(c):04X}" for c in chunk if _char_class(c) == "control"})
                reason: str | None = f"control character{'s' if len(codes) > 1 else ''} {' '.join(codes)}"
            elif classes == {"punct"}:
                reason = "punctuation"
            elif classes <= _SEPARABLE:
                reason = "symbol"
            else:
                reason = _classify(chunk)
            out.append(WordToken(len(out), chunk, reason))
    return out


def split_text_words(text: str) -> list[str]:
    """The Devanagari words of ``text`` the frontend reads, in normal form (numbers, Latin words and punctuation
    left out): the words a key word must be one of, and the words a teacher voice says."""
    return [tok.text for tok in split_words(normalize_devanagari(text)) if tok.skipped is None]


def punctuation_side(token: str) -> str | None:
    """Which word a token of punctuation and symbols only belongs to when a text is shown as words.

    ``"next"`` for opening marks only (``( [ “ ‘ «``: Unicode Ps / Pi), ``"previous"`` for any other such token
    (``? । , ” ! %``...); ``None`` for a token that is not all punctuation and symbols (a word, digits, a control
    character: shown as it is).
    """
    classes = {_char_class(c) for c in token}
    if not token or not classes <= {"punct", "symbol"}:
        return None
    return "next" if all(unicodedata.category(c) in ("Ps", "Pi") for c in token) else "previous"


#: the fewest letters (consonants and independent vowels) a run glued to digits needs to be cut off them as a word:
#: one-letter runs are ordinal and unit suffixes said with the number (१लो, १०औँ, रु५००), not words
MIN_GLUED_WORD_LETTERS = 2


def _split_digits(chunk: str) -> list[str]:
    """A chunk of Devanagari letters and digits only cut where they meet (``२०८०सालमा`` -> ``२०८०``, ``सालमा``): typed
    glued, the word was "mixed script" and lost its sites. Kept whole (``"mixed script"``) when a letter run would
    start with a vowel sign or virama (no word starts so) or has fewer than :data:`MIN_GLUED_WORD_LETTERS` letters."""
    if {_char_class(c) for c in chunk if c not in ".,"} != {"dev", "digit"}:
        return [chunk]
    parts: list[str] = []
    for i, ch in enumerate(chunk):
        kind = "dev" if _char_class(ch) == "dev" else "digit"  # . and , here sit inside a number (_split_punct)
        if parts and kind == ("dev" if _char_class(parts[-1][-1]) == "dev" else "digit"):
            parts[-1] += ch
        else:
            parts.append(ch)
    words = [p for p in parts if _char_class(p[0]) == "dev"]
    if any(unicodedata.category(p[0]).startswith("M")
           or sum(unicodedata.category(c) == "Lo" for c in p) < MIN_GLUED_WORD_LETTERS for p in words):
        return [chunk]
    return parts


def _split_punct(item: str) -> list[str]:
    """Cut an item into maximal runs of punctuation and of non-punctuation (digit groups keep . and ,)."""
    chunks: list[str] = []
    cur = ""
    cur_punct: bool | None = None
    for i, ch in enumerate(item):
        punct = _char_class(ch) in _SEPARABLE
        if punct and ch in ".,":
            # 1,000 / ३.५ : separator between digits belongs to the number.
            prev = item[i - 1] if i else ""
            nxt = item[i + 1] if i + 1 < len(item) else ""
            if _char_class(prev) == "digit" and _char_class(nxt) == "digit":
                punct = False
        if cur and punct != cur_punct:
            chunks.append(cur)
            cur = ""
        cur += ch
        cur_punct = punct
    if cur:
        chunks.append(cur)
    return chunks
