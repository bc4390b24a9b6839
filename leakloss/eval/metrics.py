"""Corpus error rates, each as a function and a torchmetrics ``Metric`` that share one update and compute
(as torchmetrics' ``word_error_rate`` / ``WordErrorRate``).

- :func:`char_error_rate` / :class:`CharErrorRate` and :func:`word_error_rate` / :class:`WordErrorRate`:
  texts compared after the Hindi-safe normaliser (:func:`leakloss.eval.normalize.normalize_for_asr`), edits
  summed over the corpus and divided by the summed reference length (jiwer's corpus CER / WER);
- :func:`phone_error_rate` / :class:`PhoneErrorRate`: phone sequences compared as phone classes
  (:func:`leakloss.text.phones.canonical` by default: ʌ and ə are one phone).

A metric object accumulates two sums (``errors``, ``total``; summed across processes under DDP), so
``update`` over batches then ``compute`` equals the function over the whole corpus.

Raises ``ValueError`` for a reference that is empty (after normalisation): an error rate needs something
to be wrong about; ``TypeError`` for texts that are not ``str``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor
from torchmetrics import Metric

from leakloss.text.phones import canonical

__all__ = ["CharErrorRate", "PhoneErrorRate", "WordErrorRate", "char_error_rate", "phone_error_rate",
           "word_error_rate"]


def _as_list(texts: str | Sequence[str], name: str) -> list[str]:
    texts = [texts] if isinstance(texts, str) else list(texts)
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"{name} must be str or a sequence of str, got a {type(t).__name__}")
    return texts


def _edit_counts(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]]) -> tuple[Tensor, Tensor]:
    """(edits, reference units) summed over the pairs, as float64 scalars."""
    from torchaudio.functional import edit_distance

    if len(references) != len(hypotheses):
        raise ValueError(f"one hypothesis per reference: {len(references)} references, {len(hypotheses)} hypotheses")
    errors = total = 0
    for i, (ref, hyp) in enumerate(zip(references, hypotheses)):
        if not ref:
            raise ValueError(f"reference {i} is empty (after normalisation): an error rate needs a reference unit")
        errors += edit_distance(list(ref), list(hyp))
        total += len(ref)
    return torch.tensor(errors, dtype=torch.float64), torch.tensor(total, dtype=torch.float64)


def _text_update(references: str | Sequence[str], hypotheses: str | Sequence[str], unit: str) -> tuple[Tensor, Tensor]:
    from leakloss.eval.normalize import normalize_for_asr

    refs = [normalize_for_asr(t) for t in _as_list(references, "references")]
    hyps = [normalize_for_asr(t) for t in _as_list(hypotheses, "hypotheses")]
    split = list if unit == "char" else str.split
    return _edit_counts([split(t) for t in refs], [split(t) for t in hyps])


def _as_phone_lists(sequences: Sequence[Sequence[str]], name: str) -> list[list[str]]:
    """A corpus of phone lists; a str where a phone list belongs is refused (``["a", "b"]`` as one utterance's
    phones would otherwise be read as two utterances of single-character phones: a wrong rate, no error)."""
    if isinstance(sequences, str) or not isinstance(sequences, Sequence):
        raise TypeError(f"{name} must be a list of phone lists, got {type(sequences).__name__}")
    out = []
    for i, phones in enumerate(sequences):
        if isinstance(phones, str) or not isinstance(phones, Sequence):
            raise TypeError(f"{name}[{i}] must be a list of phones, got {type(phones).__name__} {phones!r:.40}: "
                            f"one utterance is [[phone, ...]]")
        for phone in phones:
            if not isinstance(phone, str):
                raise TypeError(f"{name}[{i}] holds a {type(phone).__name__}, not a phone string")
        out.append(list(phones))
    return out


def _phone_update(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]],
                  phone_class: Callable[[str], str]) -> tuple[Tensor, Tensor]:
    return _edit_counts([[phone_class(p) for p in r] for r in _as_phone_lists(references, "references")],
                        [[phone_class(p) for p in h] for h in _as_phone_lists(hypotheses, "hypotheses")])


def _compute(errors: Tensor, total: Tensor) -> Tensor:
    if float(total) == 0:
        raise ValueError("no reference units: update with at least one reference first")
    return (errors / total).float()


def char_error_rate(references: str | Sequence[str], hypotheses: str | Sequence[str]) -> Tensor:
    """Corpus CER: character edits (Unicode code points of the normalised NFC text, spaces included) summed
    over the pairs / reference characters summed. A scalar fp32 tensor; can exceed 1."""
    return _compute(*_text_update(references, hypotheses, "char"))


def word_error_rate(references: str | Sequence[str], hypotheses: str | Sequence[str]) -> Tensor:
    """Corpus WER: word edits (normalised text split on whitespace) summed / reference words summed."""
    return _compute(*_text_update(references, hypotheses, "word"))


def phone_error_rate(references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]],
                     phone_class: Callable[[str], str] = canonical) -> Tensor:
    """Corpus PER over phone sequences (``references[i]``: a list of phones), compared as ``phone_class``."""
    return _compute(*_phone_update(references, hypotheses, phone_class))


class _ErrorRate(Metric):
    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("errors", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def _add(self, errors: Tensor, total: Tensor) -> None:
        self.errors += errors.to(self.errors.device)
        self.total += total.to(self.total.device)

    def compute(self) -> Tensor:
        return _compute(self.errors, self.total)


class CharErrorRate(_ErrorRate):
    """:func:`char_error_rate` accumulated over ``update(references, hypotheses)`` calls."""

    def update(self, references: str | Sequence[str], hypotheses: str | Sequence[str]) -> None:
        self._add(*_text_update(references, hypotheses, "char"))


class WordErrorRate(_ErrorRate):
    """:func:`word_error_rate` accumulated over ``update(references, hypotheses)`` calls."""

    def update(self, references: str | Sequence[str], hypotheses: str | Sequence[str]) -> None:
        self._add(*_text_update(references, hypotheses, "word"))


class PhoneErrorRate(_ErrorRate):
    """:func:`phone_error_rate` accumulated over ``update(references, hypotheses)`` calls."""

    def __init__(self, phone_class: Callable[[str], str] = canonical, **kwargs) -> None:
        super().__init__(**kwargs)
        self.phone_class = phone_class

    def update(self, references: Sequence[Sequence[str]], hypotheses: Sequence[Sequence[str]]) -> None:
        self._add(*_phone_update(references, hypotheses, self.phone_class))
