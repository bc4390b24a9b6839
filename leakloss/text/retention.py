"""Learned inherent-vowel (schwa) retention: per inherent vowel of a word, keep or drop.

The letter-to-sound rules of :mod:`leakloss.text.g2p` decide every inherent vowel with a named rule; this
module turns each inherent-vowel slot into a feature row -- the letters around it (a window of units:
consonant, vowel sign / virama / inherent, nasal sign, visarga), its position, the syllable count, the
stem/suffix split the rules find, the compound boundaries they find, the word's ending and the rules' own
decision and rule name -- plus a context memory: how often the training words keep the vowel in the same
spelling context (a few letter windows, the word's start up to the slot, the slot to the word's end;
:class:`ContextMemory`, target encoding) -- and what the training vocabulary says of the word's pieces
(:class:`WordVocabulary`: is the spelling up to the slot a word of its own and the rest another, a compound's
members as जन + पद; does the word, or the word without a verb ending, take the verb endings as a root, as
बोल in बोलिन ``bolinʌ`` does and बेस in बेसिन does not) -- and what a Nepali hunspell dictionary's word forms say of it
(:class:`leakloss.text.morphology.Morphology`: is the word a verb form such as सुन् + िन, is the vowel inside
the affix, are its pieces words) -- and a small gradient-boosted tree ensemble gives ``P(keep)``.
The trees and the memory were trained by :mod:`leakloss.text.train_retention` on the Google Nepali
lexicon (CC BY 4.0, see the card ``leakloss/assets/frontend/retention.card.json``) and are stored as plain
JSON (no pickle; the memory holds counts of spelling contexts that at least :data:`MEMORY_MIN_COUNT`
training vowels share, no word list) and a word vocabulary (:class:`WordVocabulary`: 64-bit hashes of the training
words' spellings and of their prefixes and endings, with counts; no spelling is stored); they are evaluated here with numpy only (scikit-learn is needed to
train, never to run).

A word's probability is the product over its slots of the probability of the decision taken
(``max(p, 1 - p)``); a model with n-gram models (``spec["phonotactics"]``) instead decides the word's slots
together (:mod:`leakloss.text.phonotactics`: candidate patterns rescored by how Nepali words sound) and
gives the chosen pattern's posterior. The card's thresholds, chosen on a calibration part of the lexicon that neither the
trees nor the rules were fitted on, turn it into ``high`` / ``medium`` / ``low``.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from leakloss.text.morphology import MORPHOLOGY_NAMES, Morphology
from leakloss.text.phonotactics import Phonotactics, Rescored
from leakloss.text.slots import (  # noqa: F401 - SlotPlan, plan_word, ... stay importable from here (__all__)
    ENDINGS,
    SlotPlan,
    _vocabs,
    forced_slots,
    plan_phones,
    plan_word,
    spelling_pieces,
)
from leakloss.text.tables import (  # noqa: F401 - RetentionModelError, VOCABULARY_HASH stay importable from here
    VOCABULARY_HASH,
    RetentionModelError,
    _hash,
    _pack,
    _unpack,
    _unpack_array,
)

__all__ = [
    "SlotPlan", "RetentionModel", "RetentionModelError", "plan_word", "slot_features", "FEATURE_NAMES",
    "CATEGORICAL", "SHIPPED_MODEL", "load_retention_model", "word_probability", "ENDINGS", "plan_phones",
    "ContextMemory", "CONTEXTS", "context_keys", "WordVocabulary", "VOCABULARY_NAMES", "VERB_FORMS",
    "VERB_ROOT_ENDINGS", "spelling_pieces", "mixed_probability", "forced_slots", "slot_by_slot",
]

SHIPPED_MODEL = Path(__file__).resolve().parent.parent / "assets" / "frontend" / "retention.json"
FORMAT = "leakloss-retention-gbdt/1"
#: Bumped whenever :func:`slot_features` changes meaning: a model trained on another schema is refused.
FEATURE_SCHEMA = 4


# ----------------------------------------------------------------------------------------------------
# Slot plan: the word split as the rules split it, and the rules' decision for every inherent vowel
# ----------------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------------
# Features
# ----------------------------------------------------------------------------------------------------

WINDOW = 4  # units either side whose letters are features
SIGN_WINDOW = 2  # units either side whose nasal sign / visarga are features


def _feature_layout() -> tuple[list[str], list[bool]]:
    names: list[str] = []
    cats: list[bool] = []
    for d in range(-WINDOW, WINDOW + 1):
        names += [f"cons[{d:+d}]", f"vowel[{d:+d}]"]
        cats += [True, True]
    for d in range(-SIGN_WINDOW, SIGN_WINDOW + 1):
        names += [f"nasal[{d:+d}]", f"visarga[{d:+d}]"]
        cats += [False, False]
    more = [
        ("pos", False), ("pos_from_end", False), ("n_units", False), ("slot", False), ("n_slots", False),
        ("slots_from_end", False), ("rule_kept", False), ("rule_why", True), ("rule_conf", False),
        ("prev_slot_rule", False), ("next_slot_rule", False), ("prev_slot_dist", False),
        ("next_slot_dist", False), ("part", False), ("to_stem_end", False), ("stem_units", False),
        ("n_suffixes", False), ("first_suffix", True), ("to_next_bound", False), ("from_prev_bound", False),
        ("n_bounds", False), ("stem_ending", True), ("word_ending", True), ("n_vowel_signs", False),
        ("n_conjuncts", False), ("prev_open", False), ("next_open", False),
        ("first_cons", True), ("first_vowel", True), ("second_cons", True), ("second_vowel", True),
        ("last_cons", True), ("last_vowel", True), ("penult_cons", True), ("penult_vowel", True),
        ("neg_prefix", False), ("n_chars", False), ("rule_kept_count", False),
    ]
    for n, c in more:
        names.append(n)
        cats.append(c)
    names += list(MORPHOLOGY_NAMES) + list(VOCABULARY_NAMES)
    cats += [False] * (len(MORPHOLOGY_NAMES) + len(VOCABULARY_NAMES))
    for name in CONTEXT_NAMES:
        names += [f"memory_rate[{name}]", f"memory_count[{name}]"]
        cats += [False, False]
    return names, cats


# ----------------------------------------------------------------------------------------------------
# Context memory: how often the training words keep the inherent vowel in this spelling context
# ----------------------------------------------------------------------------------------------------

#: Spelling contexts of a slot whose keep rate among the training words is a feature (target encoding):
#: ``("window", L, R)`` the L units before and R after the slot (word edges written ``^`` / ``$``);
#: ``("prefix", 0, R)`` the word from its start to R units after the slot; ``("suffix", L, 0)`` from L
#: units before the slot to the word's end. The anchored ones carry morphology the trees' letter window
#: cannot: a shared stem (prefix) or inflection (suffix) decides a vowel far from the window's letters.
CONTEXTS: tuple[tuple[str, int, int], ...] = (
    ("window", 1, 1), ("window", 2, 1), ("window", 1, 2), ("window", 2, 2), ("window", 3, 2), ("window", 2, 3),
    ("window", 3, 3), ("window", 4, 4), ("window", 1, 0), ("window", 0, 1), ("window", 2, 0), ("window", 0, 2),
    ("prefix", 0, 0), ("prefix", 0, 1), ("prefix", 0, 2), ("suffix", 0, 0), ("suffix", 1, 0), ("suffix", 2, 0),
)
CONTEXT_NAMES: tuple[str, ...] = tuple(f"{k}{a}{b}" for k, a, b in CONTEXTS)
#: Pseudo-counts of a 0.5 keep rate added to every remembered context (smooths rare contexts).
MEMORY_PRIOR_WEIGHT = 1.0
#: A context seen in fewer training vowels is not remembered (keeps the file small, the rates stable).
MEMORY_MIN_COUNT = 2
UNSEEN_RATE = -1.0  # the rate feature of a context the memory does not hold


def context_keys(plan: SlotPlan) -> list[tuple[str, ...]]:
    """Per slot, one key per :data:`CONTEXTS` entry: the units' spelling around the slot, ``|``-joined, the
    slot itself a bare ``*`` (कमल, slot म, ``window11``: ``क*ल``). The slot's own letter is left out: the
    trees see it directly, and the memory then pools every consonant in the same surroundings (measured on
    the calibration split: with the letter in the key, agreement 0.9567 and `high` coverage 0.509, against
    0.9576 and 0.630 without); so no key spells a word, not even one that runs from ``^`` to ``$``."""
    toks = ["^"] + spelling_pieces(plan) + ["$"]
    out = []
    for k in plan.slots:
        i = k + 1  # the slot's index in toks
        keys = []
        for kind, left, right in CONTEXTS:
            a = 0 if kind == "prefix" else max(0, i - left)
            b = len(toks) if kind == "suffix" else i + 1 + right
            keys.append("|".join(toks[a:i]) + "*" + "|".join(toks[i + 1:b]))
        out.append(tuple(keys))
    return out


class ContextMemory:
    """Counts ``(vowels, kept)`` per context key, one table per :data:`CONTEXTS` entry.

    ``features(plan)`` -> ``[n_slots, 2 * len(CONTEXTS)]``: per context the smoothed keep rate
    ``(kept + w/2) / (n + w)`` (:data:`UNSEEN_RATE` when the context is not remembered) and the count ``n``.
    """

    def __init__(self, tables: dict[str, dict[str, Sequence[int]]], min_count: int = MEMORY_MIN_COUNT,
                 prior_weight: float = MEMORY_PRIOR_WEIGHT) -> None:
        if set(tables) != set(CONTEXT_NAMES):
            raise RetentionModelError(f"memory contexts {sorted(tables)} are not this code's {sorted(CONTEXT_NAMES)}")
        self.min_count = int(min_count)
        self.prior_weight = float(prior_weight)
        self.tables = [{k: (int(v[0]), int(v[1])) for k, v in tables[name].items() if int(v[0]) >= self.min_count}
                       for name in CONTEXT_NAMES]

    @classmethod
    def count(cls, labelled: Iterable[tuple[SlotPlan, Sequence[bool]]], min_count: int = MEMORY_MIN_COUNT,
              prior_weight: float = MEMORY_PRIOR_WEIGHT) -> "ContextMemory":
        """The memory of labelled plans (each plan with its lexicon decision per slot)."""
        counts: list[dict[str, list[int]]] = [{} for _ in CONTEXTS]
        for plan, kept in labelled:
            for keys, k in zip(context_keys(plan), kept):
                for table, key in zip(counts, keys):
                    c = table.setdefault(key, [0, 0])
                    c[0] += 1
                    c[1] += int(bool(k))
        return cls(dict(zip(CONTEXT_NAMES, counts)), min_count, prior_weight)

    def features(self, plan: SlotPlan) -> np.ndarray:
        keys = context_keys(plan)
        out = np.zeros((len(keys), 2 * len(CONTEXTS)), dtype=np.float64)
        for s, row in enumerate(keys):
            for j, (table, key) in enumerate(zip(self.tables, row)):
                c = table.get(key)
                out[s, 2 * j] = UNSEEN_RATE if c is None else (c[1] + self.prior_weight / 2) / (c[0] + self.prior_weight)
                out[s, 2 * j + 1] = 0 if c is None else c[0]
        return out

    def to_json(self) -> dict:
        return {"contexts": list(CONTEXT_NAMES), "min_count": self.min_count, "prior_weight": self.prior_weight,
                "tables": {name: {k: list(v) for k, v in sorted(t.items())} for name, t in zip(CONTEXT_NAMES, self.tables)}}

    @classmethod
    def from_json(cls, spec: dict) -> "ContextMemory":
        if list(spec["contexts"]) != list(CONTEXT_NAMES):
            raise RetentionModelError(f"memory contexts {spec['contexts']} are not this code's {list(CONTEXT_NAMES)}")
        return cls(spec["tables"], spec["min_count"], spec["prior_weight"])

    def __len__(self) -> int:
        return sum(len(t) for t in self.tables)


# ----------------------------------------------------------------------------------------------------
# Word vocabulary: which pieces of a word are training words, and which roots take verb endings
# ----------------------------------------------------------------------------------------------------

#: Endings of a verb root's forms (बोल: बोल्नु बोल्यो बोल्छ बोलेको ...; खा: खानु खायो खान्छ ...): a spelling
#: is a verb root in the vocabulary as far as its forms are training words.
VERB_FORMS: tuple[str, ...] = (
    "्नु", "नु", "्यो", "यो", "्छ", "छ", "ेको", "एको", "्ने", "ने", "्दै", "दै", "ेर", "एर", "िन", "ेन", "्न", "न",
    "्थ्यो", "थ्यो", "्छन्", "छन्", "ियो", "ए", "े", "ी", "ेकी", "ेका", "ाउनु", "िनु", "िएको", "िँदै", "ँदै", "ला",
    "ुँ", "ौं", "ेँ",
)
#: Verb endings whose removal leaves a candidate root (बोलिन -> बोल, लाग्थेन -> लाग), longest first.
VERB_ROOT_ENDINGS: tuple[str, ...] = tuple(sorted(
    {"िन", "ेन", "न", "एन", "इन", "ेर", "एर", "छ", "यो", "ने", "नु", "ो", "े", "ी", "ा", "दै", "थ्यो", "थे", "थिन्",
     "थेन", "ला"}, key=lambda e: (-len(e), e)))
#: Per slot: ``left`` is the spelling up to and including the slot's letter, ``right`` the rest, ``before``
#: the spelling before the slot's letter, ``from`` the slot's letter to the end.
VOCABULARY_NAMES: tuple[str, ...] = (
    "vocab_left_is_word", "vocab_right_is_word", "vocab_left_starts", "vocab_right_ends", "vocab_before_is_word",
    "vocab_from_is_word", "vocab_left_verb_forms", "vocab_word_verb_forms", "vocab_root_verb_forms",
    "vocab_root_ending_length",
)


class WordVocabulary:
    """The training words as 64-bit hashes of their spellings, with counts of the words each prefix starts and
    each ending ends (``starts`` / ``ends``); the spellings themselves are not kept.

    ``features(plan, exclude_self)`` -> ``[n_slots, len(VOCABULARY_NAMES)]``: for the slot's ``left`` / ``right``
    / ``before`` / ``from`` pieces (see :data:`VOCABULARY_NAMES`) whether they are training words and how many
    training words start with ``left`` / end with ``right`` (``log1p``), and how many :data:`VERB_FORMS` of
    ``left``, of the whole word and of the root left by a verb ending (:data:`VERB_ROOT_ENDINGS`; the root with the most) are
    training words. A piece at the word's end is ``-1``. ``exclude_self``: the word is one of the training
    words and must not count (its features as a training row, leave-one-out): it is not a word, and the
    counts of its own prefixes and endings are one less.
    """

    def __init__(self, words: Iterable[int], starts: dict[int, int], ends: dict[int, int]) -> None:
        self.words = frozenset(int(w) for w in words)
        self.starts = {int(k): int(v) for k, v in starts.items()}
        self.ends = {int(k): int(v) for k, v in ends.items()}

    @classmethod
    def count(cls, words: Iterable[str]) -> "WordVocabulary":
        """The vocabulary of some normalised words (each distinct spelling counted once; every word, with
        inherent vowels or none: गर्नु has none and still makes गर a verb root)."""
        spellings = {"".join(spelling_pieces(plan_word(w))) for w in words}
        starts: Counter[int] = Counter()
        ends: Counter[int] = Counter()
        for w in spellings:
            for i in range(1, len(w) + 1):
                starts[_hash(w[:i])] += 1
                ends[_hash(w[-i:])] += 1
        return cls((_hash(w) for w in spellings), starts, ends)

    def _verb_forms(self, root: str, word: int | None) -> int:
        return sum(1 for e in VERB_FORMS if (h := _hash(root + e)) in self.words and h != word) if root else 0

    def features(self, plan: SlotPlan, exclude_self: bool = False) -> np.ndarray:
        pieces = spelling_pieces(plan)
        whole = "".join(pieces)
        own = _hash(whole) if exclude_self else None
        less = int(own is not None and own in self.words)  # the word's own share of the counts

        def is_word(text: str) -> int:
            h = _hash(text)
            return int(bool(text) and h in self.words and h != own)

        root_forms, ending = 0, 0
        for e in VERB_ROOT_ENDINGS:
            if whole.endswith(e) and len(whole) > len(e) + 1:
                n = self._verb_forms(whole[: -len(e)], own)
                if n > root_forms:
                    root_forms, ending = n, len(e)
        word_forms = self._verb_forms(whole, own)
        out = np.zeros((len(plan.slots), len(VOCABULARY_NAMES)), dtype=np.float64)
        for s, k in enumerate(plan.slots):
            left, right = "".join(pieces[: k + 1]), "".join(pieces[k + 1:])
            before, start = "".join(pieces[:k]), "".join(pieces[k:])
            out[s] = (
                is_word(left),
                is_word(right) if right else -1,
                np.log1p(max(self.starts.get(_hash(left), 0) - less, 0)),
                np.log1p(max(self.ends.get(_hash(right), 0) - less, 0)) if right else -1,
                is_word(before),
                is_word(start),
                self._verb_forms(left, own),
                word_forms,
                root_forms,
                ending,
            )
        return out

    def to_json(self) -> dict:
        """Hashes as base64 of big-endian uint64 arrays, counts of uint32 (a fifth of the size of JSON numbers)."""

        def table(d: dict[int, int]) -> dict:
            keys = sorted(d)
            return {"hashes": _pack(keys, ">u8"), "counts": _pack([d[k] for k in keys], ">u4")}

        return {"hash": VOCABULARY_HASH, "words": _pack(sorted(self.words), ">u8"),
                "starts": table(self.starts), "ends": table(self.ends)}

    @classmethod
    def from_json(cls, spec: dict) -> "WordVocabulary":
        if spec.get("hash") != VOCABULARY_HASH:
            raise RetentionModelError(f"vocabulary hashed with {spec.get('hash')!r}, this code uses {VOCABULARY_HASH!r}")

        def table(t: dict) -> dict[int, int]:
            keys, counts = _unpack(t["hashes"], ">u8"), _unpack(t["counts"], ">u4")
            if len(keys) != len(counts):
                raise RetentionModelError(f"vocabulary table of {len(keys)} hashes and {len(counts)} counts")
            return dict(zip(keys, counts))

        return cls(_unpack(spec["words"], ">u8"), table(spec["starts"]), table(spec["ends"]))

    def __len__(self) -> int:
        return len(self.words)


FEATURE_NAMES, CATEGORICAL = (tuple(x) for x in _feature_layout())
_CONF_NUM = {"low": 0, "medium": 1, "high": 2}


def _longest_ending(text: str, vocab: dict[str, int]) -> int:
    best, cid = 0, 1
    for e in ENDINGS:
        if len(e) > best and text.endswith(e) and len(text) > len(e):
            best, cid = len(e), vocab[e]
    return cid


def slot_features(plan: SlotPlan, memory: ContextMemory, vocabulary: WordVocabulary, morphology: Morphology,
                  exclude_self: bool = False) -> np.ndarray:
    """Feature rows of a planned word: ``[n_slots, len(FEATURE_NAMES)]`` float64 (categories as ids); the
    last ``2 * len(CONTEXTS)`` columns are ``memory.features(plan)``, the ``len(VOCABULARY_NAMES)`` before
    them ``vocabulary.features(plan, exclude_self)`` (``exclude_self``: the word is a training word of the
    vocabulary, as when the rows are training rows), the ``len(MORPHOLOGY_NAMES)`` before those
    ``morphology.features(plan)`` (:mod:`leakloss.text.morphology`)."""
    from leakloss.text import g2p

    cons_v, vow_v, why_v, suf_v, end_v = _vocabs()
    units = plan.units
    n = len(units)
    cons_id = [cons_v.get(u.cons, 1) if u.cons is not None else 1 for u in units]
    vow_id = [vow_v.get(u.vowel, 1) for u in units]
    nasal = [0 if not u.nasal else (1 if u.nasal == g2p.ANUSVARA else 2) for u in units]
    visarga = [int(u.visarga) for u in units]
    # "open": the unit carries a written vowel (a matra or an independent vowel), not inherent/virama
    opened = [int(u.vowel not in (g2p.INHERENT, g2p.VIRAMA)) for u in units]
    stem_end = plan.parts[0][2]
    n_slots = len(plan.slots)
    n_conj = sum(1 for u in units if u.vowel == g2p.VIRAMA)
    first_suffix = suf_v.get(plan.parts[1][0], 1) if len(plan.parts) > 1 else 0
    stem_ending = _longest_ending(plan.stem, end_v)
    word_ending = _longest_ending(plan.word, end_v)
    def edge(j: int) -> list[int]:
        return [cons_id[j], vow_id[j]] if 0 <= j < n else [0, 0]

    # word-level context: the first two and last two units, the negative prefix न- (नछोड na-chho-ḍa)
    whole = (edge(0) + edge(1) + edge(n - 1) + edge(n - 2)
             + [int(n >= 3 and units[0].cons == "न" and units[0].vowel == g2p.INHERENT and not units[0].nasal),
                len(plan.word), sum(plan.rule_kept)])
    rows = np.zeros((n_slots, len(FEATURE_NAMES)), dtype=np.float64)
    for s, k in enumerate(plan.slots):
        row: list[float] = []
        for d in range(-WINDOW, WINDOW + 1):
            j = k + d
            row += [cons_id[j], vow_id[j]] if 0 <= j < n else [0, 0]
        for d in range(-SIGN_WINDOW, SIGN_WINDOW + 1):
            j = k + d
            row += [nasal[j], visarga[j]] if 0 <= j < n else [-1, -1]
        part = next(i for i, (_, a, b) in enumerate(plan.parts) if a <= k < b)
        nxt_b = [b - k for b in plan.bounds if b > k]
        prv_b = [k - b for b in plan.bounds if b <= k]
        row += [
            k, n - 1 - k, n, s, n_slots, n_slots - 1 - s,
            float(plan.rule_kept[s]), why_v.get(plan.rule_why[s], 1), _CONF_NUM[plan.rule_confidence],
            float(plan.rule_kept[s - 1]) if s > 0 else -1.0,
            float(plan.rule_kept[s + 1]) if s + 1 < n_slots else -1.0,
            k - plan.slots[s - 1] if s > 0 else -1, plan.slots[s + 1] - k if s + 1 < n_slots else -1,
            part, stem_end - 1 - k, stem_end, len(plan.parts) - 1, first_suffix,
            min(nxt_b) if nxt_b else -1, min(prv_b) if prv_b else -1, len(plan.bounds),
            stem_ending, word_ending, sum(opened), n_conj,
            opened[k - 1] if k > 0 else -1, opened[k + 1] if k + 1 < n else -1,
        ] + whole
        rows[s, : len(row)] = row
    n_memory = 2 * len(CONTEXTS)
    vocab_from = len(FEATURE_NAMES) - n_memory - len(VOCABULARY_NAMES)
    rows[:, vocab_from - len(MORPHOLOGY_NAMES): vocab_from] = morphology.features(plan)
    rows[:, vocab_from: len(FEATURE_NAMES) - n_memory] = vocabulary.features(plan, exclude_self)
    rows[:, len(FEATURE_NAMES) - n_memory:] = memory.features(plan)
    return rows


# ----------------------------------------------------------------------------------------------------
# Tree ensemble (JSON) evaluated with numpy
# ----------------------------------------------------------------------------------------------------


class RetentionModel:
    """A binary gradient-boosted tree ensemble: ``P(keep) = sigmoid(baseline + sum of leaf values)``, optionally
    mixed with a sequence network (``spec["net"]``, :mod:`leakloss.text.retention_net`): then
    ``P(keep) = sigmoid((1 - w) * trees + w * net)`` in log-odds, ``w = spec["net"]["weight"]``; ``net_state``
    holds the network's weights as numpy arrays (the safetensors file the spec names; :func:`load_retention_model`
    reads it), run by :class:`leakloss.text.retention_net.NumpyRetentionNet`. ``spec["phonotactics"]``, if
    present, rescores each word's decisions together (:meth:`decide`, :mod:`leakloss.text.phonotactics`).

    Trees are padded to one node table ``[n_trees, max_nodes]``; a numpy loop over depth walks all trees
    for all rows at once. Numeric nodes go left when ``x <= threshold``; categorical nodes go left when
    ``cat_left[row_of_node, x]`` (category ids are small non-negative integers).
    """

    def __init__(self, spec: dict, source: str = "<dict>", net_state: dict | None = None) -> None:
        try:
            if spec.get("format") != FORMAT:
                raise RetentionModelError(f"{source}: not a {FORMAT} file (format={spec.get('format')!r})")
            if spec.get("feature_schema") != FEATURE_SCHEMA or tuple(spec["feature_names"]) != FEATURE_NAMES:
                raise RetentionModelError(
                    f"{source}: trained for feature schema {spec.get('feature_schema')}, this code has "
                    f"{FEATURE_SCHEMA}: retrain with python -m leakloss.text.train_retention")
            trees = spec["trees"]
            #: what the model decides with (trees, memory, thresholds): caches of its decisions key on it
            self.fingerprint = hashlib.sha1(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
            self.memory = ContextMemory.from_json(spec["memory"])
            self.vocabulary = WordVocabulary.from_json(spec["vocabulary"])
            self.morphology = Morphology.from_json(spec["morphology"])
            self.net, self.net_weight = _build_net(spec.get("net"), net_state, source, self.morphology)
            #: the n-gram models that rescore a word's patterns together, or None (slot by slot)
            self.phonotactics = None if spec.get("phonotactics") is None else Phonotactics.from_json(
                spec["phonotactics"], source)
            self.baseline = float(spec["baseline"])
            self.thresholds = {k: float(v) for k, v in spec["thresholds"].items()}
            if not trees:
                raise RetentionModelError(f"{source}: no trees")
            width = max(len(t["feature"]) for t in trees)
            t_n = len(trees)
            self.feature = np.zeros((t_n, width), dtype=np.int64)
            self.threshold = np.zeros((t_n, width), dtype=np.float64)
            self.left = np.zeros((t_n, width), dtype=np.int64)
            self.right = np.zeros((t_n, width), dtype=np.int64)
            self.value = np.zeros((t_n, width), dtype=np.float64)
            self.leaf = np.ones((t_n, width), dtype=bool)
            self.cat = np.full((t_n, width), -1, dtype=np.int64)
            for i, t in enumerate(trees):
                m = len(t["feature"])
                self.feature[i, :m] = t["feature"]
                self.threshold[i, :m] = t["threshold"]
                self.left[i, :m] = t["left"]
                self.right[i, :m] = t["right"]
                self.value[i, :m] = t["value"]
                self.leaf[i, :m] = np.asarray(t["left"]) < 0
                self.cat[i, :m] = t["cat"]
            n_cat_values = int(spec["n_cat_values"])
            self.cat_left = np.zeros((max(len(spec["cat_left"]), 1), n_cat_values), dtype=bool)
            for r, cats in enumerate(spec["cat_left"]):
                self.cat_left[r, cats] = True
            self.depth = int(spec["max_depth"])
            self._check_tables(source, n_cat_values)
        except RetentionModelError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise RetentionModelError(f"{source}: malformed retention model ({type(e).__name__}: {e})") from None
        # leaves loop on themselves so that a fixed number of steps reaches every leaf
        ids = np.broadcast_to(np.arange(width), (t_n, width))
        self.left = np.where(self.leaf, ids, self.left)
        self.right = np.where(self.leaf, ids, self.right)
        self.card: dict = spec.get("card", {})

    def _check_tables(self, source: str, n_cat_values: int) -> None:
        """Every index a tree walk follows is in range, the thresholds are complete: a malformed file is refused
        here, not as an IndexError / KeyError at the first word (or an 11 s walk of a huge ``max_depth``)."""
        width = self.feature.shape[1]
        inner = ~self.leaf
        problems = []
        if not set(self.thresholds) >= {"high", "medium"}:
            problems.append(f"thresholds must name 'high' and 'medium', got {sorted(self.thresholds)}")
        if any(not np.isfinite(v) or not 0.0 <= v <= 1.0 for v in self.thresholds.values()):
            problems.append(f"thresholds must be probabilities, got {self.thresholds}")
        if not np.isfinite(self.baseline):
            problems.append(f"baseline must be finite, got {self.baseline}")
        if ((self.feature[inner] < 0) | (self.feature[inner] >= len(FEATURE_NAMES))).any():
            problems.append(f"a node's feature index is outside [0, {len(FEATURE_NAMES)})")
        for name, table in (("left", self.left), ("right", self.right)):
            if ((table[inner] < 0) | (table[inner] >= width)).any():
                problems.append(f"a node's {name} child is outside its tree")
        cat_nodes = inner & (self.cat >= 0)
        if (self.cat[cat_nodes] >= self.cat_left.shape[0]).any():
            problems.append("a categorical node's category row is outside cat_left")
        if not 1 <= self.depth <= width:
            problems.append(f"max_depth must be in [1, {width}] (the largest tree's nodes), got {self.depth}")
        if n_cat_values < 1:
            problems.append(f"n_cat_values must be >= 1, got {n_cat_values}")
        if not (np.isfinite(self.value).all() and np.isfinite(self.threshold[inner & (self.cat < 0)]).all()):
            problems.append("leaf values and thresholds must be finite")
        if problems:
            raise RetentionModelError(f"{source}: malformed retention model ({'; '.join(problems)})")

    def raw(self, x: np.ndarray) -> np.ndarray:
        """Log-odds of keeping: ``x [rows, features] -> [rows]``."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(FEATURE_NAMES):
            raise ValueError(f"expected [rows, {len(FEATURE_NAMES)}] features, got {x.shape}")
        rows = x.shape[0]
        if rows == 0:
            return np.zeros(0)
        t_n = self.feature.shape[0]
        tree = np.arange(t_n)[:, None]
        node = np.zeros((t_n, rows), dtype=np.int64)
        r_idx = np.arange(rows)[None, :]
        n_cat_values = self.cat_left.shape[1]
        for _ in range(self.depth + 1):
            f = self.feature[tree, node]
            v = x[r_idx, f]
            c = self.cat[tree, node]
            go_left = np.where(
                c >= 0,
                self.cat_left[np.maximum(c, 0), np.clip(v, 0, n_cat_values - 1).astype(np.int64)],
                v <= self.threshold[tree, node],
            )
            node = np.where(go_left, self.left[tree, node], self.right[tree, node])
        return self.baseline + self.value[tree, node].sum(axis=0)

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """``P(keep)`` per row: ``[rows, features] -> [rows]``."""
        return 1.0 / (1.0 + np.exp(-self.raw(x)))

    def plan_logits_trees(self, plan: SlotPlan) -> np.ndarray:
        """The trees' log-odds of keeping each inherent vowel of a planned word: ``[len(plan.slots)]`` float64."""
        return self.raw(slot_features(plan, self.memory, self.vocabulary, self.morphology)) if plan.slots else np.zeros(0)

    def plan_logits(self, plan: SlotPlan) -> tuple[np.ndarray, np.ndarray | None]:
        """The trees' and the network's log-odds of keeping each inherent vowel of a planned word, each
        ``[len(plan.slots)]`` float64 (the network's None when the model has none)."""
        trees = self.plan_logits_trees(plan)
        return trees, (None if self.net is None else self.net.logits(plan))

    def predict_plan(self, plan: SlotPlan) -> np.ndarray:
        """``P(keep)`` per inherent vowel of a planned word: ``[len(plan.slots)]``."""
        return mixed_probability(*self.plan_logits(plan), self.net_weight)

    def decide(self, plan: SlotPlan, forced: Sequence[bool] | None = None) -> Rescored:
        """Keep or drop each inherent vowel of a planned word, ``forced`` slots (default :func:`forced_slots`)
        always kept: the word's pattern (rescored by the n-gram models when the model has them,
        :mod:`leakloss.text.phonotactics`; else each free slot kept when ``P(keep) >= 0.5``), each slot's
        ``P(keep)`` ``[n_slots]`` (a forced slot's: 1) and the word's probability (:func:`word_probability`
        of the free slots without rescoring)."""
        p_keep = self.predict_plan(plan)
        forced = np.asarray(forced_slots(plan) if forced is None else forced, dtype=bool)
        if forced.shape != p_keep.shape:
            raise ValueError(f"{len(forced)} forced flags for {len(p_keep)} slots")
        if self.phonotactics is None:
            return slot_by_slot(p_keep, forced)
        return self.phonotactics.decide(plan, p_keep, forced)

    def confidence(self, word_prob: float) -> str:
        """``high`` / ``medium`` / ``low`` from a word probability (:meth:`decide`'s ``probability``)."""
        if word_prob >= self.thresholds["high"]:
            return "high"
        if word_prob >= self.thresholds["medium"]:
            return "medium"
        return "low"


