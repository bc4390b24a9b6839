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


def align_phones(nepali: Sequence[str], hindi: Sequence[str], phoneset: PhoneSet | None = None) -> list[tuple[int | None, int | None]]:
    """Minimum-edit alignment: pairs (i, j) of Nepali/Hindi indices, ``None`` for a gap.

    Costs: match 0; vowel-vowel or consonant-consonant substitution 1; vowel-consonant 2.5 (so a
    vowel is never "replaced" by a consonant); insertion/deletion 1. Ties prefer a match, then a
    deletion of a Nepali open central vowel (the contrast we look for) over other edits.
    """
    n, m = len(nepali), len(hindi)
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    back: list[list[tuple[int, int] | None]] = [[None] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0

    def gap_cost(phone: str) -> float:
        # deleting a schwa is slightly cheaper so that ties align the schwa as deleted, not a neighbour
        return 0.99 if strip_nasal(phone) in OPEN_CENTRAL else 1.0

    for i in range(n + 1):
        for j in range(m + 1):
            here = cost[i][j]
            if here == inf:
                continue
            if i < n and j < m:
                a, b = nepali[i], hindi[j]
                c = 0.0 if _same(a, b, phoneset) else (1.0 if is_vowel(a) == is_vowel(b) else 2.5)
                if here + c < cost[i + 1][j + 1]:
                    cost[i + 1][j + 1], back[i + 1][j + 1] = here + c, (i, j)
            if i < n and here + gap_cost(nepali[i]) < cost[i + 1][j]:
                cost[i + 1][j], back[i + 1][j] = here + gap_cost(nepali[i]), (i, j)
            if j < m and here + 1.0 < cost[i][j + 1]:
                cost[i][j + 1], back[i][j + 1] = here + 1.0, (i, j)
    pairs = []
    i, j = n, m
    while (i, j) != (0, 0):
        pi, pj = back[i][j]  # type: ignore[misc]
        pairs.append((pi if pi < i else None, pj if pj < j else None))
        i, j = pi, pj
    return pairs[::-1]


def find_sites(
    nepali: Sequence[str], hindi: Sequence[str], *, confidence: str = "high", phoneset: PhoneSet | None = None,
    min_confidence: str = "medium",
) -> list[Site]:
    """Deletion and quality sites of one word, testable when ``confidence >= min_confidence``."""
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


class SiteFinder:
    """Text -> words with Nepali and Hindi pronunciations and their contrast sites."""

    def __init__(self, frontend=None, phoneset: PhoneSet | None = None, min_confidence: str = "medium") -> None:
        if min_confidence not in CONFIDENCE_ORDER:
            raise ValueError(f"min_confidence must be one of {list(CONFIDENCE_ORDER)}, got {min_confidence!r}")
        if frontend is None:
            from leakloss.text.g2p import NepaliFrontend

            frontend = NepaliFrontend()
        self.frontend = frontend
        self.phoneset = phoneset
        self.min_confidence = min_confidence

    def __call__(self, text: str) -> list[WordSites]:
        from leakloss.text.hindi import espeak_phonemes
        from leakloss.text.normalize import normalize_devanagari, split_words

        tokens = split_words(normalize_devanagari(text))
        words = [WordSites(t.index, t.text, skipped=t.skipped) for t in tokens]
        todo = [w for w in words if w.skipped is None]
        hindi = espeak_phonemes([w.word for w in todo], "hi")
        for w, h in zip(todo, hindi):
            pron = self.frontend.pronounce(w.word)
            w.nepali, w.hindi, w.confidence, w.source = list(pron.phones), h, pron.confidence, pron.source
            w.sites = find_sites(w.nepali, w.hindi, confidence=pron.confidence, phoneset=self.phoneset,
                                 min_confidence=self.min_confidence)
        return words

    def to_json(self, text: str) -> dict:
        return {"text": text, "words": [w.to_json() for w in self(text)]}
