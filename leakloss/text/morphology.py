"""Nepali word forms from a hunspell dictionary, as features of the retention model.

A hunspell dictionary lists stems with affix flags (``सुन्/1``: a verb root that takes the verb endings of
flag 1; ``किशोर/18,15``: a noun that takes the plural and case endings); its affix file says what each flag
appends. :func:`expand_hunspell` applies them (one level, plus the continuation flags a rule names) and
records, for every word form, what made it: a listed stem, a verb rule, a nominal rule, and where the affix
starts. That is the morphology the lexicon is too small to teach: सुनिन is सुन् + िन (a verb form, the final
vowel kept: ``sunina``), बेसिन is no verb form (``besin``).

:class:`Morphology` keeps the forms as 64-bit hashes of their spellings (as :class:`WordVocabulary` keeps
the training words) with a bit field each; ``features(plan)`` -> ``[n_slots, len(MORPHOLOGY_NAMES)]``.
The shipped model's table was expanded from Debian's ``hunspell-ne`` (``ne_NP``, Madan Puraskar Pustakalaya,
LGPL-2.1); a model trained without a dictionary has an empty table (every form unknown).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from leakloss.text.normalize import VIRAMA, TextError

__all__ = [
    "AffixRule", "HUNSPELL_NE", "MORPHOLOGY_NAMES", "MORPHOLOGY_UNIT_SIZES", "Morphology", "MorphologyError",
    "VERB_FLAGS", "expand_hunspell", "form_bits", "parse_affixes", "read_dictionary",
]

#: Debian's hunspell-ne (``apt install hunspell-ne``): ``ne_NP.dic`` and ``ne_NP.aff``.
HUNSPELL_NE = Path("/usr/share/hunspell/ne_NP")
#: Flags of ne_NP.aff whose rules make verb forms (the others make case, plural and adjective forms).
VERB_FLAGS = frozenset({"1", "8", "9", "10", "11", "12"})

# the bit field of a form: listed as a stem, made by a verb rule, made by a nominal rule, how many
# analyses (capped), and the set of affix lengths (characters from the affix's start to the word's end)
# of its verb and of its nominal analyses
LISTED, VERB, NOMINAL = 1, 2, 4
COUNT_SHIFT, COUNT_BITS = 3, 4
VERB_LENGTH_SHIFT, NOMINAL_LENGTH_SHIFT, LENGTH_BITS = 7, 20, 12
NO_AFFIX = -99  # the slot-to-affix distance of a form with no analysis of that kind

MORPHOLOGY_NAMES: tuple[str, ...] = (
    "morph_word_known", "morph_word_listed", "morph_word_verb", "morph_word_nominal", "morph_word_halanta_known",
    "morph_word_analyses", "morph_verb_affix_distance", "morph_nominal_affix_distance", "morph_left_known",
    "morph_right_known", "morph_left_halanta_known", "morph_before_known", "morph_from_known",
    "morph_left_halanta_verb", "morph_left_verb", "morph_left_listed", "morph_right_listed",
)

#: Categories of :meth:`Morphology.unit_fields`, per unit of a word (the sequence network's morphology inputs):
#: the whole word's listed / verb / nominal bits (1 + bits); is the spelling up to and including the unit a form
#: (0 no, 1 yes, 2 yes and a verb form; +1) and the same with a halanta after it (a consonant-final member or a
#: verb root; never a form after a unit that ends in a vowel sign or a halanta already); is the rest after the
#: unit a form (0: the unit is the last, 1 no, 2 yes); where the unit stands to the word's verb / nominal affixes
#: (0 no such analysis, 1 before every affix start, 2 at or inside one).
MORPHOLOGY_UNIT_SIZES: tuple[int, ...] = (9, 4, 4, 3, 3, 3)


class MorphologyError(TextError):
    """A hunspell dictionary or a morphology table that cannot be read."""


@dataclass(frozen=True)
class AffixRule:
    """One hunspell affix rule: ``kind`` SFX/PFX, ``strip`` removed from the base, ``add`` put in its place,
    ``continuation`` flags applied to the result, ``condition`` a regex the base must match (None: any)."""

    flag: str
    kind: str
    strip: str
    add: str
    continuation: tuple[str, ...]
    condition: re.Pattern | None

    def apply(self, base: str) -> tuple[str, int] | None:
        """The form this rule makes of ``base`` and where its affix starts, or None when it does not apply."""
        if self.condition is not None and not self.condition.search(base):
            return None
        if self.kind == "SFX":
            if not base.endswith(self.strip):
                return None
            start = len(base) - len(self.strip)
            return base[:start] + self.add, start
        if not base.startswith(self.strip):
            return None
        return self.add + base[len(self.strip):], 0


def _clean(text: str) -> str:
    # the dictionary writes some conjuncts with a zero-width non-joiner (खोस्‌र्याउ); the frontend's spellings do not
    return unicodedata.normalize("NFC", text.replace("\u200c", "").replace("\u200d", ""))


def parse_affixes(text: str) -> dict[str, list[AffixRule]]:
    """The SFX/PFX rules of a hunspell ``.aff`` file, by flag (as ne_NP writes them: ``FLAG num``, comma-separated
    continuation flags; other flag formats and affix options are not read)."""
    rules: dict[str, list[AffixRule]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        p = line.split()
        if len(p) < 5 or p[0] not in ("SFX", "PFX"):
            continue
        add, _, cont = p[3].partition("/")
        cond = p[4]
        try:
            condition = None if cond == "." else re.compile(f"^{cond}" if p[0] == "PFX" else f"{cond}$")
        except re.error as e:
            raise MorphologyError(f"affix line {n}: bad condition {cond!r}: {e}") from None
        rules.setdefault(p[1], []).append(AffixRule(
            p[1], p[0], "" if p[2] == "0" else _clean(p[2]), "" if add == "0" else _clean(add),
            tuple(c for c in cont.split(",") if c), condition))
    return rules


def read_dictionary(text: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(stem, flags) of a hunspell ``.dic`` file (its first line, the count, skipped)."""
    for line in text.splitlines()[1:]:
        word, _, flags = line.strip().partition("/")
        if word:
            yield _clean(word), tuple(f for f in flags.split(",") if f)


