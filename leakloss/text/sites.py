"""Contrast sites: where a Nepali reading and a Hindi-style reading of a word differ in a vowel.

Both pronunciations are mapped onto a phone set (a recognizer's vocabulary, or the default
equivalence classes of :mod:`leakloss.text.phones`) and aligned by minimum edit distance. Two
kinds of difference become sites:

- ``deletion``: a Nepali open central vowel (the inherent vowel ʌ) with no Hindi counterpart
  (नेकपा: n e k ʌ p aː vs n eː k p aː);
- ``quality``: aligned vowels whose symbol sets do not overlap (हैन: ʌi̯ vs ɛː).

A site is ``testable`` only when the Nepali side is confident enough (by default not ``low``): a
wrong Nepali pronunciation would turn a correct reading into a false alarm (the seed's तरकारी).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from leakloss.text.phones import equivalents, is_vowel, strip_nasal
from leakloss.text.phoneset import PhoneSet

OPEN_CENTRAL = frozenset({"ʌ", "ə", "ɐ", "ɜ"})
CONFIDENCE_ORDER = {"low": 0, "medium": 1, "high": 2}


@dataclass(frozen=True)
class Site:
    kind: str  # "deletion" | "quality"
    position: int  # index of the Nepali phone in the word's Nepali phones
    nepali: str
    hindi: str | None  # None for a deletion
    testable: bool

    @property
    def contrast(self) -> str:
        """Name for per-contrast curves: ``ʌ->∅`` or e.g. ``ʌi̯->ɛː``."""
        return f"{self.nepali}->{self.hindi if self.hindi is not None else '∅'}"


@dataclass
class WordSites:
    index: int
    word: str
    nepali: list[str] = field(default_factory=list)
    hindi: list[str] = field(default_factory=list)
    confidence: str | None = None
    source: str | None = None
    sites: list[Site] = field(default_factory=list)
    skipped: str | None = None

    def to_json(self) -> dict:
        d = {"index": self.index, "word": self.word, "nepali": self.nepali, "hindi": self.hindi,
             "confidence": self.confidence, "sites": [asdict(s) for s in self.sites]}
        if self.skipped is not None:
            d["skipped"] = self.skipped
        return d

    @property
    def testable_sites(self) -> list[Site]:
        return [s for s in self.sites if s.testable]


def _same(a: str, b: str, phoneset: PhoneSet | None) -> bool:
    if phoneset is not None:
        try:
            return phoneset.same(a, b)
        except KeyError:
            pass
    return bool(equivalents(a) & equivalents(b))


#: Most alignment cells (Nepali phones x Hindi phones) :func:`align_phones` fills: words are bounded by
#: :data:`leakloss.text.normalize.MAX_WORD_CHARS`, so this is only reached by direct calls.
MAX_ALIGN_CELLS = 1_000_000
_DIAG, _DEL, _INS = 0, 1, 2


def align_phones(nepali: Sequence[str], hindi: Sequence[str], phoneset: PhoneSet | None = None) -> list[tuple[int | None, int | None]]:
    """Minimum-edit alignment: pairs (i, j) of Nepali/Hindi indices, ``None`` for a gap.

    Costs: match 0; vowel-vowel or consonant-consonant substitution 1; vowel-consonant 2.5 (so a
    vowel is never "replaced" by a consonant); insertion/deletion 1. Ties prefer a match, then a
    deletion of a Nepali open central vowel (the contrast we look for) over other edits.

    Memory: two cost rows and one byte of back-pointer per cell, ``(n + 1) * (m + 1)`` bytes; more than
    :data:`MAX_ALIGN_CELLS` cells raise :class:`leakloss.text.normalize.TextTooLongError`.
    """
    from leakloss.text.normalize import TextTooLongError

    n, m = len(nepali), len(hindi)
    if (n + 1) * (m + 1) > MAX_ALIGN_CELLS:
        raise TextTooLongError(f"cannot align {n} Nepali with {m} Hindi phones (limit {MAX_ALIGN_CELLS} cells)")
    inf = float("inf")
    back = bytearray((n + 1) * (m + 1))
    w = m + 1

    def gap_cost(phone: str) -> float:
        # deleting a schwa is slightly cheaper so that ties align the schwa as deleted, not a neighbour
        return 0.99 if strip_nasal(phone) in OPEN_CENTRAL else 1.0

    nep_vowel = [is_vowel(a) for a in nepali]
    hin_vowel = [is_vowel(b) for b in hindi]
    gaps = [gap_cost(a) for a in nepali]
    prev = [float(j) for j in range(m + 1)]  # row 0: insertions only
    for j in range(1, m + 1):
        back[j] = _INS
    for i in range(1, n + 1):
        cur = [inf] * (m + 1)
        cur[0] = prev[0] + gaps[i - 1]
        back[i * w] = _DEL
        a = nepali[i - 1]
        for j in range(1, m + 1):
            # candidates in the order the forward (push) recursion offered them: the first best wins
            c = 0.0 if _same(a, hindi[j - 1], phoneset) else (1.0 if nep_vowel[i - 1] == hin_vowel[j - 1] else 2.5)
            best, move = prev[j - 1] + c, _DIAG
            v = prev[j] + gaps[i - 1]
            if v < best:
                best, move = v, _DEL
            v = cur[j - 1] + 1.0
            if v < best:
                best, move = v, _INS
            cur[j] = best
            back[i * w + j] = move
        prev = cur
    pairs = []
    i, j = n, m
    while (i, j) != (0, 0):
        move = back[i * w + j]
        if move == _DIAG:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif move == _DEL:
            pairs.append((i - 1, None))
            i -= 1
        else:
            pairs.append((None, j - 1))
            j -= 1
    return pairs[::-1]


#: Bumped whenever :func:`find_sites` finds other sites for the same phones (part of every finder's fingerprint, so
#: no cache keeps sites of older rules); 2: prolonged vowels and letter-name readings have none; 3: the frontend
#: keeps the vowel of an independent अ and of a written nasal sign (the model could drop them), a misspelt word is
#: skipped with its reason instead of failing the text; 4: a word espeak reads as nothing has none; 5: a word of
#: two or more letters glued to digits is cut off them and read (२०८०सालमा).
SITE_RULES_VERSION = 5

#: Hindi phones beyond the Nepali word's that still make a reading of the same word (see :func:`find_sites`)
MAX_EXTRA_HINDI_PHONES = 2


def find_sites(
    nepali: Sequence[str], hindi: Sequence[str], *, confidence: str = "high", phoneset: PhoneSet | None = None,
    min_confidence: str = "medium",
) -> list[Site]:
    """Deletion and quality sites of one word, testable when ``confidence >= min_confidence``.

    None when the Hindi side has more than :data:`MAX_EXTRA_HINDI_PHONES` phones beyond the Nepali one: espeak
    then spells out a letter's name (ॲ read "akshar ..."), not the word, and any alignment is noise (no word
    of the 2,064 shared prompts comes near: Hindi drops vowels, it rarely adds any). None too when the Nepali word
    starts with a consonant and the Hindi reading with a vowel: a lone ङ is read by its letter name "ʌŋɡaː" (within
    the length rule), ॠ as "ʌrr"; Hindi never puts a vowel before a word's first consonant. None too when the Hindi
    side has no phones: espeak read nothing (ऄऽ), which is no reading of the word, not a Hindi deletion of every ʌ."""
    if not hindi or len(hindi) > len(nepali) + MAX_EXTRA_HINDI_PHONES:
        return []
    if nepali and hindi and not is_vowel(nepali[0]) and is_vowel(hindi[0]):
        return []
    for name, value in (("confidence", confidence), ("min_confidence", min_confidence)):
        if value not in CONFIDENCE_ORDER:  # a bare KeyError('HIGH') before
            raise ValueError(f"{name} must be one of {list(CONFIDENCE_ORDER)}, got {value!r}")
    testable = CONFIDENCE_ORDER[confidence] >= CONFIDENCE_ORDER[min_confidence]
    sites = []
    for i, j in align_phones(nepali, hindi, phoneset):
        if i is None:
            continue
        a = nepali[i]
        if j is None:
            if strip_nasal(a) in OPEN_CENTRAL:
                sites.append(Site("deletion", i, a, None, testable))
            continue
        b = hindi[j]
        if is_vowel(a) and is_vowel(b) and not _same(a, b, phoneset):
            sites.append(Site("quality", i, a, b, testable))
    return sites


def no_word_reason(words: Sequence[WordSites]) -> str:
    """Why a text whose every word is ``skipped`` gets no score: the skip reasons, each once (a misspelt word's
    own reason, not only "no Devanagari word")."""
    reasons = list(dict.fromkeys(w.skipped for w in words if w.skipped))
    shown = "; ".join(reasons[:3]) + ("; ..." if len(reasons) > 3 else "")
    return "no Devanagari word to score" + (f" (all words skipped: {shown})" if reasons else "")


#: skip reasons of tokens a voice does not say aloud; every other skipped token (a number, a Latin or misspelt word)
#: is spoken but has no expected phones, so the word check hears it as insertions
UNSPOKEN_SKIPS = ("punctuation", "symbol")


def unread_words(words: Sequence[WordSites]) -> list[WordSites]:
    """The words a reading says aloud that the frontend does not read (numbers, Latin or misspelt words): left out
    of the word check's expected phones and of the alignment, they can sink the check of a correct reading."""
    return [w for w in words if w.skipped is not None and w.skipped not in UNSPOKEN_SKIPS]