def mixed_probability(trees: np.ndarray, net: np.ndarray | None, weight: float) -> np.ndarray:
    """``sigmoid((1 - weight) * trees + weight * net)`` of log-odds ``[n]`` (the trees' alone when ``net`` is None)."""
    z = trees if net is None else (1.0 - weight) * trees + weight * net
    return 1.0 / (1.0 + np.exp(-np.asarray(z, dtype=np.float64)))


def _build_net(spec: dict | None, state: dict | None, source: str, morphology: Morphology):
    """The network a model spec names, with ``state``'s weights reading ``morphology``, and its weight in the
    mix; (None, 0.0) if none."""
    if spec is None:
        return None, 0.0
    from leakloss.text.retention_net import NetEnsemble, NumpyRetentionNet, field_sizes

    if state is None:
        raise RetentionModelError(f"{source}: mixes in a network ({spec.get('file')}) whose weights were not given")
    weight = float(spec["weight"])
    if not 0.0 <= weight <= 1.0:  # NaN fails too
        raise RetentionModelError(f"{source}: network weight must be in [0, 1], got {weight}")
    if list(spec["sizes"]) != field_sizes():
        raise RetentionModelError(f"{source}: network trained for unit fields of sizes {spec['sizes']}, this code "
                                  f"has {field_sizes()}: retrain with python -m leakloss.text.train_retention")
    members = int(spec["members"])
    if members < 1:
        raise RetentionModelError(f"{source}: a network ensemble of {members} members")
    try:
        nets = []
        for i in range(members):
            prefix = f"member{i}."
            own = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            nets.append(NumpyRetentionNet(own, spec["sizes"], int(spec["embed"]), int(spec["hidden"]),
                                          int(spec["layers"]), morphology))
        if set(state) - {f"member{i}.{k}" for i in range(members) for k in nets[i].w}:
            raise ValueError(f"tensors of no member: {sorted(state)[:4]}")
    except ValueError as e:
        raise RetentionModelError(f"{source}: network weights do not fit its architecture: {e}") from None
    return NetEnsemble(nets), weight


