"""Word-level rescoring of inherent-vowel decisions by n-gram models of Nepali words.

The retention model (:mod:`leakloss.text.retention`) gives every inherent vowel its own ``P(keep)``; taking
each slot's likelier decision judges the slots one by one, never the word they make together. Here the
candidate patterns of a word (every keep/drop combination of its free slots, or the likeliest
:data:`BEAM` by the slots' own probabilities when a word has more than :data:`EXHAUSTIVE_SLOTS`) are each
written out as token sequences (:func:`pattern_tokens`: the word's ``phones``, and its ``letters`` -- each
unit's spelling marked with the decision for its inherent vowel) and scored

    S(c) = sum over free slots of log P(slot decision) + sum over kinds of weight[kind] * log P_kind(tokens of c)
           + keep_bonus * (vowels kept)

with :class:`NgramModel` models of the training words' patterns (interpolated absolute discounting over
Kneser-Ney continuation unigrams). The word is given the pattern of highest ``S``; its probability is that
pattern's share of ``softmax(S)`` over the candidates, and each slot's ``P(keep)`` is its posterior marginal.
``keep_bonus`` offsets the n-grams' preference for shorter words (every kept vowel is one more phone to pay
for); the weights and ``keep_bonus`` are chosen out of fold by :mod:`leakloss.text.train_retention`. With
every weight and ``keep_bonus`` zero the decisions and the word probability are exactly the slot-by-slot ones.

The n-gram tables hold 64-bit hashes (:data:`leakloss.text.retention.VOCABULARY_HASH`) of the n-grams and
their histories with counts; no phone or letter string is stored.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Iterable, Mapping, NamedTuple, Sequence

import numpy as np

__all__ = ["NgramModel", "Phonotactics", "Candidates", "Rescored", "candidates", "rescore", "pattern_scores",
           "pattern_tokens", "ORDERS", "DISCOUNT", "BEAM", "EXHAUSTIVE_SLOTS", "BOS", "EOS", "KINDS"]

#: The token sequences a pattern is written as (:func:`pattern_tokens`), in the order of every weight vector.
KINDS: tuple[str, ...] = ("phones", "letters")
#: n-gram order per kind (tokens of history + 1). Out of fold (trees alone, 5 folds, 22,299 words): phone
#: orders 4 / 5 / 6 / 7 / 8 leave 873 / 861 / 854 / 854 / 856 errors of 920; letters of order 3 and 4 added to the
#: phones, with the networks mixed in (10 folds, 27,546 words): 880 -> 813 both, 837 phones alone.
ORDERS: dict[str, int] = {"phones": 6, "letters": 3}
DISCOUNT = 0.75  #: absolute discount subtracted from every seen n-gram's count
EXHAUSTIVE_SLOTS = 6  #: words with at most this many free slots have all 2**n patterns scored
BEAM = 32  #: otherwise the likeliest patterns kept by a beam over the slots' own probabilities
BOS, EOS = "<s>", "</s>"
_UNSEEN = 0.5  #: pseudo-count of every token in the unigram distribution (an unseen phone is not impossible)


def _count(value: object) -> int:
    """A count read from JSON: a non-negative integer (not a bool, not 1.7, not Infinity)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"a count must be a non-negative integer, got {value!r}")
    return value


def _key(tokens: Sequence[str]) -> str:
    return " ".join(tokens)


