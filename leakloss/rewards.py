"""The leak reward behind the reward-provider interface of F5-TTS's GRPO work, and best-of-N reranking.

F5-TTS's upstream reward interface (``f5_tts/rewards/types.py`` in SWivid/F5-TTS) passes a list of
``RewardInput(audio, text, speaker_ref, sample_rate, meta, lang)`` to ``RewardProvider.compute`` and gets
one ``RewardOutput(total_reward, components, logs)`` per input; its registry builds a provider with no
arguments and then calls ``setup(cfg)``. The classes here have the same fields and methods, so that:

- this module imports without F5-TTS installed (the F5-TTS release on PyPI has no ``rewards`` package yet);
- :class:`LeakRewardProvider` reads only those attributes, so F5's own ``RewardInput`` objects work too,
  and F5's ``RewardCombiner`` takes its outputs (it reads ``total_reward``, ``components`` and ``logs``);
- F5's registry can load it by path: ``{"name": "leakloss.rewards:LeakRewardProvider", "config": {...}}``.

The reward is :func:`leakloss.reward.leak_reward`: in [0, 1], 1 = no leak, 0.0 for every reading that
cannot be judged (silence, noise, another text, NaN audio: see its docstring). :func:`rerank` keeps the
best of N candidate readings of each text, with the reasons.

Shapes: t samples; audio ``[t]`` or ``[channels, t]`` at ``sample_rate``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from leakloss.constants import MEL_SAMPLE_RATE, SAMPLE_RATE
from leakloss.functional.leak import peak_limited
from leakloss.penalty import LeakPenalty
from leakloss.reward import WORST_REWARD, RewardResult, check_max_per, check_sample_rate, leak_reward_details
from leakloss.schema import JUDGED_REWARD_STATUSES



@dataclass
class RewardInput:
    """One generated reading (field names and defaults as in F5-TTS's ``RewardInput``)."""

    audio: Tensor  # [t] or [channels, t]
    text: str | None = None
    speaker_ref: Tensor | None = None  # unused by the leak reward
    sample_rate: int = MEL_SAMPLE_RATE  # F5's default: its vocoder's rate
    meta: dict[str, Any] = field(default_factory=dict)
    lang: str | None = None


@dataclass
class RewardOutput:
    """``total_reward``: a 0-dim fp32 tensor; ``components``: 0-dim tensors; ``logs``: anything printable."""

    total_reward: Tensor
    components: dict[str, Tensor] = field(default_factory=dict)
    logs: dict[str, Any] = field(default_factory=dict)


class RewardProvider:
    """The provider contract: no-argument construction, ``setup(cfg)``, ``compute(batch)``."""

    name = "base"
    required_extras: list[str] = []

    def setup(self, cfg: dict[str, Any] | None = None) -> None:
        return None

    def supports_language(self, lang: str | None) -> bool:
        return True

    def compute(self, batch: list[RewardInput]) -> list[RewardOutput]:
        raise NotImplementedError


def _audio_tensor(audio: object) -> Tensor:
    """``audio`` as a float tensor ``[t]`` or ``[channels, t]`` (a numpy array is converted), else ValueError.
    Empty and NaN/Inf audio pass: the reward says why it cannot be judged (``too_short``, ``not_finite``)."""
    if isinstance(audio, np.ndarray):
        try:  # strings, objects, longdouble: torch.from_numpy's TypeError
            if audio.dtype.kind not in "biufc":
                raise TypeError(audio.dtype)
            audio = torch.from_numpy(np.ascontiguousarray(audio, dtype=audio.dtype.newbyteorder("=")))
        except TypeError:
            raise ValueError(f"reward audio must be an array of numbers torch reads, got dtype {audio.dtype}") from None
    if not isinstance(audio, Tensor):
        raise ValueError(f"reward audio must be a tensor or numpy array of samples, got {type(audio).__name__}")
    if not audio.is_floating_point():
        raise ValueError(f"reward audio must be real float samples, got dtype {audio.dtype} (int16 PCM: / 32768)")
    if audio.dim() == 2:
        if audio.shape[0] == 0:
            raise ValueError(f"reward audio of shape {tuple(audio.shape)} has no channel")
        if 0 < audio.shape[1] < audio.shape[0]:  # more channels than samples: a [samples, channels] array
            raise ValueError(f"reward audio of shape {tuple(audio.shape)} looks like [samples, channels]; "
                             "pass [channels, samples] (e.g. audio.T)")
    elif audio.dim() != 1:
        raise ValueError(f"reward audio must be [samples] or [channels, samples], got shape {tuple(audio.shape)}")
    return audio


def to_16k_mono(audio: Tensor, sample_rate: int) -> Tensor:
    """``[t]`` or ``[channels, t]`` at ``sample_rate`` -> ``[t]`` fp32 at 16 kHz (channels averaged).

    Raises:
        ValueError: not a float tensor or array of one of those shapes, or a sample rate below speech's.
    """
    from leakloss.audio import resample

    audio = _audio_tensor(audio)
    check_sample_rate(sample_rate)
    # averaged in fp64 and brought within full scale there: loud (finite) fp32/fp64 channels must not
    # overflow into "NaN/Inf samples" on the way to fp32
    audio = peak_limited(audio.detach().double())
    audio = (audio.mean(0) if audio.dim() == 2 else audio).float()
    if sample_rate != SAMPLE_RATE and audio.numel():
        audio = resample(audio, sample_rate, SAMPLE_RATE)  # bounded memory for any rate (8001 Hz too)
    return audio


class LeakRewardProvider(RewardProvider):
    """:func:`leakloss.reward.leak_reward` as a reward provider.

    ``total_reward``: the leak reward in [0, 1] (0.0 for unintelligible or unreadable audio and missing
    text). ``components``: ``leak_free`` (the same number), ``judged`` (1.0 when the reading was judged:
    ``scored`` or ``no_testable_site``), ``sites`` (sites scored) and ``phone_error_rate`` when the word
    check ran. ``logs``: ``status`` and ``reason``.

    ``setup`` keys: ``recognizer`` (default: the head's), ``head_path``, ``device`` ("cpu"), ``max_per``
    (word-check limit; default the recognizer's calibrated one, :func:`leakloss.reward.word_check_limit`). The penalty loads on first use.
    """

    name = "leakloss_leak"
    required_extras: list[str] = []

    def __init__(self, penalty: LeakPenalty | None = None, max_per: float | None = None) -> None:
        if max_per is not None:  # NaN was kept and refused only when the first reading was scored
            check_max_per(max_per)
        self.penalty, self.max_per = penalty, max_per
        self._given_penalty, self._given_max_per = penalty, max_per  # what each setup starts from
        self.cfg: dict[str, Any] = {}

    def setup(self, cfg: dict[str, Any] | None = None) -> None:
        """Each call starts afresh from the constructor's arguments: a penalty this provider loaded is loaded again
        with the new settings, a ``max_per`` not given returns to the constructor's."""
        self.cfg = dict(cfg or {})
        unknown = set(self.cfg) - {"recognizer", "head_path", "device", "max_per"}
        if unknown:
            raise ValueError(f"unknown {self.name} setting(s): {', '.join(sorted(unknown))}")
        loading = sorted({"recognizer", "head_path", "device"} & set(self.cfg))
        if self._given_penalty is not None and loading:  # they would be ignored without a word
            raise ValueError(f"setup {', '.join(loading)}: this provider was given its penalty; pass them to "
                             "LeakPenalty.load instead")
        self.penalty, self.max_per = self._given_penalty, self._given_max_per
        if self.cfg.get("max_per") is not None:  # null (YAML) is the default: the recognizer's calibrated limit
            value = self.cfg["max_per"]
            try:  # a YAML/CLI string is read as a number; True is not a limit
                self.max_per = check_max_per(float(value) if isinstance(value, str) else value)
            except (TypeError, ValueError) as err:
                raise ValueError(f"setup max_per: {err}") from None

    def supports_language(self, lang: str | None) -> bool:
        """Nepali only (``ne``, ``npi``, ``nep``, ``ne-NP``...), or unspecified (None or ``""``); anything but a
        string or None is not a language (False)."""
        if not (lang is None or isinstance(lang, str)):
            return False
        if lang is None or not lang.strip():  # "" is no language given, as None
            return True
        return lang.strip().lower().split("-")[0].split("_")[0] in ("ne", "npi", "nep", "nepali")

    def _penalty(self) -> LeakPenalty:
        if self.penalty is None:
            self.penalty = LeakPenalty.load(recognizer=self.cfg.get("recognizer"), head_path=self.cfg.get("head_path"),
                                            device=self.cfg.get("device", "cpu"))
        return self.penalty

    def score(self, batch: Sequence[RewardInput]) -> list[RewardResult]:
        """Each input's :class:`leakloss.reward.RewardResult` (status, phone error rate, reason).

        Raises:
            ValueError: before any scoring, an input whose audio or sample rate is not usable, or whose text is
                neither a string nor None, whatever its text (naming the input).
        """
        results: list[RewardResult | None] = [None] * len(batch)
        todo = []
        for i, item in enumerate(batch):  # a caller's bug is an error for every input, not hidden by a missing text
            try:
                _audio_tensor(item.audio)
                check_sample_rate(item.sample_rate)
            except ValueError as err:
                raise ValueError(f"input {i}: {err}") from None
            if item.text is not None and not isinstance(item.text, str):
                raise ValueError(f"input {i}: text must be a string or None, got {type(item.text).__name__}")
        for i, item in enumerate(batch):
            if not self.supports_language(item.lang):  # F5's combiner never asks supports_language
                results[i] = RewardResult(WORST_REWARD, "unsupported_language",
                                          reason=f"lang {item.lang!r}: the leak reward judges Nepali readings only")
            elif not item.text:
                results[i] = RewardResult(WORST_REWARD, "no_word", reason="no text given")
            else:
                todo.append(i)
        if todo:
            penalty = self._penalty()
            device = penalty.recognizer.device
            waves = [to_16k_mono(batch[i].audio, batch[i].sample_rate).to(device) for i in todo]
            for i, r in zip(todo, leak_reward_details(waves, [batch[i].text for i in todo], penalty,
                                                      max_per=self.max_per), strict=True):
                results[i] = r
        return results  # type: ignore[return-value]

    def compute(self, batch: list[RewardInput]) -> list[RewardOutput]:
        return [_output(r) for r in self.score(batch)]


def _output(r: RewardResult) -> RewardOutput:
    reward = torch.tensor(r.reward, dtype=torch.float32)
    components = {"leak_free": reward, "judged": torch.tensor(float(r.status in JUDGED_REWARD_STATUSES)),
                  "sites": torch.tensor(float(r.sites))}
    if r.phone_error_rate is not None:
        components["phone_error_rate"] = torch.tensor(r.phone_error_rate, dtype=torch.float32)
    return RewardOutput(reward, components, {"status": r.status, "reason": r.reason})


@dataclass
class RerankChoice:
    """The best candidate reading of one text, and why."""

    text: str
    best: int | None  # index into the text's candidates; None when no candidate could be judged
    reward: float  # the best candidate's reward (WORST_REWARD when best is None)
    # every candidate's reward, status and reason, in the given order; None for one in not_scored
    candidates: list[RewardResult | None]
    reason: str
    # candidates that were never scored (e.g. an unreadable file), by index, and why; never the best
    not_scored: dict[int, str] = field(default_factory=dict)


def choose(text: str, results: Sequence[RewardResult | None], not_scored: Mapping[int, str] | None = None
           ) -> RerankChoice:
    """The best judged candidate of one text, from each candidate's reward (``results``, in order).

    ``not_scored``: the candidates that could not be scored, by index, and why (their ``results`` entry is
    ``None``): said in the reason, never kept. Only a judged candidate (status ``scored`` or
    ``no_testable_site``) can be kept; the highest reward wins, the first on a tie. Used by :func:`rerank`,
    and by ``leakloss rerank`` for candidate files that cannot be read.

    Raises:
        ValueError: a ``None`` result without its reason in ``not_scored``, or a reason for a scored candidate.
    """
    results, not_scored = list(results), dict(not_scored or {})
    strays = [i for i, r in enumerate(results) if r is not None and not isinstance(r, RewardResult)]
    if strays:
        raise ValueError(f"candidate(s) {strays} of {text!r:.40}: each result must be a RewardResult or None, got "
                         f"{type(results[strays[0]]).__name__}")
    unexplained = [i for i, r in enumerate(results) if (r is None) != (i in not_scored)]
    if unexplained or not set(not_scored) <= set(range(len(results))):
        raise ValueError(f"candidate(s) {unexplained or sorted(set(not_scored) - set(range(len(results))))} of "
                         f"{text!r:.40}: a candidate is either scored (a RewardResult) or not_scored with its reason")

    def said(i: int, r: RewardResult | None) -> str:
        return f"{i}: not scored ({not_scored[i]})" if r is None else f"{i}: {r.status} {r.reward:.3f}"

    if not results:
        return RerankChoice(text, None, WORST_REWARD, [], "no candidate given")
    if len(not_scored) == len(results):
        why = "; ".join(f"{i}: {not_scored[i]}" for i in range(len(results)))
        return RerankChoice(text, None, WORST_REWARD, results, f"no candidate could be scored ({why})", not_scored)
    judged = [i for i, r in enumerate(results) if r is not None and r.status in JUDGED_REWARD_STATUSES]
    if not judged:
        why = ", ".join(said(i, r) if r is None else f"{i}: {r.status}" for i, r in enumerate(results))
        return RerankChoice(text, None, WORST_REWARD, results, f"no candidate could be judged ({why})", not_scored)
    best = max(judged, key=lambda i: (results[i].reward, -i))  # type: ignore[union-attr]
    r = results[best]
    assert r is not None
    per = f", phone error rate {r.phone_error_rate:.2f}" if r.phone_error_rate is not None else ""
    others = [said(i, x) for i, x in enumerate(results) if i != best]
    reason = (f"candidate {best} of {len(results)}: reward {r.reward:.3f} ({r.status}, {r.sites} sites{per})"
              + (f"; others {', '.join(others)}" if others else ""))
    return RerankChoice(text, best, r.reward, results, reason, not_scored)


def rerank(candidates_by_text: Mapping[str, Sequence[Tensor]] | Sequence[tuple[str, Sequence[Tensor]]],
           penalty: LeakPenalty | None = None, *, sample_rate: int = SAMPLE_RATE,
           max_per: float | None = None) -> list[RerankChoice]:
    """Best-of-N: score the N candidate readings of each text with the leak reward and keep the best.

    ``candidates_by_text``: ``{text: [wave [t] or [channels, t], ...]}`` (or ``(text, waves)`` pairs, which
    may repeat a text) at ``sample_rate``. Only a judged candidate (status ``scored`` or
    ``no_testable_site``: it passed the word check) can be kept; the highest reward wins, the first on a
    tie (:func:`choose`). A text none of whose candidates could be judged gets ``best=None``: best-of-N
    distillation must not train on an unintelligible reading. An empty or NaN/Inf wave is a candidate with
    its status (``too_short``, ``not_finite``), never kept. Returns one :class:`RerankChoice` per text, in
    the given order.

    Raises:
        ValueError: before any scoring, a candidate that is not a float wave of those shapes (naming its
            text and index), a text's candidates that are not a list of waves, an entry that is not a
            ``(text, waves)`` pair or a text that is not a string, or a bad ``sample_rate``.
    """
    pairs = list(candidates_by_text.items()) if isinstance(candidates_by_text, Mapping) else list(candidates_by_text)
    check_sample_rate(sample_rate)
    if max_per is not None:  # before the penalty loads (NaN passed unseen when no text reached the word check)
        check_max_per(max_per)
    for k, pair in enumerate(pairs):  # every wave checked before any is scored: no work thrown away
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"entry {k} must be a (text, [wave, ...]) pair, got {type(pair).__name__} "
                             f"{pair!r:.40}")
        text, waves = pair
        if not isinstance(text, str):
            raise ValueError(f"text {k} must be a string, got {type(text).__name__}")
        if isinstance(waves, (Tensor, np.ndarray, str, bytes)) or not isinstance(waves, Sequence):
            raise ValueError(f"text {k} ({text!r:.40}): its candidates must be a list of waves, got "
                             f"{type(waves).__name__} (one wave: [wave])")
        for j, wave in enumerate(waves):
            try:
                _audio_tensor(wave)
            except ValueError as err:
                raise ValueError(f"text {k} ({text!r:.40}), candidate {j}: {err}") from None
    provider = LeakRewardProvider(penalty, max_per)
    out = []
    for text, waves in pairs:
        results = provider.score([RewardInput(w, text, sample_rate=sample_rate) for w in waves]) if len(waves) else []
        out.append(choose(text, results))
    return out
