"""Nepali letter-to-sound rules: a Devanagari word -> IPA phones (from :mod:`leakloss.text.phones`) with
inherent-vowel (schwa) rules (:func:`_decide_schwas`), the stem/suffix split, the alignment of a lexicon's phones
to a spelling (:func:`inherent_vowel_pattern`) and the lexicon readers. The lowest layer of the frontend: the
learned retention model (:mod:`leakloss.text.retention`) takes the rules' decisions as features, and
:class:`leakloss.text.frontend.NepaliFrontend` puts lexicon, model and rules together; neither is imported here.

Conjunct decisions (documented here because they are choices): ज्ञ = ``ɡ j`` (Nepali "gya"), क्ष =
``k cʰ j`` (Nepali "kchhya"), श/ष/स = ``s``, व = ``b`` word-initially and ``w`` elsewhere, ऋ/ृ = ``r i``,
ण = ``ɳ``, visarga is silent (it keeps the vowel before it), anusvara before a stop/nasal = the homorganic
nasal consonant and otherwise (before य र ल व श ष स ह, before a vowel, word-finally) a nasalised vowel,
chandrabindu = a nasalised vowel. Nukta letters: क़ ख़ ग़ fold to k kʰ ɡ, ज़ = z, फ़ = f, ड़ ढ़ = ɽ ɽʰ.
"""

from __future__ import annotations

import unicodedata

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Literal, Sequence

from leakloss.checks import echoed
from leakloss.text.normalize import (  # noqa: F401  (the signs stay importable from here)
    ANUSVARA, AVAGRAHA, CHANDRABINDU, MAX_WORD_CHARS, NUKTA, TYPED_INDEPENDENT, VIRAMA, VISARGA, TextError,
    TextTooLongError, normalize_devanagari,
)
from leakloss.text.phones import NASAL, NEPALI_PHONES, equivalents, is_vowel, strip_nasal
from leakloss.textfile import text_lines

__all__ = [
    "Source", "Confidence", "Step", "VowelDecision", "Pronunciation", "LexiconError",
    "LexiconEntryError",
    "load_lexicon", "iter_lexicon", "check_lexicon_entry", "inherent_vowel_pattern", "parse_word", "google_to_ipa",
]

Source = Literal["lexicon", "suffix", "rules", "model"]
Confidence = Literal["high", "medium", "low"]
#: Which step decided one inherent vowel: a lexicon entry (of the word or of its stem), the learned
#: retention model (:mod:`leakloss.text.retention`), or a letter-to-sound rule / a suffix's fixed form.
Step = Literal["lexicon", "model", "rule"]

BUILTIN_EXCEPTIONS = Path(__file__).resolve().parent.parent / "data" / "nepali_exceptions.tsv"


class LexiconError(TextError):
    """A lexicon file that cannot be read; the message names the file and line."""


class LexiconEntryError(LexiconError):
    """A lexicon entry whose phones cannot belong to its spelling: they do not align to the written letters
    (:func:`inherent_vowel_pattern` finds no alignment), so which inherent vowels the entry keeps or drops
    is undefined. ``reason`` says what does not fit (vowel count, consonants)."""

    def __init__(self, path: str | Path, line: int, word: str, phones: Sequence[str], reason: str) -> None:
        self.path, self.line, self.word, self.phones, self.reason = str(path), line, word, tuple(phones), reason
        super().__init__(
            f"{path}:{line}: the phones {echoed(' '.join(phones))} cannot be a pronunciation of {echoed(word)}: {reason}; "
            "they do not align to the spelling, so the entry cannot say which inherent vowels are kept "
            "(fix the phones or remove the line)")


@dataclass(frozen=True)
class VowelDecision:
    """One written inherent vowel of a word: unit index, its letter (the consonant, or अ), whether it is
    pronounced (``None`` when a lexicon entry's phones cannot be aligned to the spelling), the step that
    decided it and, for the model, ``P(keep)`` (with the phonotactic rescoring, the posterior over the word's
    candidate patterns, :mod:`leakloss.text.phonotactics`)."""

    unit: int
    letter: str
    kept: bool | None
    step: Step
    p_keep: float | None = None


@dataclass(frozen=True)
class Pronunciation:
    """``source``: ``lexicon`` (the word is in a lexicon), ``suffix`` (rules on the stem + a suffix),
    ``rules``, or ``model`` (the retention model decided the inherent vowels). ``probability``: the
    model's probability that every vowel decision is right (``None`` when the model was not used)."""

    word: str
    phones: tuple[str, ...]
    source: Source
    confidence: Confidence
    vowels: tuple[VowelDecision, ...] = ()
    probability: float | None = None


# ----------------------------------------------------------------------------------------------------
# Letters
# ----------------------------------------------------------------------------------------------------

INHERENT = ""  # Unit.vowel for a consonant written without matra or virama

CONSONANTS: dict[str, tuple[str, ...]] = {
    "क": ("k",), "ख": ("kʰ",), "ग": ("ɡ",), "घ": ("ɡʰ",), "ङ": ("ŋ",),
    "च": ("c",), "छ": ("cʰ",), "ज": ("ɟ",), "झ": ("ɟʰ",), "ञ": ("ɲ",),
    "ट": ("ʈ",), "ठ": ("ʈʰ",), "ड": ("ɖ",), "ढ": ("ɖʰ",), "ण": ("ɳ",),
    "त": ("t",), "थ": ("tʰ",), "द": ("d",), "ध": ("dʰ",), "न": ("n",),
    "प": ("p",), "फ": ("pʰ",), "ब": ("b",), "भ": ("bʰ",), "म": ("m",),
    "य": ("j",), "र": ("r",), "ल": ("l",), "व": ("w",), "श": ("s",), "ष": ("s",), "स": ("s",),
    "ह": ("h",), "ळ": ("l",), "ऩ": ("n",), "ऱ": ("r",), "ऴ": ("l",),
    "क" + NUKTA: ("k",), "ख" + NUKTA: ("kʰ",), "ग" + NUKTA: ("ɡ",), "ज" + NUKTA: ("z",),
    "ड" + NUKTA: ("ɽ",), "ढ" + NUKTA: ("ɽʰ",), "फ" + NUKTA: ("f",), "य" + NUKTA: ("j",),
}

# Vowel signs and independent vowels -> phones. ऋ is a consonant + vowel: handled in _unit_phones.
MATRAS: dict[str, tuple[str, ...]] = {
    "ा": ("aː",), "ि": ("i",), "ी": ("i",), "ु": ("u",), "ू": ("u",), "ृ": ("r", "i"), "ॄ": ("r", "i"),
    "े": ("e",), "ै": ("ʌi̯",), "ो": ("o",), "ौ": ("ʌu̯",), "ॅ": ("e",), "ॆ": ("e",), "ॉ": ("o",),
    "ॊ": ("o",), "ॢ": ("l", "i"), "ॣ": ("l", "i"),
}
INDEPENDENT: dict[str, tuple[str, ...]] = {
    "अ": ("ʌ",), "आ": ("aː",), "इ": ("i",), "ई": ("i",), "उ": ("u",), "ऊ": ("u",), "ऋ": ("r", "i"),
    "ॠ": ("r", "i"), "ऌ": ("l", "i"), "ॡ": ("l", "i"), "ए": ("e",), "ऐ": ("ʌi̯",), "ओ": ("o",),
    "औ": ("ʌu̯",), "ऍ": ("e",), "ऎ": ("e",), "ऑ": ("o",), "ऒ": ("o",), "ॲ": ("e",), "ऄ": ("ʌ",),
}
_PLACE_NASAL = {}
for _letters, _nasal in (("कखगघङ", "ŋ"), ("चछजझञ", "ɲ"), ("टठडढण", "ɳ"), ("तथदधन", "n"), ("पफबभम", "m")):
    for _c in _letters:
        _PLACE_NASAL[_c] = _nasal


