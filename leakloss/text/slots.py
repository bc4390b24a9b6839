"""A word's inherent-vowel slots as the letter-to-sound rules see them (:class:`SlotPlan`), the phones of a
decision over them, and the letter vocabularies the learned models number units by.

The layer between the rules (:mod:`leakloss.text.g2p`) and what learns on top of them: the retention model's
trees (:mod:`leakloss.text.retention`), its network (:mod:`leakloss.text.retention_net`) and the n-gram
rescoring (:mod:`leakloss.text.phonotactics`) all read words through it, and it imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from leakloss.text import g2p
from leakloss.text.g2p import INHERENT, SUFFIXES, VISARGA, inherent_vowel_pattern

__all__ = ["SlotPlan", "plan_word", "plan_phones", "spelling_pieces", "forced_slots", "ENDINGS"]


@dataclass(frozen=True)
class SlotPlan:
    """One normalised word as the frontend sees it.

    ``units``: the stem's units followed by each suffix's units; ``parts``: ``(text, start, end)`` unit
    ranges, the stem first; ``slots``: unit indices of the inherent vowels (the order of
    :func:`leakloss.text.g2p.inherent_vowel_pattern`); ``rule_kept`` / ``rule_why``: the rules'
    decision and rule name per slot (``suffix`` for a suffix's fixed pronunciation); ``bounds``:
    compound boundaries (unit indices) inside the stem; ``rule_confidence``: the rules' word confidence.
    """

    word: str
    units: tuple
    parts: tuple[tuple[str, int, int], ...]
    slots: tuple[int, ...]
    rule_kept: tuple[bool, ...]
    rule_why: tuple[str, ...]
    bounds: tuple[int, ...]
    rule_confidence: str

    @property
    def stem(self) -> str:
        return self.parts[0][0]

    @property
    def suffixes(self) -> tuple[str, ...]:
        return tuple(p[0] for p in self.parts[1:])


@lru_cache(maxsize=64)
def _suffix_pattern(suffix: str) -> tuple[bool, ...]:
    pat = inherent_vowel_pattern(suffix, SUFFIXES[suffix])
    assert pat is not None, suffix  # checked by tests/text/test_retention.py for every suffix
    return pat


def plan_word(norm: str) -> SlotPlan:
    """The :class:`SlotPlan` of a normalised Devanagari word (raises TextError if it is not one)."""
    stem, suffixes = g2p.split_suffixes(norm)
    stem_units = g2p.parse_word(stem)
    kept, why = g2p._decide_schwas(stem_units, stem)
    conf = g2p._rule_confidence(why)
    if suffixes and suffixes[0] in g2p._UNSURE_STEM_SUFFIXES:
        conf = "low" if conf == "low" else "medium"
        su = stem_units
        if (len(su) == 2 and su[1].inherent and su[0].cons is not None and not su[0].inherent
                and su[0].vowel != g2p.VIRAMA and not kept[1]):
            kept, why = list(kept), list(why)
            kept[1], why[1] = True, "ta-stem"  # the rules' हीनता hii-na-taa case
    units = list(stem_units)
    parts = [(stem, 0, len(stem_units))]
    slots: list[int] = []
    rk: list[bool] = []
    rw: list[str] = []
    for k, u in enumerate(stem_units):
        if u.inherent:
            slots.append(k)
            rk.append(bool(kept[k]))
            rw.append(why[k] or "fixed")
    for suf in suffixes:
        su = g2p.parse_word(suf)
        start = len(units)
        units += su
        parts.append((suf, start, len(units)))
        pat = iter(_suffix_pattern(suf))
        for k, u in enumerate(su):
            if u.inherent:
                slots.append(start + k)
                rk.append(next(pat))
                rw.append("suffix")
    return SlotPlan(norm, tuple(units), tuple(parts), tuple(slots), tuple(rk), tuple(rw),
                    tuple(g2p.compound_boundaries(stem_units)), conf)


def plan_phones(plan: SlotPlan, kept_slots: Sequence[bool]) -> tuple[str, ...]:
    """Phones of a planned word with ``kept_slots[i]`` deciding slot i: the stem by the letter-to-sound
    mapping, each suffix by its fixed pronunciation when its slots are decided as the rules decide them
    (otherwise by the letters, keeping the suffix's own first consonant: -वाला is w, not word-initial b)."""
    if len(kept_slots) != len(plan.slots):
        raise ValueError(f"{len(kept_slots)} decisions for {len(plan.slots)} slots")
    kept = [False] * len(plan.units)
    for k, v in zip(plan.slots, kept_slots):
        kept[k] = bool(v)
    out: list[str] = []
    for i, (text, a, b) in enumerate(plan.parts):
        part = plan.units[a:b]
        pk = kept[a:b]
        if i == 0:
            out += g2p.units_to_phones(part, pk)
            continue
        default = _suffix_pattern(text)
        mine = tuple(pk[k] for k, u in enumerate(part) if u.inherent)
        if mine == default:
            out += g2p.SUFFIXES[text]
        else:
            ph = list(g2p.units_to_phones(part, pk))
            ph[0] = g2p.SUFFIXES[text][0]
            out += ph
    return tuple(out)


def forced_slots(plan: SlotPlan) -> list[bool]:
    """Per slot: is its vowel always said whatever a model says? An independent अ is a vowel letter, and a written
    nasal sign needs its vowel (a model's "drop" there would be reported but never said, or lose the nasal)."""
    return [plan.units[k].cons is None or bool(plan.units[k].nasal) for k in plan.slots]


def _unit_text(u, inherent: str, visarga: str) -> str:
    vowel = "" if (u.cons is not None and u.vowel == inherent) else u.vowel
    return (u.cons or "") + vowel + u.nasal + (visarga if u.visarga else "")


def spelling_pieces(plan: SlotPlan) -> list[str]:
    """The spelling of each unit of a planned word as :func:`context_keys` writes it (the inherent vowel
    unwritten); their concatenation is the word's spelling as :class:`WordVocabulary` keys it."""
    return [_unit_text(u, INHERENT, VISARGA) for u in plan.units]


def _vocab(items: Sequence[str]) -> dict[str, int]:
    # 0: outside the word, 1: anything else; then the letters in a fixed order
    return {s: i + 2 for i, s in enumerate(items)}


@lru_cache(maxsize=1)
def _vocabs() -> tuple[dict, dict, dict, dict, dict]:
    cons = _vocab(sorted(g2p.CONSONANTS))
    vowels = _vocab([g2p.INHERENT, g2p.VIRAMA] + sorted(g2p.MATRAS) + sorted(g2p.INDEPENDENT))
    why = _vocab(sorted(g2p.RULE_CONFIDENCE) + ["suffix", "ta-stem"])
    suffix = _vocab(sorted(g2p.SUFFIXES))
    ending = _vocab(ENDINGS)
    return cons, vowels, why, suffix, ending


#: Word endings (spelling) the rules and Nepali morphology care about: verb endings, case markers,
#: derivational suffixes. The longest one a word (or its stem) ends in is a categorical feature.
ENDINGS: tuple[str, ...] = (
    "छ", "न्छ", "न्छन्", "छन्", "ैन", "एन", "ेन", "ेर", "एर", "उन", "इन", "िन", "िकन", "ीकन", "िँन", "ैँन", "न",
    "नु", "ने", "नू", "यो", "ियो", "एको", "ेको", "ेका", "ेकी", "दै", "दा", "दो", "दछ", "थ्यो", "थे", "थिन्",
    "र", "ल", "त", "क", "स", "ट", "ड", "म", "प", "ब", "ग", "ज", "ख", "ध", "झ", "ढ", "य", "ह", "व",
    "को", "का", "की", "मा", "ले", "लाई", "हरू", "हरु", "बाट", "देखि", "सम्म", "भन्दा", "सँग", "पनि", "नै",
    "ता", "त्व", "पन", "वाद", "वादी", "कार", "इक", "ीय", "ित", "इत", "मान", "वान", "शील", "ई", "ी", "ा",
    "िक", "ाइ", "ाउ", "ेल", "ोल", "ाल", "ार", "ान", "ाम", "ास", "ाय", "त्र", "न्त", "न्द", "स्त", "ष्ट",
)
