"""Nepali frontend: a Devanagari word -> IPA phones (from :mod:`leakloss.text.phones`), with the source
of the pronunciation and a confidence. The top layer of the text frontend: it puts together the lexicons and
letter-to-sound rules of :mod:`leakloss.text.g2p` and the learned retention model of
:mod:`leakloss.text.retention` (which import neither this module nor each other's upper layers).

Order tried by :meth:`NepaliFrontend.pronounce`:

1. **lexicon** -- an external lexicon file (Google TSV or our IPA TSV), then the project's own curated
   exceptions (``leakloss/data/nepali_exceptions.tsv``): confidence ``high``.
2. **suffix** -- a known case marker / postposition / plural (-को -मा -ले -लाई -हरू ...) is stripped;
   when the stem is in a lexicon it is pronounced from there and the suffix's fixed pronunciation
   appended. बजार+को -> b ʌ ɟ aː r k o.
3. **model** -- otherwise the learned retention model (:mod:`leakloss.text.retention`, trained on the
   Google lexicon) decides every inherent vowel, from the spelling around it, the stem/suffix split and
   the rules' own decisions (its features); its calibrated word probability gives the confidence.
4. **rules** -- with ``retention=None`` (the fallback): letter-to-sound rules with Nepali inherent-vowel
   (schwa) rules, see :func:`leakloss.text.g2p._decide_schwas`, on the stem (source ``suffix``) or the word
   (``rules``).

Each :class:`~leakloss.text.g2p.Pronunciation` lists per inherent vowel the step that decided it (``lexicon`` /
``model`` / ``rule``) and the model's ``P(keep)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from leakloss.checks import echoed
from leakloss.text.g2p import (
    _UNSURE_STEM_SUFFIXES,
    BUILTIN_EXCEPTIONS,
    SUFFIXES,
    VIRAMA,
    LexiconError,
    Pronunciation,
    Unit,
    VowelDecision,
    _align_pattern,
    _check_word,
    check_lexicon_entry,
    iter_lexicon,
    load_lexicon,
    parse_word,
    rule_pronounce,
)
from leakloss.text.phones import NEPALI_PHONES
from leakloss.text.retention import RetentionModel, load_retention_model
from leakloss.text.slots import forced_slots, plan_phones, plan_word

__all__ = ["NepaliFrontend"]


class NepaliFrontend:
    """Devanagari word -> :class:`~leakloss.text.g2p.Pronunciation`. See the module docstring for the order tried.

    ``retention``: the learned inherent-vowel model that decides the vowels of words no lexicon knows
    (``"shipped"``: ``leakloss/assets/frontend/retention.json``; a path to another model file; a loaded
    :class:`leakloss.text.retention.RetentionModel`; ``None``: the letter-to-sound rules alone). The
    rules' decisions and stem split are the model's features; a lexicon entry (``lexicon_path``, then the
    built-in exceptions) always wins over the model.
    """

    def __init__(self, lexicon_path: str | Path | None = None, use_builtin_exceptions: bool = True,
                 retention: object = "shipped") -> None:
        self.lexicon: dict[str, tuple[str, ...]] = {}
        #: ``(line, spelling)`` of the ``lexicon_path`` entries left out for an empty phone column (the Google
        #: lexicon has some): a caller should say so
        self.lexicon_skipped: list[tuple[int, str]] = []
        #: ``(line, spelling, first line)`` of the ``lexicon_path`` entries left out because the spelling came
        #: earlier with other phones (the first wins; the Google lexicon has 8): a caller should say so
        self.lexicon_repeated: list[tuple[int, str, int]] = []
        if lexicon_path is not None:
            first_line: dict[str, int] = {}
            for lineno, word, phones in iter_lexicon(lexicon_path):
                if phones is None:
                    self.lexicon_skipped.append((lineno, word))
                    continue
                # an entry that does not align to its spelling would decide its vowels as garbage
                check_lexicon_entry(lexicon_path, lineno, word, phones)
                if word not in self.lexicon:
                    self.lexicon[word], first_line[word] = phones, lineno
                elif self.lexicon[word] != phones:
                    self.lexicon_repeated.append((lineno, word, first_line[word]))
            if not self.lexicon:
                raise LexiconError(f"{lexicon_path}: no entry with phones"
                                   + (f" ({len(self.lexicon_skipped)} with an empty phone column)" if self.lexicon_skipped else ""))
        if use_builtin_exceptions:
            for w, p in load_lexicon(BUILTIN_EXCEPTIONS).items():
                self.lexicon.setdefault(w, p)
        if retention is None or isinstance(retention, RetentionModel):
            self.retention = retention
        elif isinstance(retention, (str, Path)):
            self.retention = load_retention_model(None if retention == "shipped" else retention)
        else:
            raise TypeError(f"retention must be 'shipped', a path, a RetentionModel or None, got {type(retention).__name__}")
        self._cache: dict[str, Pronunciation] = {}

    _CACHE_MAX = 200_000  # pronunciations kept per frontend (texts repeat words; entries are immutable)

    @property
    def fingerprint(self) -> str:
        """What decides this frontend's pronunciations (its lexicon entries and retention model), hashed:
        a cache of sites found with it (:func:`leakloss.site_placement.place_dataset_sites`) keys on it."""
        if getattr(self, "_fingerprint", None) is None:
            import hashlib
            import json

            model = "rules" if self.retention is None else self.retention.fingerprint
            entries = json.dumps(sorted(self.lexicon.items()), ensure_ascii=False)
            self._fingerprint = hashlib.sha1(f"{model}|{entries}".encode()).hexdigest()[:16]
        return self._fingerprint

    def pronounce(self, word: str) -> Pronunciation:
        if isinstance(word, str) and word in self._cache:
            return self._cache[word]
        pron = self._pronounce(word)
        if len(self._cache) >= self._CACHE_MAX:
            self._cache.clear()
        self._cache[word] = pron
        return pron

    def _pronounce(self, word: str) -> Pronunciation:
        norm, units = _check_word(word)
        if norm in self.lexicon:
            phones = _nepali_only(self.lexicon[norm])
            return Pronunciation(norm, phones, "lexicon", "high", _lexicon_vowels(norm, units, phones, 0))
        plan = plan_word(norm)
        stem, suffixes = plan.stem, plan.suffixes
        if suffixes and stem in self.lexicon:
            phones = _nepali_only(self.lexicon[stem])
            vowels = _lexicon_vowels(stem, plan.units[: plan.parts[0][2]], phones, 0)
            vowels += tuple(VowelDecision(k, _letter(plan.units[k]), kept, "rule")
                            for k, kept in zip(plan.slots, plan.rule_kept) if k >= plan.parts[0][2])
            for suf in suffixes:
                phones = phones + SUFFIXES[suf]
            return Pronunciation(norm, phones, "suffix", "high", vowels)
        if self.retention is not None:
            # the rules fix the forced slots (an independent अ, a vowel under a nasal sign); the model the rest
            forced = forced_slots(plan)
            decision = self.retention.decide(plan, forced)
            vowels = tuple(VowelDecision(k, _letter(plan.units[k]), kk, "rule") if f else
                           VowelDecision(k, _letter(plan.units[k]), kk, "model", round(float(p), 4))
                           for k, kk, p, f in zip(plan.slots, decision.kept, decision.p_keep, forced))
            prob = decision.probability
            return Pronunciation(norm, plan_phones(plan, decision.kept), "model",
                                 self.retention.confidence(prob), vowels, prob)  # type: ignore[arg-type]
        # an independent अ is always said (the phones have it): its slot is decided like a final schwa otherwise
        vowels = tuple(VowelDecision(k, _letter(plan.units[k]), kk or plan.units[k].cons is None, "rule")
                       for k, kk in zip(plan.slots, plan.rule_kept))
        if suffixes:
            phones, conf = rule_pronounce(stem)
            if suffixes[0] in _UNSURE_STEM_SUFFIXES:
                conf = "low" if conf == "low" else "medium"
                su = parse_word(stem)
                if (len(su) == 2 and su[1].inherent and su[0].cons is not None and not su[0].inherent
                        and su[0].vowel != VIRAMA and phones[-1] != "ʌ"):
                    phones = phones + ("ʌ",)  # one heavy syllable + -ता keeps the schwa: हीनता hii-na-taa
            for suf in suffixes:
                phones = phones + SUFFIXES[suf]
            return Pronunciation(norm, phones, "suffix", conf, vowels)
        phones, conf = rule_pronounce(norm)
        return Pronunciation(norm, phones, "rules", conf, vowels)


def _letter(u: Unit) -> str:
    return u.cons if u.cons is not None else u.vowel


def _lexicon_vowels(word: str, units: Sequence[Unit], phones: Sequence[str], offset: int) -> tuple[VowelDecision, ...]:
    """The lexicon's decision per inherent vowel, read back by aligning its phones to the spelling."""
    pattern = _align_pattern(tuple(units), tuple(p for p in phones if p not in (".", "", "|")))
    slots = [k for k, u in enumerate(units) if u.inherent]
    return tuple(VowelDecision(offset + k, _letter(units[k]), None if pattern is None else pattern[i], "lexicon")
                 for i, k in enumerate(slots))


def _nepali_only(phones: tuple[str, ...]) -> tuple[str, ...]:
    bad = [p for p in phones if p not in NEPALI_PHONES]
    if bad:
        raise LexiconError(f"lexicon phones {echoed(bad)} are not in NEPALI_PHONES")
    return phones