class NgramModel:
    """An order-``order`` model of token sequences (a word's phones or letters), ``P(x | h)`` by interpolated
    absolute discounting::

        P_k(x | h) = max(c(h x) - d, 0) / c(h) + d * T(h) / c(h) * P_{k-1}(x | h[1:])

    down to Kneser-Ney continuation unigrams ``P_1(x) = (N(. x) + 0.5) / (N(. .) + 0.5 V)`` (``N(. x)``: distinct
    tokens seen before ``x``, ``V``: the tokens seen, ``EOS`` included); ``c(h)``: times ``h`` was a history,
    ``T(h)``: distinct tokens after it; a history never seen passes straight to the lower order.
    Every ``P_k(. | h)`` sums to one over the ``V`` tokens seen in training; a token never seen (not a phone of
    any training word) gets the floor ``0.5 / (N(. .) + 0.5 V)`` of the unigrams, outside that sum.

    ``ngrams`` / ``histories``: hash -> count and hash -> (count, distinct continuations), the hashes of
    ``" ".join(tokens)`` (histories padded with :data:`BOS`).
    """

    def __init__(self, order: int, discount: float, ngrams: dict[int, int], histories: dict[int, tuple[int, int]],
                 continuation: dict[str, int], source: str = "<counts>") -> None:
        from leakloss.text.tables import RetentionModelError

        if not (isinstance(order, int) and order >= 1) or not 0.0 < discount < 1.0:
            raise RetentionModelError(f"{source}: an n-gram model needs order >= 1 and discount in (0, 1), "
                                      f"got order {order!r}, discount {discount!r}")
        self.order, self.discount, self.source = order, float(discount), source
        self.ngram_keys = np.asarray(sorted(ngrams), dtype=np.uint64)
        self.ngram_counts = np.asarray([ngrams[k] for k in sorted(ngrams)], dtype=np.float64)
        hk = sorted(histories)
        self.history_keys = np.asarray(hk, dtype=np.uint64)
        self.history_counts = np.asarray([histories[k][0] for k in hk], dtype=np.float64)
        self.history_types = np.asarray([histories[k][1] for k in hk], dtype=np.float64)
        self.continuation = dict(continuation)
        total = sum(self.continuation.values())
        self._unigram_den = total + _UNSEEN * len(self.continuation)
        self._cache: dict[tuple[tuple[str, ...], str], float] = {}

    @classmethod
    def count(cls, sequences: Iterable[Sequence[str]], order: int = ORDERS["phones"],
              discount: float = DISCOUNT) -> "NgramModel":
        """The model of ``sequences`` (each a word's phones; :data:`EOS` is appended, :data:`BOS` pads the history)."""
        from leakloss.text.tables import _hash

        ngrams: Counter = Counter()
        histories: Counter = Counter()
        followers: dict[tuple[str, ...], set] = {}
        before: dict[str, set] = {}
        for seq in sequences:
            toks = [BOS] * (order - 1) + list(seq) + [EOS]
            for i in range(order - 1, len(toks)):
                x = toks[i]
                before.setdefault(x, set()).add(toks[i - 1])
                for k in range(2, order + 1):
                    h = tuple(toks[i - k + 1:i])
                    ngrams[h + (x,)] += 1
                    histories[h] += 1
                    followers.setdefault(h, set()).add(x)
        continuation = {x: len(b) for x, b in before.items()}
        return cls(order, discount, {_hash(_key(g)): c for g, c in ngrams.items()},
                   {_hash(_key(h)): (c, len(followers[h])) for h, c in histories.items()}, continuation)

    def __len__(self) -> int:
        """Distinct n-grams of orders 2..order."""
        return len(self.ngram_keys)

    @staticmethod
    def _find(keys: np.ndarray, key: int) -> int:
        i = int(np.searchsorted(keys, np.uint64(key)))
        return i if i < len(keys) and int(keys[i]) == key else -1

    def prob(self, history: Sequence[str], token: str) -> float:
        """``P(token | history)``; ``history`` is the phones before ``token`` (shorter ones are padded with BOS)."""
        from leakloss.text.tables import _hash

        h = tuple(history)[-(self.order - 1):] if self.order > 1 else ()
        h = (BOS,) * (self.order - 1 - len(h)) + h
        key = (h, token)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        p = (self.continuation.get(token, 0) + _UNSEEN) / self._unigram_den
        for k in range(2, self.order + 1):
            hk = h[len(h) - (k - 1):]
            j = self._find(self.history_keys, _hash(_key(hk)))
            if j < 0:
                continue
            c_h, t_h = self.history_counts[j], self.history_types[j]
            g = self._find(self.ngram_keys, _hash(_key(hk + (token,))))
            c = self.ngram_counts[g] if g >= 0 else 0.0
            p = max(c - self.discount, 0.0) / c_h + self.discount * t_h / c_h * p
        if len(self._cache) >= 1 << 18:
            self._cache.clear()
        self._cache[key] = p
        return p

    def log_prob(self, phones: Sequence[str]) -> float:
        """Natural-log probability of a whole word: its phones, then :data:`EOS`."""
        toks = list(phones) + [EOS]
        return float(sum(math.log(self.prob(toks[:i], x)) for i, x in enumerate(toks)))

    def to_json(self) -> dict:
        from leakloss.text.tables import VOCABULARY_HASH, _pack

        return {"hash": VOCABULARY_HASH, "order": self.order, "discount": self.discount,
                "continuation": dict(sorted(self.continuation.items())),
                "ngrams": _pack(self.ngram_keys, ">u8"),
                "ngram_counts": _pack(self.ngram_counts.astype(np.uint64), ">u4"),
                "histories": _pack(self.history_keys, ">u8"),
                "history_counts": _pack(self.history_counts.astype(np.uint64), ">u4"),
                "history_types": _pack(self.history_types.astype(np.uint64), ">u4")}

    @classmethod
    def from_json(cls, spec: dict, source: str = "<json>") -> "NgramModel":
        from leakloss.text.tables import VOCABULARY_HASH, RetentionModelError, _unpack_array

        try:
            if spec.get("hash") != VOCABULARY_HASH:
                raise RetentionModelError(f"{source}: n-grams hashed by {spec.get('hash')!r}, this code "
                                          f"reads {VOCABULARY_HASH!r}")
            keys, counts = _unpack_array(spec["ngrams"], ">u8"), _unpack_array(spec["ngram_counts"], ">u4")
            hkeys = _unpack_array(spec["histories"], ">u8")
            hcounts, htypes = _unpack_array(spec["history_counts"], ">u4"), _unpack_array(spec["history_types"], ">u4")
            continuation = {str(k): _count(v) for k, v in spec["continuation"].items()}
            order, discount = spec["order"], float(spec["discount"])
            if isinstance(order, bool) or not isinstance(order, int):
                raise ValueError(f"order must be an integer, got {order!r}")
            if not continuation:
                raise ValueError("no continuation counts (an n-gram model of nothing)")
        except RetentionModelError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise RetentionModelError(f"{source}: malformed n-gram table ({type(e).__name__}: {e})") from None
        if len(keys) != len(counts) or not len(hkeys) == len(hcounts) == len(htypes):
            raise RetentionModelError(f"{source}: n-gram keys and counts differ in length")
        for name, k in (("n-gram", keys), ("history", hkeys)):
            if not (k[1:] > k[:-1]).all():
                raise RetentionModelError(f"{source}: {name} hashes are not sorted and distinct")
        if (counts == 0).any() or (hcounts == 0).any() or (htypes == 0).any() or (htypes > hcounts).any():
            raise RetentionModelError(f"{source}: n-gram counts must be >= 1 and continuations <= counts")
        model = cls(order, discount, {}, {}, continuation, source)
        model.ngram_keys, model.ngram_counts = keys, counts.astype(np.float64)
        model.history_keys, model.history_counts, model.history_types = (
            hkeys, hcounts.astype(np.float64), htypes.astype(np.float64))
        return model


