"""The leak reward for RL: a [0, 1] score per reading (1 = no leak), with its status.

:func:`leak_reward` turns the penalty's signal into a reward for GRPO/best-of-N: it is NOT differentiable
(computed under ``no_grad``); ``leak_reward.higher_is_better = True``. A reading that is silent, fails the word
check (noise, another text) or cannot be judged gets the worst reward, 0.0; :func:`leak_reward_details` says why.
Adapters for RL frameworks and best-of-N reranking: :mod:`leakloss.rewards`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from leakloss.acoustic.features import SILENCE_PEAK
from leakloss.constants import SAMPLE_RATE
from leakloss.functional.leak import at_hearing_level
from leakloss.penalty import LeakPenalty, PenaltyInputError, check_lengths, check_wave
from leakloss.schema import JUDGED_REWARD_STATUSES, REWARD_STATUSES, RewardStatus
from leakloss.site_placement import locate_sites


#: Worst reward: given to every reading that cannot be scored (an RL loop must never profit from one).
WORST_REWARD = 0.0


@dataclass
class RewardResult:
    """One reading's reward and why (:func:`leak_reward_details`)."""

    reward: float  # in [0, 1], 1 = no leak; WORST_REWARD for a reading that cannot be scored
    status: RewardStatus  # leakloss.schema says what each means
    phone_error_rate: float | None = None  # recognizer's greedy phones vs the text's Nepali phones
    sites: int = 0  # sites scored
    reason: str = ""

    def __post_init__(self) -> None:  # a reward an RL loop trains on is never NaN nor out of range
        if self.status not in REWARD_STATUSES:
            raise ValueError(f"reward status {self.status!r} is not one of {', '.join(REWARD_STATUSES)}")
        if not (math.isfinite(self.reward) and 0.0 <= self.reward <= 1.0):
            raise ValueError(f"reward {self.reward!r} is not a number in [0, 1]")
        if self.status not in JUDGED_REWARD_STATUSES and self.reward != WORST_REWARD:
            raise ValueError(f"a {self.status!r} reading gets the worst reward {WORST_REWARD}, not {self.reward}")


def _readings(waveforms: Sequence[Tensor] | Tensor, wave_lengths) -> Sequence[Tensor]:
    """The readings of a list of ``[t]`` waves, or of a ``[b, t]`` batch cut to ``wave_lengths [b]``."""
    if isinstance(waveforms, Tensor) and waveforms.dim() == 2:
        if not waveforms.is_floating_point():  # as a list's waves: int16 PCM read as 32768x louder floats
            raise PenaltyInputError(f"waveforms must be real float samples, got dtype {waveforms.dtype} "
                                    "(int16 PCM: divide by 32768)")
        if wave_lengths is not None:
            lengths = check_lengths(wave_lengths, waveforms.shape[0], waveforms.shape[1], "wave_lengths",
                                     waveforms.device)
            return [w[: int(n)] for w, n in zip(waveforms, lengths)]
        if waveforms.shape[0] > 1:  # its zero padding would be scored as part of each shorter reading
            raise PenaltyInputError(f"a padded batch {tuple(waveforms.shape)} needs wave_lengths [b] (or pass a "
                                    "list of [samples] waves): padding would be scored as trailing silence")
    elif isinstance(waveforms, Tensor):  # one bare [t] wave read as t one-sample readings
        raise PenaltyInputError(f"waveforms must be a list of [samples] waves or a [b, samples] batch, got a tensor "
                                f"of shape {tuple(waveforms.shape)} (one reading: [wave] or wave[None])")
    elif wave_lengths is not None:
        raise PenaltyInputError("wave_lengths goes with a padded [b, samples] batch; a list of waves has its own lengths")
    elif isinstance(waveforms, (str, bytes)) or not isinstance(waveforms, Sequence):
        raise PenaltyInputError(f"waveforms must be a list of [samples] waves or a [b, samples] batch, "
                                f"got {type(waveforms).__name__}")
    else:
        for i, wave in enumerate(waveforms):
            check_wave(wave, f"waveforms[{i}]")
    return waveforms