@dataclass(frozen=True)
class Unit:
    """One orthographic syllable piece: a consonant (or None for an independent vowel), its vowel
    (matra, INHERENT, VIRAMA, or the independent vowel letter) and the signs after it."""

    cons: str | None
    vowel: str
    nasal: str = ""  # ANUSVARA, CHANDRABINDU or ""
    visarga: bool = False

    @property
    def inherent(self) -> bool:
        return (self.cons is not None and self.vowel == INHERENT) or (self.cons is None and self.vowel == "अ")


#: A vowel sign after an independent vowel that is not one of TYPED_INDEPENDENT is read as its own vowel.
_SIGN_VOWEL = {"ा": "आ", "ि": "इ", "ी": "ई", "ु": "उ", "ू": "ऊ", "ृ": "ऋ", "ॄ": "ॠ", "े": "ए", "ै": "ऐ", "ो": "ओ",
               "ौ": "औ", "ॅ": "ऍ", "ॆ": "ऎ", "ॉ": "ऑ", "ॊ": "ऒ", "ॢ": "ऌ", "ॣ": "ॡ"}


def parse_word(word: str) -> tuple[Unit, ...]:
    """Normalised Devanagari word -> units. Raises TextError on anything that is not a Devanagari word."""
    if not word:
        raise TextError("empty word")
    units: list[Unit] = []
    i, n = 0, len(word)
    while i < n:
        ch = word[i]
        if ch in CONSONANTS:
            cons = ch
            i += 1
            if i < n and word[i] == NUKTA:
                if ch + NUKTA not in CONSONANTS:  # ल़: no such letter; its nukta was dropped, read "high" as ल
                    raise TextError(f"{word!r}: nukta on {ch!r}, which has no nukta form")
                cons = ch + NUKTA
                i += 1
            vowel = INHERENT
            if i < n and (word[i] in MATRAS or word[i] == VIRAMA):
                vowel = word[i]
                i += 1
        elif ch in INDEPENDENT:
            cons, vowel = None, ch
            i += 1
        elif ch == "ॐ":
            units += [Unit(None, "ओ"), Unit("म", VIRAMA)]
            i += 1
            continue
        elif ch in MATRAS and units and units[-1].cons is None and not units[-1].nasal and not units[-1].visarga:
            # Vowel sign after an independent vowel (अो, एे, आे typed for ओ, ऐ, ओ): the vowel they render as,
            # with any nasal sign or visarga after it (अैं)
            cons, vowel = None, TYPED_INDEPENDENT.get(units.pop().vowel + ch, _SIGN_VOWEL[ch])
            i += 1
        elif ch == AVAGRAHA:
            i += 1  # marks a prolonged/elided vowel; no phone of its own
            continue
        elif ch in (ANUSVARA, CHANDRABINDU, VISARGA, NUKTA, VIRAMA) or ch in MATRAS:
            raise TextError(f"{word!r}: sign {ch!r} (U+{ord(ch):04X}) without a letter to attach to")
        else:
            raise TextError(f"{word!r}: {ch!r} (U+{ord(ch):04X}) is not a Devanagari letter")
        nasal, visarga = "", False
        while i < n and word[i] in (ANUSVARA, CHANDRABINDU, VISARGA):
            if word[i] == VISARGA:
                visarga = True
            elif vowel == VIRAMA:  # क्ं: no vowel to nasalise; the sign was dropped and the word read "high"
                raise TextError(f"{word!r}: nasal sign {word[i]!r} after a virama")
            else:
                nasal = ANUSVARA if ANUSVARA in (nasal, word[i]) else CHANDRABINDU
            i += 1
        units.append(Unit(cons, vowel, nasal, visarga))
    if not units:  # avagrahas only: as split_words says, no letter to pronounce
        raise TextError(f"{word!r}: no letter to pronounce")
    return tuple(units)


def _check_word(word: str) -> tuple[str, tuple[Unit, ...]]:
    if not isinstance(word, str):
        raise TextError(f"expected a string, got {type(word).__name__}")
    norm = normalize_devanagari(word)
    if not norm:
        raise TextError("empty word")
    if len(norm) > MAX_WORD_CHARS:
        # the spelling/phone alignments are quadratic in the word: bound them here
        raise TextTooLongError(f"a word of {len(norm)} characters (longer than {MAX_WORD_CHARS}) is not a word: "
                               f"{norm[:20]!r}...")
    if " " in norm:
        raise TextError(f"{word!r} is more than one word")
    return norm, parse_word(norm)


# ----------------------------------------------------------------------------------------------------
# Units + schwa decisions -> phones
# ----------------------------------------------------------------------------------------------------


def _cons_phones(units: Sequence[Unit], k: int) -> tuple[str, ...]:
    u = units[k]
    assert u.cons is not None
    prev = units[k - 1] if k else None
    if u.cons == "व":
        # Word-initial व is b in Nepali speech; after a vowel or in a cluster it is w.
        return ("b",) if k == 0 else ("w",)
    if u.cons == "ञ" and prev is not None and prev.cons == "ज" and prev.vowel == VIRAMA:
        return ("j",)  # ज्ञ = ɡ j
    if u.cons == "ज" and u.vowel == VIRAMA and k + 1 < len(units) and units[k + 1].cons == "ञ":
        return ("ɡ",)
    if u.cons == "ष" and prev is not None and prev.cons == "क" and prev.vowel == VIRAMA:
        return ("cʰ", "j")  # क्ष = k cʰ j
    return CONSONANTS[u.cons]


def _vowel_phones(u: Unit, kept: bool) -> tuple[str, ...]:
    if u.cons is None:
        vph = INDEPENDENT[u.vowel]
    elif u.vowel == INHERENT:
        vph = ("ʌ",) if kept else ()
    elif u.vowel == VIRAMA:
        vph = ()
    else:
        vph = MATRAS[u.vowel]
    return vph


def units_to_phones(units: Sequence[Unit], kept: Sequence[bool]) -> tuple[str, ...]:
    """Phones for parsed units; ``kept[k]`` says whether unit k's inherent vowel is pronounced."""
    out: list[str] = []
    for k, u in enumerate(units):
        if u.cons is not None:
            out += _cons_phones(units, k)
        vph = list(_vowel_phones(u, kept[k]))
        if u.nasal and vph:
            nxt = units[k + 1] if k + 1 < len(units) else None
            homorganic = _PLACE_NASAL.get(nxt.cons or "") if (nxt is not None and u.nasal == ANUSVARA) else None
            if homorganic:
                out += vph
                out.append(homorganic)
                continue
            vph[-1] = vph[-1] + NASAL
        out += vph
    return tuple(out)