def pattern_tokens(plan, kept: Sequence[bool], kind: str) -> list[str]:
    """A planned word with ``kept[i]`` deciding slot i as a token sequence: ``phones`` (:func:`plan_phones`) or
    ``letters``: each unit's spelling (:func:`spelling_pieces`), an inherent vowel's marked ``+`` kept / ``-``
    dropped, a suffix's first unit after ``#`` (कमलमा, keep, keep, drop: ``क+ म+ ल- #मा``)."""
    from leakloss.text.slots import plan_phones, spelling_pieces

    if kind == "phones":
        return list(plan_phones(plan, kept))
    if kind != "letters":
        raise ValueError(f"unknown pattern token kind {kind!r}; known: {KINDS}")
    if len(kept) != len(plan.slots):
        raise ValueError(f"{len(kept)} decisions for {len(plan.slots)} slots")
    mark = {k: "+" if v else "-" for k, v in zip(plan.slots, kept)}
    starts = {a for _, a, _ in plan.parts[1:]}
    return [("#" if i in starts else "") + t + mark.get(i, "") for i, t in enumerate(spelling_pieces(plan))]


class Candidates(NamedTuple):
    """A word's candidate patterns: ``kept [c, n_slots]`` bool; ``slot_logp [c]``: sum over free slots of the
    log-probability of the candidate's decision; ``ngram_logp [c, k]``: :meth:`NgramModel.log_prob` of its tokens
    by each of the ``k`` n-gram models given; ``n_kept [c]``: free slots it keeps; ``p_keep``: the slots' own
    probabilities."""

    kept: np.ndarray
    slot_logp: np.ndarray
    ngram_logp: np.ndarray
    n_kept: np.ndarray
    p_keep: np.ndarray  #: ``[n_slots]`` each slot's own P(keep) (clipped to (0, 1); a forced slot's: 1)