def _texts(texts: object, n: int) -> list[str]:
    """One string per reading, else PenaltyInputError (a bare string would be read as one text per letter)."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise PenaltyInputError(f"texts must be a list of strings, one per reading, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise PenaltyInputError(f"texts[{i}] must be a string, got {type(text).__name__}")
    if len(texts) != n:
        raise PenaltyInputError(f"leak_reward needs one text per reading: {n} readings, {len(texts)} texts")
    return list(texts)


def check_sample_rate(sample_rate: object) -> int:
    """A reading's sample rate as given, or ``ValueError``: a whole number of Hz, at least speech's."""
    import numbers

    from leakloss.audio import MIN_SAMPLE_RATE

    if isinstance(sample_rate, bool) or not isinstance(sample_rate, numbers.Integral) or sample_rate < MIN_SAMPLE_RATE:
        raise ValueError(f"sample_rate must be a whole number of Hz >= {MIN_SAMPLE_RATE} (speech), got {sample_rate!r}")
    return int(sample_rate)


def check_max_per(max_per: object) -> float:
    """The word check's phone-error limit as a float, or ``ValueError``: NaN would pass every reading."""
    from leakloss.checks import check_number

    return check_number(max_per, "max_per must be a finite number > 0 (a phone error rate limit)",
                        low=0.0, low_inclusive=False)


def word_check_limit(recognizer) -> float:
    """The word check's phone-error limit on ``recognizer``: its card's calibrated query limit
    (``word_check.query_max_per``, as the scorer uses), else the scorer's ``QUERY_MAX_PER``."""
    from leakloss.scorer import QUERY_MAX_PER

    limits = getattr(recognizer, "word_check_limits", None)
    return float(limits[0]) if limits else QUERY_MAX_PER


@torch.no_grad()
def leak_reward_details(waveforms: Sequence[Tensor] | Tensor, texts: Sequence[str], penalty: LeakPenalty | None = None,
                        recognizer=None, max_per: float | None = None, finder=None,
                        wave_lengths: Sequence[int] | Tensor | None = None, *,
                        sample_rate: int = SAMPLE_RATE) -> list[RewardResult]:
    """The reward of each ``(wave [t], text)`` pair at ``sample_rate``, with its status; see :func:`leak_reward`."""
    from leakloss.audio import resample
    from leakloss.text.sites import SiteFinder

    sample_rate = check_sample_rate(sample_rate)
    waveforms = _readings(waveforms, wave_lengths)
    if sample_rate != SAMPLE_RATE:  # F5's 24 kHz was heard as slowed-down 16 kHz speech, and scored
        waveforms = [resample(w.float(), sample_rate, SAMPLE_RATE) if w.numel() else w for w in waveforms]
    texts = _texts(texts, len(waveforms))
    penalty = penalty or LeakPenalty.load()
    recognizer = recognizer or penalty.recognizer
    finder = finder or SiteFinder()
    max_per = word_check_limit(recognizer) if max_per is None else check_max_per(max_per)
    out = []
    for wave, text in zip(waveforms, texts, strict=True):
        out.append(_reward_one(wave, text, penalty, recognizer, finder, max_per))
    return out