# ----------------------------------------------------------------------------------------------------
# Alignment of phones to spelling -> inherent-vowel pattern
# ----------------------------------------------------------------------------------------------------

_NASAL_CONS = frozenset({"ŋ", "ɲ", "ɳ", "n", "m"})
_DIPHTHONGS = frozenset({"ʌi̯", "ʌu̯", "ʌɪ", "ʌʊ", "aɪ", "aʊ", "əi", "əu", "ʌi", "ʌu", "ɔɪ", "eɪ", "oʊ"})
_SCHWA = equivalents("ʌ")
_VOWEL_EDIT = 10.0  # a vowel phone with no slot, or a written vowel with no phone: no alignment
_MAX_CONS_EDITS = 0.5  # per consonant item; above this the phones are not this word's
_PROTHESIS = frozenset({"i", "e"})  # Nepali's vowel before a word-initial s + consonant (स्कुल i s k u l)
_PROTHESIS_COST = 0.3
_METATHESIS_COST = 0.1  # ह्र said r h (तेह्र t e r h ʌ)


@dataclass(frozen=True)
class _Item:
    kind: str  # "C" consonant, "V" written vowel, "I" inherent slot, "N" optional nasal, "H" optional h
    phones: frozenset[str]
    slot: int = -1  # index into the pattern for "I"
    indep: bool = False  # "I" of an independent अ


def _expand(phones: Sequence[str]) -> frozenset[str]:
    out: set[str] = set()
    for p in phones:
        out |= equivalents(p)
    return frozenset(out)


def _items(units: Sequence[Unit]) -> list[_Item]:
    items: list[_Item] = []
    slot = 0
    for k, u in enumerate(units):
        if u.cons is not None:
            opts = set(_cons_phones(units, k)) | set(CONSONANTS[u.cons])
            if u.cons == "व":
                opts |= {"b", "w"}
            if u.cons in ("ज", "ञ"):
                opts |= {"ɡ", "j", "ɲ", "n"}
            if u.cons == "ष":
                opts |= {"ʂ", "ʃ", "cʰ"}
            if u.cons in ("श",):
                opts |= {"ʃ"}
            if u.cons == "ण":
                opts |= {"n"}
            for p in _cons_phones(units, k):  # क्ष gives two phones: two items
                items.append(_Item("C", _expand(sorted(opts if len(_cons_phones(units, k)) == 1 else {p}))))
        if u.inherent:
            items.append(_Item("I", _SCHWA, slot, u.cons is None))
            slot += 1
        elif u.vowel != VIRAMA:
            vph = INDEPENDENT[u.vowel] if u.cons is None else MATRAS[u.vowel]
            for p in vph:
                items.append(_Item("V" if is_vowel(p) else "C", _expand([p])))
        if u.nasal == ANUSVARA:
            items.append(_Item("N", _expand(sorted(_NASAL_CONS))))
        if u.visarga:
            items.append(_Item("H", _expand(["h"])))
    return items


def _vowel_match(item: _Item, phone: str) -> float:
    base = strip_nasal(phone)
    if base in item.phones:
        return 0.0
    return 1.0


def inherent_vowel_pattern(word: str, phones: Sequence[str]) -> tuple[bool, ...] | None:
    """For each orthographic inherent-vowel slot of ``word`` (a consonant with no vowel sign or virama,
    and an independent अ), whether ``phones`` pronounce it. ``None`` when the phones cannot be aligned.

    Alignment method: the spelling becomes a sequence of items -- consonants (with the phones they may
    be read as, compared through :func:`leakloss.text.phones.equivalents`), written vowels, inherent
    slots, and optional anusvara-nasal / visarga-h items -- and a minimum-cost edit alignment is run
    against the phones. An inherent slot costs nothing whether it takes an ``ʌ``-class phone (kept) or
    nothing (dropped), so the consonants around it decide. Consonant substitutions, insertions (Google's
    gemination, an epenthetic y) and deletions cost 1; two written vowels may share one diphthong phone
    (अउ -> ʌu̯, आइ -> aːi) and one written diphthong may take two vowel phones, at a small cost. A vowel
    phone with no written vowel, or a written vowel with no phone, makes the word unalignable, as do
    more than 0.5 consonant edits per consonant: then the result is ``None``. Two readings of the
    lexicon cost little: a vowel before a word-initial s + consonant (स्कुल ``i s k u l``, a prothesis
    that no slot stands for) and ह्र said ``r h`` (तेह्र ``t e r h ʌ``).
    """
    try:
        _, units = _check_word(word)
    except TextError:
        return None
    phones = [p for p in phones if p not in (".", "", "|")]
    return _align_pattern(units, tuple(phones))