class Phonotactics(NamedTuple):
    """What a retention model rescores with: an n-gram model per kind of :data:`KINDS` it uses, their weights
    (same keys) and the bonus per kept vowel."""

    ngrams: dict[str, NgramModel]
    weights: dict[str, float]
    keep_bonus: float

    def to_json(self) -> dict:
        return {"ngrams": {k: m.to_json() for k, m in self.ngrams.items()}, "weights": dict(self.weights),
                "keep_bonus": self.keep_bonus}

    @classmethod
    def from_json(cls, spec: dict, source: str = "<json>") -> "Phonotactics":
        from leakloss.text.tables import RetentionModelError

        try:
            ngrams = {str(k): NgramModel.from_json(v, f"{source} ({k})") for k, v in spec["ngrams"].items()}
            weights = {str(k): float(v) for k, v in spec["weights"].items()}
            keep_bonus = float(spec["keep_bonus"])
        except RetentionModelError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
            raise RetentionModelError(f"{source}: malformed phonotactics entry ({type(e).__name__}: {e})") from None
        if set(ngrams) != set(weights) or not set(ngrams) <= set(KINDS):
            raise RetentionModelError(f"{source}: phonotactic n-grams {sorted(ngrams)} and weights {sorted(weights)} "
                                      f"must name the same kinds, among {KINDS}")
        if not all(math.isfinite(w) and w >= 0.0 for w in weights.values()) or not math.isfinite(keep_bonus):
            raise RetentionModelError(f"{source}: phonotactic weights must be finite and >= 0 and the keep bonus "
                                      f"finite, got {weights}, {keep_bonus}")
        return cls(ngrams, weights, keep_bonus)

    def decide(self, plan, p_keep: np.ndarray, forced: Sequence[bool] | None = None) -> "Rescored":
        """:func:`rescore` of :func:`candidates` of a planned word with these models and settings."""
        return rescore(candidates(plan, p_keep, self.ngrams, forced), [self.weights[k] for k in self.ngrams],
                       self.keep_bonus)


class Rescored(NamedTuple):
    """The decision for a word: ``kept`` per slot, ``p_keep [n_slots]`` the posterior marginal of keeping each
    slot (a forced slot: 1), ``probability`` the chosen pattern's posterior."""

    kept: tuple[bool, ...]
    p_keep: np.ndarray
    probability: float