def _reward_one(wave: Tensor, text: str, penalty: LeakPenalty, recognizer, finder, max_per: float) -> RewardResult:
    from leakloss.scorer import phone_error_rate

    from leakloss.text.normalize import TextError
    from leakloss.text.sites import no_word_reason, unread_words

    try:
        all_words = finder(text)
    except TextError as err:  # e.g. a word too long for the frontend: this reading, not the whole batch
        return RewardResult(WORST_REWARD, "bad_text", reason=f"text: {err}")
    words = [w for w in all_words if w.skipped is None]
    expected = [p for w in words for p in w.nepali]
    if not expected:
        return RewardResult(WORST_REWARD, "no_word", reason=no_word_reason(all_words))
    if not bool(torch.isfinite(wave).all()):  # its type and shape: checked for every reading by _readings
        return RewardResult(WORST_REWARD, "not_finite", reason="NaN/Inf samples")
    if int(recognizer.frame_lengths(torch.tensor([wave.shape[0]]))[0]) < 1:
        return RewardResult(WORST_REWARD, "too_short", reason=f"{wave.shape[0]} samples: under one recognizer frame")
    if float(wave.abs().max()) < SILENCE_PEAK:  # before the one hearing level, which would make it loud noise
        return RewardResult(WORST_REWARD, "silent", reason=f"peak below {SILENCE_PEAK:g}: nothing to hear")
    # one level for the word check and the placement: their CTC passes are not gain-invariant, so a policy could
    # otherwise buy reward with loudness (the site head itself is scale-free)
    wave = at_hearing_level(wave)
    hyp = recognizer.greedy(wave[None])[0]  # the scorer's word check: greedy phones vs the expected phones
    per = phone_error_rate(expected, hyp)
    if per > max_per:
        unread = unread_words(all_words)  # said aloud, absent from the expected phones: the reason names them
        why = (f"; words not read, left out of the expected phones: {', '.join(repr(w.word) for w in unread[:5])}"
               f"{', ...' if len(unread) > 5 else ''}" if unread else "")
        return RewardResult(WORST_REWARD, "unintelligible", per,
                            reason=f"phone error rate {per:.2f} > {max_per:.2f}{why}")
    placed = locate_sites(wave, text, recognizer, words=words)
    if placed.status == "no_testable_site":
        return RewardResult(1.0, "no_testable_site", per, reason="intelligible; the text has no testable site")
    if placed.status != "placed":
        why = getattr(placed.alignment, "reason", None)  # the aligner's own words when it ran
        return RewardResult(WORST_REWARD, placed.status, per,
                            reason=f"the text's phones do not align to the audio{f': {why}' if why else ''}")
    _, parts = penalty(waves=wave[None], sites=[placed.sites])
    probs = parts.site_probs[parts.site_active]  # an inactive site's p ~ 0 must not count as "no leak"
    if probs.numel() == 0:
        return RewardResult(WORST_REWARD, "alignment_failed", per, reason="no site inside the audio")
    return RewardResult(float(1.0 - probs.mean()), "scored", per, int(probs.numel()))


def leak_reward(waveforms: Sequence[Tensor] | Tensor, texts: Sequence[str], penalty: LeakPenalty | None = None,
                recognizer=None, max_per: float | None = None,
                wave_lengths: Sequence[int] | Tensor | None = None, *, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """``[b]`` reward in [0, 1] for GRPO/best-of-N: ``1 - mean leak probability`` over the testable sites of
    each ``(wave [t], text)`` pair, the waves at ``sample_rate`` (16 kHz by default; F5's 24 kHz waves: pass
    ``sample_rate=24000``, they are resampled). Not differentiable. One text per reading (else
    :class:`~leakloss.penalty.PenaltyInputError`, a ``ValueError``).
    ``waveforms``: a list of ``[t]`` waves, or a padded ``[b, t]`` batch with ``wave_lengths [b]`` (required
    when ``b > 1``: the padding is not part of a reading).

    The rule, so that an RL loop cannot profit from a reading it cannot be judged on:

    - a reading that fails the word check (the recognizer's greedy phone error rate against the text's
      Nepali phones above ``max_per``; by default the recognizer's calibrated limit, as the scorer's
      (:func:`word_check_limit`: ``word_check.query_max_per`` of its card, else the scorer's ``QUERY_MAX_PER``)):
      noise, another text, mumbling -> ``unintelligible``, ``WORST_REWARD`` (0.0). Numbers, Latin and misspelt
      words are spoken but not read (no expected phones), so they count against the check: the reason names them;
    - audio that cannot be read (NaN/Inf, shorter than one recognizer frame, silent), a text whose phones do
      not align, a text with no Devanagari word or one the frontend cannot read (``bad_text``) -> ``WORST_REWARD``;
    - an intelligible reading of a text with no testable site -> 1.0 (nothing to leak);
    - otherwise ``1 - mean p`` over the sites.

    :func:`leak_reward_details` gives each reading's status, phone error rate and reason.
    """
    results = leak_reward_details(waveforms, texts, penalty, recognizer, max_per, wave_lengths=wave_lengths,
                                  sample_rate=sample_rate)
    device = waveforms.device if isinstance(waveforms, Tensor) else (waveforms[0].device if len(waveforms) else None)
    return torch.tensor([r.reward for r in results], dtype=torch.float32, device=device)


leak_reward.higher_is_better = True  # type: ignore[attr-defined]