def _continuation_flag(flag: str) -> str:
    # ne_NP.aff writes continuation classes as "17X": the X is not part of the flag
    return flag.rstrip("X") or flag


def expand_hunspell(dic_text: str, aff_text: str) -> dict[str, int]:
    """Every form the dictionary makes -> its bit field (:func:`form_bits`): each listed stem, each affix
    rule of its flags that applies, and each continuation rule of those (one level, as ne_NP.aff uses them)."""
    rules = parse_affixes(aff_text)
    analyses: dict[str, list[tuple[int, int]]] = {}  # form -> [(kind bit, affix length)]

    def note(form: str, kind: int, length: int) -> None:
        analyses.setdefault(form, []).append((kind, length))

    for stem, flags in read_dictionary(dic_text):
        note(stem, LISTED, 0)
        for flag in flags:
            kind = VERB if flag in VERB_FLAGS else NOMINAL
            for rule in rules.get(flag, ()):
                made = rule.apply(stem)
                if made is None:
                    continue
                form, start = made
                note(form, kind, len(form) - start)
                for cflag in rule.continuation:
                    for crule in rules.get(_continuation_flag(cflag), ()):
                        again = crule.apply(form)
                        if again is not None:
                            form2, start2 = again
                            # a suffix continues the first affix; a prefix leaves the first affix where it was
                            begin = min(start, start2) if crule.kind == "SFX" else start + len(form2) - len(form)
                            note(form2, kind, len(form2) - begin)
    return {form: form_bits(found) for form, found in analyses.items()}


def form_bits(analyses: Sequence[tuple[int, int]]) -> int:
    """The bit field of a form from its analyses ``(LISTED | VERB | NOMINAL, affix length)``."""
    bits = 0
    for kind, length in analyses:
        bits |= kind
        if kind in (VERB, NOMINAL):
            shift = VERB_LENGTH_SHIFT if kind == VERB else NOMINAL_LENGTH_SHIFT
            bits |= 1 << (shift + min(length, LENGTH_BITS - 1))
    return bits | (min(len(analyses), (1 << COUNT_BITS) - 1) << COUNT_SHIFT)