def candidates(plan, p_keep: np.ndarray, ngrams: Mapping[str, NgramModel] | None = None,
               forced: Sequence[bool] | None = None) -> Candidates:
    """The candidate patterns of a planned word from its slots' ``P(keep)`` ``[n_slots]``, scored by each model of
    ``ngrams`` (kind -> model, :data:`KINDS`; none: no n-gram columns); ``forced`` slots are always kept. Keeping
    comes first (all 2**n patterns in :func:`itertools.product` order of keep, drop; the beam stable), so that a
    tie between two patterns goes to the one that keeps, as ``p >= 0.5`` keeps."""
    p = np.clip(np.asarray(p_keep, dtype=np.float64), 1e-12, 1.0 - 1e-12)
    n = len(p)
    if len(plan.slots) != n:
        raise ValueError(f"{n} probabilities for {len(plan.slots)} slots")
    forced_mask = np.zeros(n, dtype=bool) if forced is None else np.asarray(forced, dtype=bool)
    free = np.flatnonzero(~forced_mask)
    lp1, lp0 = np.log(p[free]), np.log1p(-p[free])
    if len(free) <= EXHAUSTIVE_SLOTS:
        choice = np.asarray(list(itertools.product((True, False), repeat=len(free))), dtype=bool)
        choice = choice.reshape(len(choice), len(free))  # one empty pattern when no slot is free
    else:
        beam, scores = np.zeros((1, 0), dtype=bool), np.zeros(1)
        for i in range(len(free)):
            beam = np.concatenate([np.pad(beam, ((0, 0), (0, 1)), constant_values=v) for v in (True, False)])
            scores = np.concatenate([scores + lp1[i], scores + lp0[i]])
            top = np.argsort(-scores, kind="stable")[:BEAM]
            beam, scores = beam[top], scores[top]
        choice = beam
    kept = np.ones((len(choice), n), dtype=bool)
    kept[:, free] = choice
    slot_logp = np.where(choice, lp1, lp0).sum(axis=1)
    models = list((ngrams or {}).items())
    ngram_logp = np.asarray([[m.log_prob(pattern_tokens(plan, row, kind)) for kind, m in models] for row in kept],
                            dtype=np.float64).reshape(len(kept), len(models))
    return Candidates(kept, slot_logp, ngram_logp, choice.sum(axis=1).astype(np.float64),
                      np.where(forced_mask, 1.0, p))


def pattern_scores(cands: Candidates, weights: Sequence[float], keep_bonus: float) -> np.ndarray:
    """``[c]`` each candidate's ``slot_logp + ngram_logp @ weights + keep_bonus * n_kept`` (the one place it is
    summed, so that the training script's vectorised search ranks candidates exactly as :func:`rescore` does)."""
    weights = np.asarray(weights, dtype=np.float64).reshape(-1)
    return cands.slot_logp + cands.ngram_logp @ weights + keep_bonus * cands.n_kept


def rescore(cands: Candidates, weights: Sequence[float], keep_bonus: float) -> Rescored:
    """The pattern of highest :func:`pattern_scores`, its posterior (softmax over the candidates scored) and each
    slot's posterior ``P(keep)``; ties go to the first candidate. With every weight and the bonus zero the slots are
    independent and the exact values are returned: each slot's own ``P(keep)``, and the product of the chosen
    decisions' probabilities (a beam's softmax would leave out the patterns it dropped). With n-grams, a word
    whose patterns were cut to a beam gets its posterior among the beam's (an upper estimate)."""
    s = pattern_scores(cands, weights, keep_bonus)
    best = int(np.argmax(s))
    if keep_bonus == 0.0 and not np.any(np.asarray(weights, dtype=np.float64)):
        return Rescored(tuple(bool(v) for v in cands.kept[best]), cands.p_keep, float(np.exp(cands.slot_logp[best])))
    post = np.exp(s - s[best])
    post /= post.sum()
    marginal = post @ cands.kept.astype(np.float64)
    return Rescored(tuple(bool(v) for v in cands.kept[best]), marginal, float(post[best]))