def hindi_ward(words: Sequence[WordSites]) -> list[list[str]]:
    """Each word's Nepali phones with every testable site said the Hindi way: a deletion site's vowel dropped,
    a quality site's vowel swapped for the Hindi one (later positions first, so earlier ones stay valid). The
    words are not edited. The phones a voice says to make a Hindi-ward reading of the words."""
    out = []
    for w in words:
        phones = list(w.nepali)
        for site in sorted(w.testable_sites, key=lambda s: -s.position):
            if site.kind == "deletion":
                del phones[site.position]
            else:
                phones[site.position] = site.hindi
        out.append(phones)
    return out


class SiteFinder:
    """Text -> words with Nepali and Hindi pronunciations and their contrast sites."""

    def __init__(self, frontend=None, phoneset: PhoneSet | None = None, min_confidence: str = "medium") -> None:
        if min_confidence not in CONFIDENCE_ORDER:
            raise ValueError(f"min_confidence must be one of {list(CONFIDENCE_ORDER)}, got {min_confidence!r}")
        if frontend is None:
            from leakloss.text.frontend import NepaliFrontend

            frontend = NepaliFrontend()
        self.frontend = frontend
        self.phoneset = phoneset
        self.min_confidence = min_confidence

    @property
    def fingerprint(self) -> str:
        """The settings that decide which sites this finder finds (frontend, confidence floor, phone set, the
        rules' :data:`SITE_RULES_VERSION`)."""
        import hashlib

        frontend = getattr(self.frontend, "fingerprint", type(self.frontend).__qualname__)
        phones = None if self.phoneset is None else sorted(self.phoneset.vocab.items())
        return hashlib.sha1(f"{frontend}|{self.min_confidence}|{phones}|rules={SITE_RULES_VERSION}".encode()).hexdigest()[:16]

    def __call__(self, text: str) -> list[WordSites]:
        """Every token of ``text`` (:func:`leakloss.text.normalize.split_words`) with its pronunciations and sites;
        a token the frontend cannot pronounce (कािी: a vowel sign after a vowel sign) is ``skipped`` with the reason.

        Raises:
            TextError: ``text`` is not a string, or it or one of its words is too long."""
        from leakloss.text.hindi import espeak_phonemes
        from leakloss.text.normalize import (
            MAX_WORD_CHARS, TextError, TextTooLongError, check_text_length, normalize_devanagari, split_words,
        )

        check_text_length(text)
        tokens = split_words(normalize_devanagari(text))
        for t in tokens:
            if t.skipped is None and len(t.text) > MAX_WORD_CHARS:
                raise TextTooLongError(f"word {t.index} has {len(t.text)} characters (limit {MAX_WORD_CHARS}): "
                                       f"{t.text[:20]!r}...")
        words = [WordSites(t.index, t.text, skipped=t.skipped) for t in tokens]
        prons = {}
        for w in words:
            if w.skipped is None:
                try:
                    prons[w.index] = self.frontend.pronounce(w.word)
                except TextError as err:  # a misspelt word (कािी) is skipped with the reason, not the whole text
                    w.skipped = f"cannot be pronounced: {str(err).removeprefix(repr(w.word) + ': ')}"
        todo = [w for w in words if w.skipped is None]
        hindi = espeak_phonemes([w.word for w in todo], "hi")
        for w, h in zip(todo, hindi):
            pron = prons[w.index]
            w.nepali, w.hindi, w.confidence, w.source = list(pron.phones), h, pron.confidence, pron.source
            w.sites = find_sites(w.nepali, w.hindi, confidence=pron.confidence, phoneset=self.phoneset,
                                 min_confidence=self.min_confidence)
        return words

    def to_json(self, text: str) -> dict:
        return {"text": text, "words": [w.to_json() for w in self(text)]}