def _lengths(bits: int, shift: int) -> list[int]:
    field = (bits >> shift) & ((1 << LENGTH_BITS) - 1)
    return [n for n in range(LENGTH_BITS) if field >> n & 1]


def _affix_starts(bits: int, length: int) -> tuple[list[int], list[int]]:
    """Where a form's verb and nominal affixes start (character offsets in a spelling of ``length`` characters)."""
    return ([length - n for n in _lengths(bits, VERB_LENGTH_SHIFT)] if bits & VERB else [],
            [length - n for n in _lengths(bits, NOMINAL_LENGTH_SHIFT)] if bits & NOMINAL else [])


class Morphology:
    """Word forms of a hunspell dictionary: sorted blake2b-64 hashes of their spellings, each with a bit field
    (:func:`form_bits`), looked up by binary search (721k forms of ne_NP: 8.7 MB of arrays, not a dict).

    ``features(plan)`` -> ``[n_slots, len(MORPHOLOGY_NAMES)]`` float64: of the whole word -- is it a form, a
    listed stem, a verb form, a nominal form, is it a form with a final halanta (श्रीमान / श्रीमान्), how many
    analyses; the distance from the end of the slot's unit to the nearest verb / nominal affix start
    (characters; negative: the slot is inside the affix, as न of सुनिन is; :data:`NO_AFFIX` when none) -- and
    of the word's pieces (``left`` up to and including the slot's letter, ``right`` the rest, ``before`` /
    ``from`` the pieces before / from the slot's unit): are they forms, is ``left`` + halanta a form (a
    consonant-final member) or a verb root, is ``left`` a verb form, are ``left`` / ``right`` listed stems.
    A piece at the word's end is ``-1``.
    """

    def __init__(self, forms: dict[int, int], source: str = "") -> None:
        self._set(np.fromiter(forms.keys(), dtype=np.uint64, count=len(forms)),
                  np.fromiter(forms.values(), dtype=np.uint32, count=len(forms)), source)

    def _set(self, keys: np.ndarray, values: np.ndarray, source: str) -> None:
        order = np.argsort(keys, kind="stable")
        self.keys, self.values, self.source = keys[order], values[order].astype(np.uint32), source

    @classmethod
    def from_hunspell(cls, path: str | Path = HUNSPELL_NE) -> "Morphology":
        """Expand ``PATH.dic`` with ``PATH.aff`` (``path`` without the extension)."""
        from leakloss.text.tables import _hash

        base = Path(path)
        try:
            dic = base.with_suffix(".dic").read_text(encoding="utf-8")
            aff = base.with_suffix(".aff").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise MorphologyError(f"cannot read hunspell dictionary {base}(.dic/.aff): {e}") from None
        forms = expand_hunspell(dic, aff)
        return cls({_hash(f): b for f, b in forms.items()}, source=base.name)

    def lookup(self, texts: Sequence[str]) -> list[int]:
        """The bit field of each text (0: not a form; the empty text is none)."""
        from leakloss.text.tables import _hash

        if not len(self.keys):
            return [0] * len(texts)
        hashes = np.asarray([_hash(t) for t in texts], dtype=np.uint64)
        i = np.minimum(np.searchsorted(self.keys, hashes), len(self.keys) - 1)
        found = (self.keys[i] == hashes) & np.asarray([bool(t) for t in texts])
        return np.where(found, self.values[i], 0).astype(np.int64).tolist()

    def unit_fields(self, plan) -> np.ndarray:
        """``[len(plan.units), len(MORPHOLOGY_UNIT_SIZES)]`` int64 category ids of each unit of a planned word
        (:data:`MORPHOLOGY_UNIT_SIZES` says what they are): the per-letter view of :meth:`features` that a
        sequence network reads."""
        from leakloss.text.slots import spelling_pieces

        pieces = spelling_pieces(plan)
        whole = "".join(pieces)
        ends = np.cumsum([len(p) for p in pieces], dtype=np.int64).tolist()
        found = self.lookup([whole] + [whole[:e] for e in ends] + [whole[:e] + VIRAMA for e in ends]
                            + [whole[e:] for e in ends])
        n = len(pieces)
        word, left, left_halanta, rest = found[0], found[1: 1 + n], found[1 + n: 1 + 2 * n], found[1 + 2 * n:]
        verb_starts, nominal_starts = _affix_starts(word, len(whole))

        def form(bits: int) -> int:
            return 1 + int(bits != 0) + int(bool(bits & VERB))

        def place(starts: list[int], end: int) -> int:
            return 0 if not starts else 2 if min(starts) < end else 1

        out = np.zeros((n, len(MORPHOLOGY_UNIT_SIZES)), dtype=np.int64)
        for i, end in enumerate(ends):
            out[i] = (1 + (word & (LISTED | VERB | NOMINAL)), form(left[i]), form(left_halanta[i]),
                      0 if i == n - 1 else 1 + int(rest[i] != 0), place(verb_starts, end), place(nominal_starts, end))
        return out

    def features(self, plan) -> np.ndarray:
        from leakloss.text.slots import spelling_pieces

        pieces = spelling_pieces(plan)
        whole = "".join(pieces)
        ends = np.cumsum([len(p) for p in pieces]).tolist()
        queries = [whole, whole + VIRAMA]
        for k in plan.slots:
            before = whole[: ends[k - 1]] if k > 0 else ""
            queries += [whole[: ends[k]], whole[ends[k]:], whole[: ends[k]] + VIRAMA, before, whole[len(before):]]
        found = self.lookup(queries)
        word, word_halanta = found[0], found[1]
        verb_starts, nominal_starts = _affix_starts(word, len(whole))
        word_row = [int(word != 0), int(bool(word & LISTED)), int(bool(word & VERB)), int(bool(word & NOMINAL)),
                    int(word_halanta != 0), (word >> COUNT_SHIFT) & ((1 << COUNT_BITS) - 1)]

        def distance(starts: list[int], end: int) -> int:
            return min((s - end for s in starts), key=abs) if starts else NO_AFFIX

        out = np.zeros((len(plan.slots), len(MORPHOLOGY_NAMES)), dtype=np.float64)
        for s, k in enumerate(plan.slots):
            lb, rb, lhb, bb, fb = found[2 + 5 * s: 7 + 5 * s]
            has_right, has_before = ends[k] < len(whole), k > 0
            out[s] = word_row + [
                distance(verb_starts, ends[k]), distance(nominal_starts, ends[k]),
                int(lb != 0), int(rb != 0) if has_right else -1, int(lhb != 0),
                int(bb != 0) if has_before else -1, int(fb != 0),
                int(bool(lhb & VERB)), int(bool(lb & VERB)), int(bool(lb & LISTED)),
                int(bool(rb & LISTED)) if has_right else -1,
            ]
        return out

    def to_json(self) -> dict:
        from leakloss.text.tables import VOCABULARY_HASH, _pack

        return {"hash": VOCABULARY_HASH, "source": self.source, "forms": _pack(self.keys, ">u8"),
                "bits": _pack(self.values, ">u4")}

    @classmethod
    def from_json(cls, spec: dict) -> "Morphology":
        from leakloss.text.tables import VOCABULARY_HASH, RetentionModelError, _unpack_array

        if spec.get("hash") != VOCABULARY_HASH:
            raise RetentionModelError(f"morphology hashed with {spec.get('hash')!r}, this code uses {VOCABULARY_HASH!r}")
        keys, bits = _unpack_array(spec["forms"], ">u8"), _unpack_array(spec["bits"], ">u4")
        if len(keys) != len(bits):
            raise RetentionModelError(f"morphology table of {len(keys)} hashes and {len(bits)} bit fields")
        table = cls({})
        table._set(keys, bits, str(spec.get("source", "")))
        if (table.keys[1:] == table.keys[:-1]).any():  # sorted now: a repeat sits next to itself
            raise RetentionModelError("morphology table repeats a hash")
        return table

    def __len__(self) -> int:
        return len(self.keys)