def slot_by_slot(p_keep: np.ndarray, forced: Sequence[bool]) -> Rescored:
    """Each slot decided alone: kept when forced or ``P(keep) >= 0.5``; ``p_keep [n_slots]`` as given (a forced
    slot's: 1); the word's probability the :func:`word_probability` of the free slots."""
    p_keep = np.asarray(p_keep, dtype=np.float64)
    forced = np.asarray(forced, dtype=bool)
    return Rescored(tuple(bool(f or p >= 0.5) for f, p in zip(forced, p_keep)), np.where(forced, 1.0, p_keep),
                    word_probability(p_keep[~forced]))


def word_probability(p_keep: np.ndarray) -> float:
    """Probability that every slot decision (``p >= 0.5`` keeps) is right, slots taken as independent."""
    p = np.asarray(p_keep, dtype=np.float64)
    return float(np.prod(np.maximum(p, 1.0 - p))) if p.size else 1.0


@lru_cache(maxsize=4)
def _load(path: str) -> RetentionModel:
    try:
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RetentionModelError(f"cannot read retention model {path}: {e}") from None
    if not isinstance(spec, dict):
        raise RetentionModelError(f"{path}: not a JSON object")
    state = None
    net = spec.get("net")
    if isinstance(net, dict):
        state = _read_net_weights(Path(path).parent / str(net.get("file")), net.get("sha256"))
    return RetentionModel(spec, str(path), state)


def _read_net_weights(path: Path, sha256: object) -> dict:
    """The network's weights (numpy arrays) from their safetensors file, which must be the one the model was
    exported with."""
    from safetensors.numpy import load as load_safetensors

    try:
        data = path.read_bytes()
    except OSError as e:
        raise RetentionModelError(f"cannot read the retention model's network weights {path}: {e}") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise RetentionModelError(f"{path}: not the network weights its model was exported with (sha256 differs)")
    try:
        return load_safetensors(data)
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise RetentionModelError(f"{path}: not a safetensors file ({type(e).__name__}: {e})") from None


def load_retention_model(path: str | Path | None = None) -> RetentionModel:
    """The shipped model (``path=None``) or a JSON model file; cached per path."""
    return _load(str(Path(path) if path is not None else SHIPPED_MODEL))
