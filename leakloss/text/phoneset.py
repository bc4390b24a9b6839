"""Map phones onto a recognizer's vocabulary: each phone becomes the SET of tokens that count as it.

The vocabulary comes from the recognizer (its ``vocab.json``), so the real espeak-cv-ft checkpoints
and the project's own recognizers share this code. ``ʌ, ə, ɐ`` are one open central vowel; length
and diacritic variants count as the phone where the vocabulary splits them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from leakloss.text.phones import NASAL, clean_espeak_ipa, equivalents

_DIACRITICS = ("ː", "\u032f", NASAL, "\u0329", "\u032a")  # length, non-syllabic, nasal, syllabic, dental


class UnmappablePhoneError(KeyError):
    """A phone has no token in the recognizer's vocabulary."""


class PhoneSet:
    """Phones -> sets of token ids of one vocabulary (special tokens excluded)."""

    SPECIAL = frozenset({"<pad>", "<s>", "</s>", "<unk>", "|", "[PAD]", "[UNK]"})

    def __init__(self, vocab: Mapping[str, int], blank_token: str = "<pad>") -> None:
        if blank_token not in vocab:
            raise ValueError(f"vocabulary has no blank token {blank_token!r}")
        self.vocab = dict(vocab)
        self.blank = vocab[blank_token]
        self.id_to_token = {i: t for t, i in vocab.items()}
        self._phones = {clean_espeak_ipa(t): i for t, i in vocab.items() if t not in self.SPECIAL}
        self._cache: dict[str, frozenset[int]] = {}

    def __len__(self) -> int:
        return len(self.vocab)

    def tokens(self, phone: str) -> frozenset[int]:
        """Token ids accepted for ``phone``; raises :class:`UnmappablePhoneError` if none."""
        if phone in self._cache:
            return self._cache[phone]
        ids = self._lookup(phone)
        if not ids:
            stripped = phone
            for mark in _DIACRITICS:
                stripped = stripped.replace(mark, "")
            ids = self._lookup(stripped) | self._lookup(stripped.replace("ʰ", ""))
        if not ids:
            raise UnmappablePhoneError(f"phone {phone!r} has no token in the recognizer vocabulary")
        self._cache[phone] = frozenset(ids)
        return self._cache[phone]

    def _lookup(self, phone: str) -> set[int]:
        return {self._phones[s] for s in equivalents(clean_espeak_ipa(phone)) if s in self._phones}

    def map(self, phones: Sequence[str]) -> list[frozenset[int]]:
        return [self.tokens(p) for p in phones]

    def same(self, a: str, b: str) -> bool:
        """Two phones count as the same when their token sets overlap."""
        return bool(self.tokens(a) & self.tokens(b))

    def decode(self, ids: Sequence[int]) -> list[str]:
        return [self.id_to_token[i] for i in ids]
