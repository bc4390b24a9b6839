"""Phone confusions: which reference phone a recognizer heard as which, from one minimum-edit alignment.

``phone_confusions(ref, hyp)`` counts the edits of a Levenshtein alignment as ``(reference, hypothesis)``
pairs, ``"-"`` standing for the missing side: ``("ʌ", "a")`` a substitution, ``("t", "-")`` a deletion,
``("-", "j")`` an insertion. The counts sum to the edit distance, so they break a phone error rate
(:func:`leakloss.scorer.phone_error_rate`) down without changing it. Of equally short alignments the one
with the fewest vowel-for-consonant substitutions is taken (``kʌt`` heard as ``ka`` is ʌ->a and t deleted,
not t->a and ʌ deleted); remaining ties prefer substitutions, then deletions (deterministic).

    >>> sorted(phone_confusions(["k", "ʌ", "t"], ["k", "a"]).items())  # named as canonical phones
    [(('t', '-'), 1), (('ʌ', 'aː'), 1)]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from leakloss.text.phones import canonical, is_vowel

GAP = "-"

__all__ = ["GAP", "phone_confusions", "corpus_confusions"]


def phone_confusions(reference: Sequence[str], hypothesis: Sequence[str],
                     phone_class: Callable[[str], str] = canonical) -> Counter:
    """The edits turning ``reference`` into ``hypothesis``, compared and named as ``phone_class`` (by default
    :func:`leakloss.text.phones.canonical`, as every phone error rate: ʌ heard as ə is no edit), as a ``Counter`` of
    ``(reference phone, hypothesis phone)``; ``sum(counts) == edit distance``."""
    ref = [phone_class(p) for p in reference]
    hyp = [phone_class(p) for p in hypothesis]
    n, m = len(ref), len(hyp)
    # cost = (edits, vowel-for-consonant substitutions): the first is the edit distance, the second breaks ties
    ref_v, hyp_v = [is_vowel(p) for p in ref], [is_vowel(p) for p in hyp]

    def sub(i: int, j: int) -> tuple[int, int]:
        return (0, 0) if ref[i] == hyp[j] else (1, int(ref_v[i] != hyp_v[j]))

    def plus(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return a[0] + b[0], a[1] + b[1]

    table = [[(j, 0) for j in range(m + 1)]] + [[(i, 0)] + [(0, 0)] * m for i in range(1, n + 1)]
    for i in range(1, n + 1):
        row, prev = table[i], table[i - 1]
        for j in range(1, m + 1):
            row[j] = min(plus(prev[j - 1], sub(i - 1, j - 1)), plus(prev[j], (1, 0)), plus(row[j - 1], (1, 0)))
    out: Counter = Counter()
    i, j = n, m
    while i or j:
        if i and j and table[i][j] == plus(table[i - 1][j - 1], sub(i - 1, j - 1)):
            if ref[i - 1] != hyp[j - 1]:
                out[(ref[i - 1], hyp[j - 1])] += 1
            i, j = i - 1, j - 1
        elif i and table[i][j] == plus(table[i - 1][j], (1, 0)):
            out[(ref[i - 1], GAP)] += 1
            i -= 1
        else:
            out[(GAP, hyp[j - 1])] += 1
            j -= 1
    return out


def corpus_confusions(pairs: Iterable[tuple[Sequence[str], Sequence[str]]],
                      phone_class: Callable[[str], str] = canonical) -> tuple[Counter, int]:
    """Confusions summed over ``(reference, hypothesis)`` pairs, and the reference phones counted
    (``sum(confusions) / phones`` is :func:`leakloss.scorer.corpus_phone_error_rate` of the same hypotheses)."""
    total: Counter = Counter()
    phones = 0
    for ref, hyp in pairs:
        total += phone_confusions(ref, hyp, phone_class)
        phones += len(ref)
    return total, phones