@lru_cache(maxsize=65536)
def _align_pattern(units: tuple[Unit, ...], phones: tuple[str, ...]) -> tuple[bool, ...] | None:
    items = _items(units)
    n_slots = sum(1 for it in items if it.kind == "I")
    n, m = len(items), len(phones)
    # an item takes at most 2 phones, a prothesis 1, and the edits allowed (max(1, _MAX_CONS_EDITS per consonant))
    # pay for at most n unaligned consonants: more phones never align. Said without the table, which took 35 s
    # on a lexicon line of a million phones.
    if m > 3 * n + 1:
        return None
    vow = [is_vowel(p) for p in phones]
    # spelling starts with s + consonant and the phones with a vowel then s: that vowel is a prothesis
    prothesis = (len(items) >= 2 and items[0].kind == items[1].kind == "C" and "s" in items[0].phones
                 and m >= 2 and strip_nasal(phones[0]) in _PROTHESIS and phones[1] == "s")
    inf = float("inf")
    # cost[i][j]: best cost aligning items[:i] with phones[:j]; back[i][j]: (pi, pj, kept-or-None)
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    back: list[list[tuple[int, int, bool | None] | None]] = [[None] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0

    def relax(i: int, j: int, pi: int, pj: int, c: float, kept: bool | None = None) -> None:
        v = cost[pi][pj] + c
        if v < cost[i][j] - 1e-9:
            cost[i][j] = v
            back[i][j] = (pi, pj, kept)

    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 and j == 0:
                continue
            if j > 0:  # an unaligned phone
                relax(i, j, i, j - 1, _VOWEL_EDIT if vow[j - 1] else 1.0)
                if prothesis and i == 0 and j == 1:
                    relax(i, j, i, j - 1, _PROTHESIS_COST)
            if i == 0:
                continue
            it = items[i - 1]
            # the item takes no phone
            if it.kind in ("I", "N", "H"):
                # a written independent अ is rather kept than a consonant's vowel (एकअर्का)
                relax(i, j, i - 1, j, 0.05 if it.indep else 0.0, False)
            else:
                relax(i, j, i - 1, j, _VOWEL_EDIT if it.kind == "V" else 1.0)
            if j == 0:
                continue
            ph = phones[j - 1]
            base = strip_nasal(ph)
            # ह्र read r h: two consonant items, swapped
            if (i >= 2 and j >= 2 and it.kind == "C" and items[i - 2].kind == "C" and "r" in it.phones
                    and "h" in items[i - 2].phones and phones[j - 2] == "r" and phones[j - 1] == "h"):
                relax(i, j, i - 2, j - 2, _METATHESIS_COST)
            if it.kind in ("C", "N", "H"):
                if not vow[j - 1]:
                    if base in it.phones:
                        relax(i, j, i - 1, j - 1, 0.0)
                    elif it.kind == "C":
                        relax(i, j, i - 1, j - 1, 1.0)
                continue
            if not vow[j - 1]:
                continue
            if it.kind == "I":
                relax(i, j, i - 1, j - 1, 0.0 if base in it.phones else 1.0, True)
            else:
                relax(i, j, i - 1, j - 1, _vowel_match(it, ph))
            # two written vowels (inherent or not) read as one diphthong phone
            if i >= 2 and items[i - 2].kind in ("V", "I") and (base in _DIPHTHONGS or len(base) > 1 and base[-1] in "iu"):
                relax(i, j, i - 2, j - 1, 0.2, True if items[i - 2].kind == "I" else None)
            # one written diphthong read as two vowel phones
            if j >= 2 and vow[j - 2] and it.kind == "V" and it.phones & _DIPHTHONGS:
                relax(i, j, i - 1, j - 2, 0.2)

    total = cost[n][m]
    n_cons = sum(1 for it in items if it.kind == "C")
    if total >= _VOWEL_EDIT or total > max(1.0, _MAX_CONS_EDITS * n_cons):
        return None
    pattern: list[bool] = [False] * n_slots
    i, j = n, m
    while i > 0 or j > 0:
        b = back[i][j]
        assert b is not None
        pi, pj, kept = b
        if pi == i - 2:  # diphthong merge: the first of the two items may be a slot
            if items[i - 2].kind == "I":
                pattern[items[i - 2].slot] = True
        elif pi == i - 1 and items[i - 1].kind == "I":
            pattern[items[i - 1].slot] = bool(kept)
        i, j = pi, pj
    return tuple(pattern)


# ----------------------------------------------------------------------------------------------------
# Lexicon files
# ----------------------------------------------------------------------------------------------------

_GOOGLE: dict[str, tuple[str, ...]] = {
    "i": ("i",), "u": ("u",), "e": ("e",), "o": ("o",), "ax": ("ʌ",), "aa": ("aː",),
    "ew": ("e", "u"), "oj": ("o", "i"), "ow": ("o", "u"), "axj": ("ʌi̯",), "axw": ("ʌu̯",),
    "aaj": ("aː", "i"), "aaw": ("aː", "u"),
    "p": ("p",), "b": ("b",), "t": ("t",), "d": ("d",), "ts": ("c",), "jh": ("ɟ",), "tt": ("ʈ",),
    "dd": ("ɖ",), "k": ("k",), "g": ("ɡ",), "ph": ("pʰ",), "bh": ("bʰ",), "th": ("tʰ",), "dh": ("dʰ",),
    "tsh": ("cʰ",), "jhh": ("ɟʰ",), "tth": ("ʈʰ",), "ddh": ("ɖʰ",), "kh": ("kʰ",), "gh": ("ɡʰ",),
    "m": ("m",), "n": ("n",), "ng": ("ŋ",), "s": ("s",), "h": ("h",), "y": ("j",), "r": ("r",),
    "l": ("l",), "w": ("w",), "nn": ("ɳ",),
}
#: The syllable boundary of a lexicon's phone column (both formats): no phone, dropped when read.
SYLLABLE_MARK = "."
_GOOGLE_SKIP = frozenset({SYLLABLE_MARK, "sil", "pau"})


def google_to_ipa(symbols: Sequence[str]) -> tuple[str, ...] | None:
    """Google lexicon phones -> our IPA; ``None`` if a symbol is unknown. A trailing ``n`` on a vowel
    symbol (``axn``, ``aawn``) is nasalisation and nasalises every vowel of that symbol."""
    out: list[str] = []
    for s in symbols:
        if s in _GOOGLE_SKIP:
            continue
        if s in _GOOGLE:
            out += _GOOGLE[s]
        elif s.endswith("n") and s[:-1] in _GOOGLE and is_vowel(_GOOGLE[s[:-1]][0]):
            out += [p + NASAL for p in _GOOGLE[s[:-1]]]
        else:
            return None
    return tuple(out)


def iter_lexicon(path: str | Path, *, strict: bool = True) -> Iterator[tuple[int, str, tuple[str, ...] | None]]:
    """Yield ``(line number, normalised spelling, phones)`` for every entry of a lexicon file;
    phones is ``None`` for an entry whose phone column is empty (the Google file has a few) and, when
    not ``strict``, for a spelling that is not a Devanagari word (digits inside). Other malformed lines
    raise :class:`LexiconError` naming the file and line. See :func:`load_lexicon`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a BOM (Windows editors) is no part of the first line
    except (OSError, UnicodeDecodeError) as e:
        raise LexiconError(f"cannot read lexicon {path}: {e}") from None
    for lineno, line in enumerate(text_lines(text), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = line.split("\t")
        where = f"{path}:{lineno}"
        if len(cols) not in (2, 3) or not cols[0].strip():
            raise LexiconError(f"{where}: expected 'spelling<TAB>phones[<TAB>label]', got {echoed(line)}")
        word = normalize_devanagari(cols[0])
        try:
            parse_word(word)
        except TextError as e:
            if strict:
                raise LexiconError(f"{where}: {e}") from None
            yield lineno, word, None
            continue
        if not cols[1].split():
            yield lineno, word, None
            continue
        # '.' is a syllable boundary (the Google lexicon writes it as its own token; IPA also writes it
        # between two phones, ``ʌ.m``): it carries no phone and is dropped. No phone contains a '.'.
        symbols = [_PHONE_SPELLINGS.get(unicodedata.normalize("NFD", s), s)  # ĩ precomposed or i + U+0303
                   for s in cols[1].replace(SYLLABLE_MARK, f" {SYLLABLE_MARK} ").split()]
        if all(s == SYLLABLE_MARK for s in symbols):
            raise LexiconError(f"{where}: {echoed(word)} has only syllable marks ('.') and no phones")
        if all(s in NEPALI_PHONES or s == SYLLABLE_MARK for s in symbols):
            phones: tuple[str, ...] | None = tuple(s for s in symbols if s != SYLLABLE_MARK)
        else:
            phones = google_to_ipa(symbols)
        if not phones:
            raise LexiconError(f"{where}: {_unknown_phones(symbols)} for {echoed(word)}; {_PHONE_FORMATS}")
        yield lineno, word, phones


#: A phone of the inventory by its canonical decomposition: a file's ĩ may be NFC (U+0129) or i + U+0303.
_PHONE_SPELLINGS = {unicodedata.normalize("NFD", p): p for p in NEPALI_PHONES}

#: What a lexicon's phone column may hold (said by every error about it).
_PHONE_FORMATS = ("phones are space-separated, on each line either all IPA phones of NEPALI_PHONES (b ʌ ɟ aː r) "
                  "or all Google lexicon symbols (b ax jh aa r); '.' marks a syllable boundary and is ignored")


def _is_google(s: str) -> bool:
    return s in _GOOGLE or s.endswith("n") and s[:-1] in _GOOGLE and is_vowel(_GOOGLE[s[:-1]][0])


def _unknown_phones(symbols: Sequence[str]) -> str:
    """Why a phone column is neither all IPA nor all Google symbols (syllable marks never named)."""
    bad = [s for s in symbols if s not in NEPALI_PHONES and not _is_google(s) and s not in _GOOGLE_SKIP]
    if bad:
        return f"unknown phone(s) {echoed(bad)}"
    ipa_only = [s for s in symbols if s in NEPALI_PHONES and not _is_google(s)]
    google_only = [s for s in symbols if _is_google(s) and s not in NEPALI_PHONES]
    if ipa_only and google_only:
        return f"the line mixes IPA phones {echoed(ipa_only)} with Google lexicon symbols {echoed(google_only)}"
    if all(s in _GOOGLE_SKIP for s in symbols):
        return f"no phones, only the marks {echoed(list(symbols))}"
    return f"Google's marks {echoed([s for s in symbols if s in _GOOGLE_SKIP and s != SYLLABLE_MARK])} in a line of IPA phones"


def check_lexicon_entry(path: str | Path, line: int, word: str, phones: Sequence[str]) -> None:
    """Raise :class:`LexiconEntryError` when ``phones`` cannot be a pronunciation of ``word``: the
    alignment that reads a lexicon entry's inherent-vowel decisions (:func:`inherent_vowel_pattern`,
    the one the frontend reads every lexicon entry with) finds none."""
    try:
        _, units = _check_word(word)
    except TextError as e:
        raise LexiconError(f"{path}:{line}: {e}") from None
    clean = tuple(p for p in phones if p not in (SYLLABLE_MARK, "", "|"))
    if _align_pattern(units, clean) is None:
        raise LexiconEntryError(path, line, word, clean, _misfit_reason(units, clean))


def _misfit_reason(units: tuple[Unit, ...], phones: tuple[str, ...]) -> str:
    """What in ``phones`` does not fit the spelling ``units`` (for an entry with no alignment): the
    number or quality of its vowels and/or its consonants; approximate (diphthongs may merge vowels)."""
    items = _items(units)
    written = sum(1 for it in items if it.kind == "V")
    slots = sum(1 for it in items if it.kind == "I")
    vowels = [p for p in phones if is_vowel(p)]
    other = [p for p in vowels if strip_nasal(p) not in _SCHWA]
    why: list[str] = []
    if not written <= len(vowels) <= written + slots:
        expect = f"{written}" if not slots else f"{written} to {written + slots}"
        why.append(f"{len(vowels)} vowel phone(s), where the spelling has {written} written vowel(s) and {slots} "
                   f"inherent vowel(s) that may be kept or dropped ({expect} vowel phones)")
    elif len(other) > written:
        why.append(f"{len(other)} vowel phone(s) other than ʌ ({echoed(' '.join(other))}), where the spelling writes "
                   f"{written} vowel(s) (an inherent vowel is ʌ or nothing)")
    spelled = [p for p in units_to_phones(units, [True] * len(units)) if not is_vowel(p)]
    said = [p for p in phones if not is_vowel(p)]
    if len(spelled) != len(said) or any(strip_nasal(a) not in equivalents(b) for a, b in zip(said, spelled)):
        why.append(f"its consonant phones {echoed(' '.join(said) or '(none)')} do not match the spelling's "
                   f"{' '.join(spelled) or '(none)'!r}")
    if not why:
        wrote = [p for u in units if not u.inherent and u.vowel != VIRAMA
                 for p in (INDEPENDENT[u.vowel] if u.cons is None else MATRAS[u.vowel]) if is_vowel(p)]
        why.append(f"its vowels {echoed(' '.join(vowels))} do not match the spelling's written vowels "
                   f"{' '.join(wrote) or '(none)'!r} (with ʌ or nothing for each inherent vowel)")
    return " and ".join(why)


def load_lexicon(path: str | Path) -> dict[str, tuple[str, ...]]:
    """Read a pronunciation lexicon: ``spelling TAB phones [TAB label]``, ``#`` comment lines, blank lines
    ignored. Phones are either Google's symbols (``ax aa tsh ...``, ``.`` syllable breaks; converted to
    our IPA) or our IPA phones from :data:`NEPALI_PHONES`; the format is decided per line. Spellings are
    normalised; the first entry of a repeated spelling wins. A malformed line raises
    :class:`LexiconError` naming the file and line; so does an entry with an empty phone column (use
    :func:`iter_lexicon` to read such a file entry by entry, as :class:`leakloss.text.frontend.NepaliFrontend` does for a user's lexicon)."""
    lex: dict[str, tuple[str, ...]] = {}
    for lineno, word, phones in iter_lexicon(path):
        if phones is None:
            raise LexiconError(f"{path}:{lineno}: no phones for {echoed(word)}")
        lex.setdefault(word, phones)
    return lex


# ----------------------------------------------------------------------------------------------------
# Letter-to-sound rules: which inherent vowels are pronounced
# ----------------------------------------------------------------------------------------------------

# Word endings whose final inherent vowel Nepali pronounces: verb forms (गर्छ, गरेर, गर्न? no: गर्न has
# a virama-less न after a cluster, see the cluster rule), the final य/ह/visarga.
_KEEP_FINAL_ENDINGS: tuple[str, ...] = ("छ", "ैन", "एन", "ेर", "एर", "उन", "इन", "िकन", "ीकन", "िँन", "ैँन")
#: Verb endings among :data:`_KEEP_FINAL_ENDINGS` that nouns share (शमशेर, बेर): not applied to the last
#: member of a compound, which is a noun or adjective.
_VERB_ONLY_ENDINGS: tuple[str, ...] = ("ेर", "एर", "उन", "इन", "िकन", "ीकन")
_KEEP_FINAL_CONS = frozenset({"य", "ह"})
# Final clusters of English loanwords (स्ट, न्ट, क्स, र्ड ...): their last consonant drops the vowel.
_LOAN_FINAL = frozenset({"ट", "ड", "स", "ज", "फ"})


#: Word endings (after the stem's last vowel sign) where the final decision is unreliable: verb forms
#: and nouns share them (दिन din vs गरिन garina; घाट ghāṭ vs काट kāṭa), or the final consonant is rare.
_UNSURE_FINAL = ("िन", "ेन", "ुन", "ाख", "ुख", "झ", "ध", "ढ", "ख", "इन", "ाइन", "ाउन")


def _final_keeps(units: Sequence[Unit], stem_text: str, noun: bool = False) -> bool:
    """Is the inherent vowel of the last unit (a bare consonant) pronounced when the word ends here?
    ``noun``: the word is known to be a noun/adjective (a compound's last member): no verb endings."""
    u = units[-1]
    prev = units[-2] if len(units) > 1 else None
    if u.nasal or u.visarga or prev is None or prev.visarga:
        return True  # after a visarga the consonant is doubled: दुःख dukkha
    if prev.vowel == VIRAMA:
        # Retroflex ण्ड ष्ट are Sanskrit clusters (खण्ड, दुष्ट: kept); English writes न्ड स्ट (dropped).
        # A geminate (भट्ट, पट्ट) is native too.
        return u.cons not in _LOAN_FINAL or prev.cons in ("ण", "ष", u.cons)
    if u.cons == "ह" and prev.nasal:
        return False  # सिंह siŋh
    if prev.nasal == ANUSVARA and prev.cons is not None and u.cons != "घ":
        return True  # anusvara + consonant is a Sanskrit cluster (अंश, वंश, हंस, अंग, अंक): like a conjunct
    if u.cons in _KEEP_FINAL_CONS and prev.cons is not None or u.cons == "य":
        return True
    if stem_text.endswith(("उन", "इन")) and len(units) <= 2:
        return False  # उन, इन are pronouns, not verb endings
    if stem_text.endswith("इन") and len(units) >= 5 or stem_text.endswith("िन") and len(units) <= 2:
        return False  # long -इन words are loans/names (…लाइन), दिन din is a noun (studied words)
    if noun:
        return stem_text.endswith(_KEEP_FINAL_ENDINGS) and not stem_text.endswith(_VERB_ONLY_ENDINGS)
    # Short words in -इन/-एन are mostly verb forms (गरिन, गरेन), longer ones nouns and loans.
    if stem_text.endswith("िन") and len(units) <= 4 or stem_text.endswith("ेन") and len(units) <= 3:
        return True
    return stem_text.endswith(_KEEP_FINAL_ENDINGS)


#: Word-initial prefixes written as two bare letters whose second vowel is pronounced: Sanskrit उप- अप-
#: अव- सम- सह-, first members जन- जय- मह-, and the Nepali negative न- before a verb (नबसेर na-ba-se-ra).
_PREFIXES: frozenset[tuple[str, str]] = frozenset({
    ("उ", "प"), ("अ", "प"), ("अ", "व"), ("स", "म"), ("स", "ह"), ("ज", "न"), ("ज", "य"), ("म", "ह"),
})


def _is_prefix(first: Unit, second: Unit) -> bool:
    if first.nasal or first.visarga or not second.inherent or second.nasal:
        return False
    if first.cons is None:
        return (first.vowel, second.cons) in _PREFIXES
    if not first.inherent:
        return False
    return first.cons == "न" or (first.cons, second.cons) in _PREFIXES


def _decide_simple(units: Sequence[Unit], text: str, final_is_word_final: bool = True,
                   noun: bool = False) -> tuple[list[bool], list[str]]:
    """Per unit: is its inherent vowel pronounced (False for units without one), and the rule that
    decided it (``""`` for units without a slot). Rules, right to left:

    * ``fixed``: a slot with anusvara/chandrabindu/visarga, an independent अ, the first letter of the
      word and a letter right after a conjunct keep their vowel;
    * ``final``: the word-final slot drops unless :func:`_final_keeps` (after a conjunct, य, ह,
      verb endings -छ -एर -उन -ैन ...);
    * ``penult``: the slot before the word's last letter keeps (नेकपा ne-ka-pa, कमल ka-ma-l): unlike
      Hindi, Nepali does not delete a schwa in V C _ C V# ;
    * ``final-short``: ``final`` in a one-syllable word (noun, or a bare verb root: पुग puga): ``medium``;
    * ``final-conjunct``: ``final`` after a native conjunct (C+र/य/व, -छ, geminates, क्ष ण्ड ष्ट) keeps:
      ``high``; other final clusters (``final-cluster``, English न्ट स्ट र्क ...) stay ``medium``;
    * ``prefix``: the second slot of a word starting with उप- अप- अव- सम- सह- जन- जय- मह- or the
      negative न-, and an infinitive -न before an auxiliary (सक- पा- पुग-), keeps: ``medium``;
    * ``cluster``: a slot before a conjunct keeps (it drops only before C+य/व+आ: ब्या ल्या द्वा);
    * ``after-drop``: next to a dropped schwa a slot keeps (no two deletions in a row);
    * ``medial``: otherwise (a vowel on both sides) the schwa keeps before a sonorant onset (र न ह;
      ल य when a schwa is on either side) and drops before an obstruent (तरकारी tar-kaa-ri) -- the
      spelling cannot show compound boundaries, so this class is ``low`` confidence (about 71% right
      on the studied words; it was 63% with the previous neighbour-vowel rule).

    Compound members (:data:`COMPOUND_MEMBERS`) are split off first, see :func:`_decide_schwas`.

    ``after-cluster`` (a slot after a conjunct, not in the last two syllables) keeps but is only
    ``medium``: English loanwords (गोल्डकप) break it.
    """
    n = len(units)
    kept = [False] * n
    why = [""] * n
    for k in range(n - 1, -1, -1):
        u = units[k]
        if not u.inherent:
            continue
        prev = units[k - 1] if k else None
        if u.cons is None or u.nasal or u.visarga or prev is None or prev.vowel == VIRAMA or prev.visarga:
            kept[k], why[k] = (_final_keeps(units, text, noun) if k == n - 1 and prev is not None and final_is_word_final
                               else k < n - 1 or final_is_word_final or u.cons is None or bool(u.nasal)), "fixed"
            if k == n - 1 and prev is not None and prev.vowel == VIRAMA:
                native = (u.cons in ("र", "य", "व", "छ") or prev.cons == u.cons
                          or (prev.cons, u.cons) in (("क", "ष"), ("ण", "ड"), ("ष", "ट")))
                why[k] = "final-conjunct" if native else "final-cluster"
            elif prev is not None and prev.vowel == VIRAMA and k + 1 < n - 1:
                why[k] = "after-cluster"  # loanwords (फिल्मस, गोल्डकप) break this one
            continue
        if k == n - 1:
            kept[k] = _final_keeps(units, text, noun) if final_is_word_final else False
            why[k] = "final-unsure" if text.endswith(_UNSURE_FINAL) or u.cons == "ह" else "final"
            if why[k] == "final" and n == 2:
                why[k] = "final-short"  # one-syllable words: noun (drop) or bare verb root (पुग puga)
            continue
        nxt = units[k + 1]
        if k + 1 == n - 1:
            kept[k], why[k] = True, "penult"
        elif nxt.vowel == VIRAMA:
            # before a consonant + glide + आ (ब्या, ल्या, द्वा: loanwords, -द्वारा) after a vowel sign it
            # drops; before -त्य -न्य -त्व, past -क्यो -थ्यो and मध्ये it keeps
            glide = (k + 2 < n and units[k + 2].cons in ("य", "व") and units[k + 2].vowel == "ा"
                     and not prev.inherent and prev.cons is not None)
            kept[k], why[k] = not glide, "cluster"
        elif nxt.inherent and not kept[k + 1]:
            kept[k], why[k] = True, "after-drop"
        elif k == 1 and _is_prefix(prev, u):
            kept[k], why[k] = True, "prefix"
        elif u.cons == "न" and _starts_aux(units, k + 1):
            kept[k], why[k] = True, "prefix"  # infinitive -न before an auxiliary: हुनसके hu-na-sa-ke
        else:
            # Measured tendencies where both neighbours carry a vowel: after an inherent vowel and
            # before a written one (with more syllables to come) Nepali keeps more often than not; so
            # it does before a kept schwa in the word's last two syllables, and after a word-initial
            # independent vowel (prefixes उप-, अन-).
            # Measured on the studied words: the schwa stays before a sonorant onset (र न ह always; ल
            # when a schwa is on either side) and drops before an obstruent (most compound boundaries).
            if nxt.cons in ("र", "न", "ह"):
                keep = True
            elif nxt.cons in ("ल", "य"):
                keep = nxt.inherent or prev.inherent
            else:
                keep = False
            kept[k], why[k] = keep, "medial"
    return kept, why


# Compound members: the project's own list of common second members of Nepali compounds and names, and
# auxiliaries that follow a verb form in one written word. A word that contains one (not at its start) is
# split there and each part is decided as a word of its own: the slot before the boundary is then a
# word-final slot (रामबहादुर raam-ba-haa-dur, not raa-mab-...).
COMPOUND_MEMBERS: tuple[str, ...] = (
    # name parts
    "कुमार", "कुमारी", "प्रसाद", "बहादुर", "राज", "लाल", "नाथ", "देव", "देवी", "माया", "मान", "दास",
    "नारायण", "चन्द्र", "बाबु", "शमशेर", "जंग", "मणि", "ध्वज", "कान्त", "नन्द", "दत्त",
    "प्रकाश", "कृष्ण", "शंकर", "शेखर", "विक्रम", "केशरी", "कला", "लक्ष्मी", "शोभा", "गोपाल",
    "जीत", "वीर", "बीर", "भक्त", "सुन्दर", "पति", "मती", "ज्योति", "रत्न", "गुरु",
    # places
    "नगर", "पुरी", "गढ", "गढी", "कोट", "टोल", "थली", "बस्ती", "चोक", "बजार",
    "डाँडा", "खोला", "पोखरी", "घाट", "ढोका", "भूमि", "बारी", "पानी", "टार",
    "धाम", "द्वार", "महल", "दरबार", "मार्ग", "बेर", "शमसेर", "शम्शेर",
    # abstract second members
    "मुक्त", "रहित", "युक्त", "विहीन", "जनक", "कर्ता", "गत", "वान", "शील", "जन",
    "शास्त्र", "सभा", "समिति", "मन्त्री", "मन्त्रालय", "निर्माण", "विकास", "सुधार", "योजना", "सम्बन्ध",
    "व्यवस्था", "भवन", "पत्र", "पत्रिका", "दल", "नीति", "काल", "कार्य", "सेवा", "सरकार", "शक्ति",
    "केन्द्र", "क्षेत्र", "बल", "जीवन", "यात्रा", "धर्म", "समाज", "वर्ष", "दिवस", "भाषा",
    "साहित्य", "शिक्षा", "गीत", "कथा", "कविता", "चित्र", "वस्तु", "विरोधी", "विपरीत", "अनुसार",
    "समेत", "भर", "भरि", "सहित", "बिना", "पछि", "अघि", "पूर्व", "बीच", "विरुद्ध", "निम्ति", 
    "प्रति", "बमोजिम", "लगायत", "स्तर", "मुखी", "प्रिय", "वाहक", "ग्रस्त", "पीडित", "घर",
    "स्थित", "प्राप्त", "प्रधान", "प्रदान", "ग्रहण", "स्थल", "प्रमुख", "प्रणाली", "प्रक्रिया", "स्वरूप",
    # verb auxiliaries written with the verb
    "रहेको", "रहेका", "रहेकी", "रहेछ", "रहेछन्", "रहन्छ", "रहन्छन्", "रहने", "रहेर", "रहनु", "रहँदा",
    "सक्ने", "सकेन", "सक्छ", "सक्छन्", "सकिन्छ", "सक्दैन", "सकेको", "सकेर", "सक्नु", "सक्दा",
    "लाग्यो", "लागेको", "लाग्दा", "लाग्ने", "लाग्छ", "पर्ने", "पर्छ", "पर्यो", "पर्दैन", "पर्दा",
    "भएको", "भएका", "भएकी", "भएन", "भएर", "भए", "भयो", "हुने", "हुन्छ", "दिनु", "दिएको",
    "लिने", "लिनु", "लिएको", "गर्ने", "गर्नु", "गरेको",
)


def _starts_aux(units: Sequence[Unit], b: int) -> bool:
    """Does a verb auxiliary (रह- सक- लाग- पर- भए हु- दि- लि- गर-) start at unit ``b``?"""
    if any(tuple(units[b:b + len(m)]) == m for m in _aux_units()):
        return True
    # सक- (be able), पा- (get to), पुग- (reach) after an infinitive: हुनसके, हुनपाए, हुनपुग्यो
    nxt = units[b + 1] if b + 1 < len(units) else None
    u = units[b] if b < len(units) else None
    return (u is not None and nxt is not None and not u.nasal
            and ((u.cons, u.vowel, nxt.cons) in (("स", INHERENT, "क"), ("प", "ु", "ग"))
                 or (u.cons, u.vowel) == ("प", "ा") and nxt.cons is None))


@lru_cache(maxsize=1)
def _aux_units() -> tuple[tuple[Unit, ...], ...]:
    i = COMPOUND_MEMBERS.index("रहेको")
    return tuple(parse_word(normalize_devanagari(m)) for m in COMPOUND_MEMBERS[i:])


def _units_text(units: Sequence[Unit]) -> str:
    out = []
    for u in units:
        out.append((u.cons or "") + ("" if u.cons is not None and u.vowel == INHERENT else u.vowel))
        out.append(u.nasal + (VISARGA if u.visarga else ""))
    return "".join(out)


@lru_cache(maxsize=1)
def _member_units() -> tuple[tuple[Unit, ...], ...]:
    ms = {parse_word(normalize_devanagari(m)) for m in COMPOUND_MEMBERS}
    return tuple(sorted(ms, key=len, reverse=True))


def compound_boundaries(units: Sequence[Unit]) -> list[int]:
    """Unit indices where a compound member starts (never 0; the part before has at least two units).
    Scanned right to left, longest member first; members do not overlap."""
    n = len(units)
    bounds: list[int] = []
    end = n  # members must end at or before ``end``... they may be followed by more letters
    k = n - 2
    while k >= 2:
        hit = None
        for m in _member_units():
            if k + len(m) <= end and tuple(units[k:k + len(m)]) == m:
                hit = m
                break
        if hit is not None:
            bounds.append(k)
            end = k
            k -= 2
        else:
            k -= 1
    return sorted(bounds)


def _decide_schwas(units: Sequence[Unit], text: str, final_is_word_final: bool = True) -> tuple[list[bool], list[str]]:
    """:func:`_decide_simple` on each compound member (see :func:`compound_boundaries`); the last slot of
    a member before a boundary is labelled ``seg-final``."""
    bounds = compound_boundaries(units)
    if not bounds:
        return _decide_simple(units, text, final_is_word_final)
    kept: list[bool] = []
    why: list[str] = []
    starts = [0] + bounds
    ends = bounds + [len(units)]
    for a, b in zip(starts, ends):
        seg = units[a:b]
        last = b == len(units)
        noun = last and seg in _member_units() and not _starts_aux(units, a)
        kk, ww = _decide_simple(seg, _units_text(seg), final_is_word_final if last else True, noun)
        if not last and ww[-1] == "final-short":
            ww[-1] = "seg-final"  # a one-syllable member is decided as a word of its own (measured better)
        elif not last and seg[-1].inherent and ww[-1] in ("final", "final-unsure"):
            # a member's last slot drops (no verb endings inside a compound) unless the next member
            # starts with a conjunct (no three consonants in a row: शिवप्रसाद si-ba-pra-saad)
            pv = seg[-2]
            if pv.vowel == VIRAMA or pv.visarga or seg[-1].nasal:
                kk[-1] = True
            elif seg[-1].cons in ("य", "ह"):
                kk[-1] = not (seg[-1].cons == "ह" and pv.nasal)
            elif seg[-1].cons == "न" and _starts_aux(units, b):
                kk[-1] = True  # infinitive before an auxiliary: हुनसक्छ hu-na-sak-chha
            elif len(seg) == 2 and seg[0].inherent and seg[0].cons is not None:
                kk[-1] = units[b].vowel != VIRAMA  # जन-, सह-, पट- keep: ja-na-sa-bhaa
            else:
                kk[-1] = False
            ww[-1] = "seg-final"
        kept += kk
        why += ww
    return kept, why


# ----------------------------------------------------------------------------------------------------
# Suffixes
# ----------------------------------------------------------------------------------------------------

#: Case markers, postpositions, plural and emphatic particles, and a few derivational suffixes that
#: start with a consonant, with their pronunciation. The stem before them is pronounced as a word.
SUFFIXES: dict[str, tuple[str, ...]] = {
    "को": ("k", "o"), "का": ("k", "aː"), "की": ("k", "i"), "कै": ("k", "ʌi̯"), "कि": ("k", "i"),
    "मा": ("m", "aː"), "ले": ("l", "e"), "लाई": ("l", "aː", "i"), "लाइ": ("l", "aː", "i"),
    "बाट": ("b", "aː", "ʈ", "ʌ"), "देखि": ("d", "e", "kʰ", "i"), "सँग": ("s", "ʌ̃", "ɡ", "ʌ"),
    "सँगै": ("s", "ʌ̃", "ɡ", "ʌi̯"), "संग": ("s", "ʌ", "ŋ", "ɡ", "ʌ"), "संगै": ("s", "ʌ", "ŋ", "ɡ", "ʌi̯"),
    "सित": ("s", "i", "t"), "तिर": ("t", "i", "r"), "तर्फ": ("t", "ʌ", "r", "pʰ", "ʌ"),
    "भन्दा": ("bʰ", "ʌ", "n", "d", "aː"), "सम्म": ("s", "ʌ", "m", "m", "ʌ"), "मै": ("m", "ʌi̯"),
    "नै": ("n", "ʌi̯"), "पनि": ("p", "ʌ", "n", "i"), "हरू": ("h", "ʌ", "r", "u"), "हरु": ("h", "ʌ", "r", "u"),
    "द्वारा": ("d", "w", "aː", "r", "aː"), "बाहेक": ("b", "aː", "h", "e", "k"), "भित्र": ("bʰ", "i", "t", "r", "ʌ"),
    "माथि": ("m", "aː", "tʰ", "i"), "बारे": ("b", "aː", "r", "e"), "जस्तो": ("ɟ", "ʌ", "s", "t", "o"),
    "जस्ता": ("ɟ", "ʌ", "s", "t", "aː"), "जस्तै": ("ɟ", "ʌ", "s", "t", "ʌi̯"), "जस्ती": ("ɟ", "ʌ", "s", "t", "i"),
    "वाला": ("w", "aː", "l", "aː"), "वाली": ("w", "aː", "l", "i"), "ता": ("t", "aː"), "पन": ("p", "ʌ", "n"),
    "वाद": ("b", "aː", "d"), "वादी": ("b", "aː", "d", "i"), "कार": ("k", "aː", "r"),
    "पूर्ण": ("p", "u", "r", "ɳ", "ʌ"), "पूर्वक": ("p", "u", "r", "w", "ʌ", "k"),
}
_SUFFIX_ORDER = sorted(SUFFIXES, key=len, reverse=True)
#: Suffixes before which the stem's final inherent vowel is often kept (स्थिरता, निपुणता, but सफलता):
#: a word with one of them is at most ``medium`` confidence.
_UNSURE_STEM_SUFFIXES = frozenset({"ता"})


def split_suffixes(word: str) -> tuple[str, tuple[str, ...]]:
    """Strip known suffixes from the end of a normalised word (repeatedly, longest first: हरूको = हरू
    + को). The stem must keep at least two letters and end on a letter, not a bare vowel sign."""
    suffixes: list[str] = []
    stem = word
    for _ in range(3):
        for suf in _SUFFIX_ORDER:
            rest = stem[: -len(suf)]
            if suf == "ता" and rest[-1:] not in CONSONANTS:
                continue  # abstract -ता follows a bare consonant; दाता, देवता-like -ता after a vowel is no suffix
            if stem.endswith(suf) and len(rest) >= 2 and rest[-1] not in (NUKTA,):
                try:
                    parse_word(rest)
                except TextError:
                    continue
                suffixes.insert(0, suf)
                stem = rest
                break
        else:
            break
    return stem, tuple(suffixes)


# ----------------------------------------------------------------------------------------------------
# Rules alone
# ----------------------------------------------------------------------------------------------------


def rule_pronounce(word: str, word_final: bool = True) -> tuple[tuple[str, ...], Confidence]:
    """Letter-to-sound rules only (no lexicon, no suffix stripping) for a normalised word."""
    units = parse_word(word)
    kept, why = _decide_schwas(units, word, word_final)
    return units_to_phones(units, kept), _rule_confidence(why)


#: Confidence of each rule (measured on the studied part of the Google lexicon; see
#: benchmarks/frontend_agreement.py; slot accuracy there: final 98.3%, final-conjunct 99.6%, penult
#: 97.8%, fixed 99.8%, final-short 93%, final-cluster 91%). Words with the stem suffix -ता are at most
#: ``medium`` (:data:`_UNSURE_STEM_SUFFIXES`). Confidence of each rule, measured as in
#: benchmarks/frontend_agreement.py). A word gets the lowest confidence of its slots.
RULE_CONFIDENCE: dict[str, Confidence] = {
    "": "high", "fixed": "high", "prefix": "medium", "final": "high", "final-cluster": "medium", "final-conjunct": "high", "final-short": "medium", "penult": "high",
    "cluster": "medium", "after-drop": "low", "medial": "low", "final-unsure": "medium",
    "after-cluster": "medium", "seg-final": "low",
}
_ORDER = {"high": 2, "medium": 1, "low": 0}


def _rule_confidence(why: Sequence[str]) -> Confidence:
    return min((RULE_CONFIDENCE[w] for w in why), key=_ORDER.__getitem__, default="high")
