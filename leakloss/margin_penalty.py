"""The text-paired path-margin term: how much better a frozen phone recognizer's CTC posteriors fit each testable
word's Hindi-ward phone path than its Nepali path, inside the word's frames.

Contract (unlike :class:`leakloss.penalty.LeakPenalty`, which reads audio and site spans only): the caller gives the
**text** of each item (a TTS training batch always has it; no ground-truth audio is needed, unlike
:class:`leakloss.paired_penalty.PairedPosteriorPenalty`). Each item is planned on its own audio without gradient
(:meth:`PathMarginPenalty.plan`: the text's testable sites, the words aligned by the recognizer, the scorer's three
crops of each site's word), then scored with gradient: for each site and crop the scorer's margin
``fit_hindi - fit_nepali`` (:func:`leakloss.acoustic.features.evidence_from_log_probs`), and the loss is the mean over
sites and crops of ``tau * softplus(margin / tau)`` (:func:`leakloss.functional.margin.site_margin_loss`); a crop
where a path cannot be aligned is left out (its fit is a floor), and a site where no crop aligns both paths is not
scored (counted in ``infeasible_sites``). A plan
may be made once and reused while the audio changes (``plans=``), as sites are.

Why it exists: descending the frame head (``LeakPenalty``) moves an independent judge little, because small spectral
edits satisfy it; descending this term, judged by the scorer on another encoder (recognizer w), halved the flags on
20 fresh sentences (docs/penalty.md, "A text-paired path-margin term"). It runs the recognizer's whole encoder and
phone head (wb: all 6 layers and the BiLSTM), so it costs more than the frame head (4 layers).

Bad input never poisons the batch: an item with NaN/Inf samples is left out (status ``not_finite``, gradient exactly
0); an item that cannot be planned or scored (``leakloss.schema.MarginStatus``: too short, silent, alignment failed,
no testable site, a text the frontend rejects, a plan made on other audio) is not scored, with its status; audio
louder than full scale is brought to it (detached), as site placement does; a quiet item's gradient is bounded as
:class:`~leakloss.penalty.LeakPenalty` bounds it (the recognizer normalises loudness, so the true gradient grows as
1 / rms);
with no scored site the loss is 0 with a zero gradient of the right shape.

**Mels through the mel bridge** (``mel_bridge=``, a :class:`leakloss.mel_bridge.MelBridge`; Whisper recognizers run
on their own length only): ``forward(mels=..., mel_lengths=..., plans=...)`` and ``plan(mel=..., text=...)`` hear a
TTS's Vocos log mels straight through the bridge into the encoder, without the vocoder (which is about half the
term's cost: docs/penalty.md). The same rules hold, with the mel's own: an item whose valid frames are all at or
below the vocoder's floor is ``silent``, 0 frames ``too_short``; the bridge levels each item, so no quiet rule
(``quiet_items`` 0); items are scored up to 30 s (:class:`~leakloss.penalty.PenaltyInputError` past it).

Shapes: b batch, t samples (16 kHz), n mel frames (Vocos, 24 kHz / 256), n sites (all items, flattened), c crops (3).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from leakloss.acoustic.features import SILENCE_PEAK, EvidenceExtractor, SiteSpec, evidence_from_log_probs
from leakloss.constants import MEL_FLOOR, SAMPLE_RATE
from leakloss.frozen import FrozenScorer
from leakloss.functional.leak import (at_hearing_level, at_least_fp32, mask_nonfinite_items, quiet_gradient_scale,
                                     scale_gradient)
from leakloss.functional.margin import MARGIN_TAU, site_margin_loss
from leakloss.penalty import QUIET_RMS, PenaltyInputError, check_lengths, check_wave
from leakloss.schema import KINDS, MarginStatus

#: The recognizer the term hears with unless told otherwise: wb, the signal's (multilingual Whisper base + CTC head).
DEFAULT_MARGIN_RECOGNIZER = "wb"


class MarginPlan(NamedTuple):
    """What :meth:`PathMarginPenalty.plan` found on one item: the site specs to score, or why there are none; made on
    audio of ``frames`` recognizer frames by ``recognizer`` (a plan is only used on audio that matches both)."""

    specs: tuple[SiteSpec, ...]
    status: MarginStatus
    reason: str | None = None
    frames: int = 0
    recognizer: str = ""


class MarginParts(NamedTuple):
    """Detached parts of the term, for logging."""

    penalty: Tensor  # scalar: mean hinge over the scored sites
    per_kind: dict  # "deletion"/"quality" -> scalar mean hinge of that kind's scored sites (kinds scored only)
    site_margins: Tensor  # [n] each scored site's margin, mean over its crops that align (flattened over items)
    site_kinds: tuple[str, ...]  # [n]
    active_sites: int  # sites scored (the loss is their mean)
    item_status: tuple[MarginStatus, ...]  # [b]
    nonfinite_items: int  # items left out for NaN/Inf among their valid samples (or in the audio their plan was made on)
    quiet_items: int  # items quieter than quiet_rms, whose gradient was scaled down
    # [n] each scored site's hinge, mean over its crops that align: what ``penalty`` and ``per_kind`` average (last, so that
    # parts built by position before 2026-12-07 still build)
    site_hinges: Tensor | None = None
    # sites of scored items left out: no crop of theirs aligns both paths (a crop shorter than the Nepali path), so
    # their margin is a floored constant the audio cannot lower; a crop of that kind in a scored site is left out too
    infeasible_sites: int = 0


def _listed(value: object, name: str) -> object:
    """An iterable of texts or plans as a list (a string, a tensor or None as given: the caller's checks name
    them); anything else that is not iterable is a :class:`PenaltyInputError`."""
    if value is None or isinstance(value, (str, bytes, Tensor)):
        return value
    try:
        return list(value)
    except TypeError:
        raise PenaltyInputError(f"{name} must be one per item (a list), got {type(value).__name__}") from None


class PathMarginPenalty(FrozenScorer):
    """``forward(waves, texts=None, wave_lengths=None, plans=None) -> (loss, MarginParts)``, or with a mel bridge
    ``forward(mels=..., mel_lengths=..., texts=... | plans=...)``; frozen, always in eval mode."""

    def __init__(self, recognizer: nn.Module, tau: float = MARGIN_TAU, finder=None, quiet_rms: float = QUIET_RMS,
                 mel_bridge: nn.Module | None = None) -> None:
        """``mel_bridge``: hear mels (``forward(mels=...)``, ``plan(mel=...)``) through it (``ValueError`` unless the
        recognizer is a Whisper encoder run on its own length)."""
        from leakloss.checks import check_number

        super().__init__()
        tau = check_number(tau, "tau must be a finite number > 0 (nats per frame)", low=0.0, low_inclusive=False)
        quiet_rms = check_number(quiet_rms, "quiet_rms must be a finite number > 0", low=0.0, low_inclusive=False)
        if mel_bridge is not None:
            from leakloss.mel_bridge import check_bridge_recognizer

            check_bridge_recognizer(mel_bridge, recognizer)
        self.recognizer, self.tau, self.quiet_rms, self.mel_bridge = recognizer, tau, quiet_rms, mel_bridge
        self._finder = finder
        self.freeze()

    @classmethod
    def load(cls, recognizer: str = DEFAULT_MARGIN_RECOGNIZER, *, device: str | torch.device = "cpu",
             tau: float = MARGIN_TAU, mel_bridge: nn.Module | bool | str | os.PathLike | None = None
             ) -> PathMarginPenalty:
        """The term on a recognizer by name (``wb``, ``w``, ``a``, ``b``) or folder. ``mel_bridge``: a
        :class:`~leakloss.mel_bridge.MelBridge`, True for the shipped one, or a bridge's path (``.json`` +
        ``.safetensors``)."""
        from leakloss.acoustic.recognizer import Recognizer

        if mel_bridge is True or isinstance(mel_bridge, (str, os.PathLike)):
            from leakloss.mel_bridge import MelBridge

            mel_bridge = MelBridge.embedded(None if mel_bridge is True else mel_bridge)
        return cls(Recognizer.load(recognizer, device=device), tau=tau, mel_bridge=mel_bridge or None).to(device)

    @property
    def finder(self):
        if self._finder is None:
            from leakloss.text.sites import SiteFinder

            self._finder = SiteFinder()
        return self._finder

    def _words(self, text: object) -> list | MarginPlan:
        """The text's words with sites, or the plan that says why there is nothing to score."""
        from leakloss.text.normalize import TextError

        try:
            words = [w for w in self.finder(text) if w.skipped is None]
        except TextError as err:
            return MarginPlan((), "bad_text", str(err))
        if not any(w.testable_sites for w in words):
            return MarginPlan((), "no_testable_site", "the text has no testable contrast site")
        return words

    def _unscorable(self, words: list | MarginPlan | None, audio: Tensor, mel: bool = False) -> MarginPlan | None:
        """Why an item (its valid samples ``audio [t]``, or with ``mel`` its valid mel frames ``[n, 100]``) cannot be
        scored before the recognizer hears it (the same checks in the same order for :meth:`plan` and
        :meth:`forward`, with or without a plan: ``words`` None), or None."""
        if isinstance(words, MarginPlan):
            return words
        if not bool(torch.isfinite(audio).all()):
            return MarginPlan((), "not_finite", "NaN or Inf samples" if not mel else "NaN or Inf mel values")
        if mel:
            if audio.shape[0] < 1:
                return MarginPlan((), "too_short", "no mel frame")
            # a plan made on other audio must not score silence: all at the floor is what the vocoder renders silent
            floor = float(torch.tensor(math.log(MEL_FLOOR), dtype=audio.dtype))  # the floor as the item holds it
            if float(audio.detach()[..., : self.mel_bridge.in_bins].max()) <= floor:  # the bins the bridge reads
                return MarginPlan((), "silent", f"the mel is silent (every value at or below log({MEL_FLOOR:g}))")
            return None
        if int(self.recognizer.frame_lengths(torch.tensor([audio.shape[-1]]))[0]) < 1:
            return MarginPlan((), "too_short", "shorter than one recognizer frame")
        if float(audio.detach().abs().max()) < SILENCE_PEAK:  # a plan made on other audio must not score silence
            return MarginPlan((), "silent", f"audio is silent (peak below {SILENCE_PEAK:g})")
        return None

    def _plan_on(self, seconds: float, words: list, recognized: tuple[Tensor, Tensor]) -> MarginPlan:
        """The plan from the recognizer's (detached) output on ``seconds`` of audio: the scorer's own alignment and
        crops (its site specs only: no per-site evidence is computed)."""
        located = EvidenceExtractor(self.recognizer).locate_recognized(
            (recognized[0].detach(), recognized[1]), seconds, [w.nepali for w in words], words)
        if not located.ok:
            return MarginPlan((), located.status, located.reason)
        return MarginPlan(tuple(located.specs), "ok", None, int(recognized[1][0]), str(self.recognizer.name))

    def _bridged(self, mel: Tensor) -> tuple[tuple[Tensor, Tensor], float]:
        """One item's valid mel frames ``[n, 100]`` (finite) -> the recognizer's ``(log_probs [1, f, v], frames
        [1])`` on its bridged log mel (gradient flows to ``mel``), and the seconds it stands for."""
        from leakloss.mel_bridge import bridged_samples

        lengths = torch.tensor([mel.shape[0]], device=mel.device)
        samples = int(bridged_samples(lengths, self.recognizer)[0])
        frames = self.recognizer.frame_count(torch.tensor([samples], device=mel.device))
        log_mel = self.mel_bridge.whisper_log_mel(mel[None], lengths, frames)
        return (self.recognizer.mel_log_probs(log_mel, frames), frames), samples / SAMPLE_RATE

    def _check_mels(self, mels: Tensor, mel_lengths: Tensor | None) -> Tensor:
        """``mels [b, n, 100]`` and their lengths checked -> ``mel_lengths [b]`` long (``PenaltyInputError``)."""
        from leakloss.constants import MEL_BINS
        from leakloss.mel_bridge import bridged_samples

        if self.mel_bridge is None:
            raise PenaltyInputError("mel input needs a mel bridge (PathMarginPenalty.load(mel_bridge=True)); or "
                                    "vocode the mels and give waves")
        if not isinstance(mels, Tensor) or mels.dim() != 3 or mels.shape[-1] != MEL_BINS \
                or not mels.is_floating_point():
            raise PenaltyInputError(f"mels must be float log magnitudes [batch, frames, {MEL_BINS}], got "
                                    f"{getattr(mels, 'dtype', type(mels).__name__)} "
                                    f"{tuple(getattr(mels, 'shape', ()))}")
        b, n = mels.shape[:2]
        lengths = check_lengths(mel_lengths, b, n, "mel_lengths", mels.device) if mel_lengths is not None \
            else torch.full((b,), n, dtype=torch.long, device=mels.device)
        bridged_samples(lengths, self.recognizer)  # past 30 s: PenaltyInputError, before any item is heard
        return lengths

    def plan(self, wave: Tensor | None = None, text: str | None = None, *, mel: Tensor | None = None) -> MarginPlan:
        """``wave [t]`` (16 kHz), or with a mel bridge ``mel [n, 100]`` (Vocos log mel), and its ``text`` -> the
        site specs (crop frames from the recognizer's alignment of the text's Nepali phones, without gradient),
        or the status that says why there are none."""
        self.freeze()
        if (wave is None) == (mel is None):
            raise PenaltyInputError("give the item's wave or (with a mel bridge) its mel, one of the two")
        if mel is not None:
            if not isinstance(mel, Tensor) or mel.dim() != 2:
                raise PenaltyInputError(f"mel must be one item's [frames, bins] tensor, got "
                                        f"{tuple(getattr(mel, 'shape', ())) or type(mel).__name__}")
            self._check_mels(mel[None], None)
        else:
            check_wave(wave, "wave")
        words = self._words(text)
        problem = self._unscorable(words, wave if mel is None else mel, mel=mel is not None)
        if problem is not None:
            return problem
        with torch.no_grad():
            if mel is not None:
                recognized, seconds = self._bridged(at_least_fp32(mel.detach()))
            else:  # one level: the alignment must not move with the gain
                audio = at_hearing_level(wave.detach()).float()
                recognized, seconds = self.recognizer(audio[None]), audio.shape[-1] / SAMPLE_RATE
        return self._plan_on(seconds, words, recognized)

    def forward(self, waves: Tensor | None = None, texts: Sequence[str] | None = None,
                wave_lengths: Tensor | None = None, plans: Sequence[MarginPlan] | None = None, *,
                mels: Tensor | None = None, mel_lengths: Tensor | None = None) -> tuple[Tensor, MarginParts]:
        """``waves [b, t]`` 16 kHz (gradient flows to them), or with a mel bridge ``mels [b, n, 100]`` (Vocos log
        mels; ``mel_lengths [b]`` valid frames), ``texts`` one per item (planned on the item itself, one
        recognizer pass) or ``plans`` one per item (from :meth:`plan`, e.g. made once on the ground truth or the
        unedited audio), ``wave_lengths [b]`` valid samples (default: all)."""
        self.freeze()
        if mels is not None or mel_lengths is not None:
            if waves is not None or wave_lengths is not None:
                raise PenaltyInputError("give waves (and wave_lengths) or mels (and mel_lengths), not both")
            if mels is None:
                raise PenaltyInputError("mel_lengths without mels")
            mel_lengths = self._check_mels(mels, mel_lengths)
            waves, wave_lengths = mels, mel_lengths  # one loop below; ``mel`` says how each item is heard
        mel = mels is not None
        if not isinstance(waves, Tensor) or waves.dim() != 2 + mel or not waves.is_floating_point():
            raise PenaltyInputError(f"waves must be a float tensor [batch, samples], got "
                                    f"{getattr(waves, 'dtype', type(waves).__name__)} "
                                    f"{tuple(getattr(waves, 'shape', ()))}")
        b, t = waves.shape[:2]
        texts, plans = _listed(texts, "texts"), _listed(plans, "plans")  # a generator had no len(): a TypeError
        if plans is None:
            if texts is None or isinstance(texts, str) or len(texts) != b:
                raise PenaltyInputError(f"give one text per item ({b}), or plans")
        elif texts is not None:  # the plans would win silently, even for another sentence
            raise PenaltyInputError("give texts or plans, not both (a plan holds its text's sites)")
        elif len(plans) != b or not all(isinstance(p, MarginPlan) for p in plans):
            raise PenaltyInputError(f"plans must be {b} MarginPlan (PathMarginPenalty.plan), got {plans!r:.200}")
        lengths = check_lengths(wave_lengths, b, t, "wave_lengths", waves.device) if wave_lengths is not None \
            else torch.full((b,), t, dtype=torch.long, device=waves.device)
        zero = torch.zeros((), dtype=waves.dtype, device=waves.device)
        clean, bad = mask_nonfinite_items(waves, lengths)  # selected before any arithmetic: a NaN item's gradient is 0
        if not mel:
            clean = torch.where(torch.arange(t, device=waves.device) < lengths[:, None], clean, zero)
        bad = bad.tolist()
        clean = at_least_fp32(clean)  # before the gradient scale: a quiet fp16 item's gradient overflowed fp16 (inf)
        if mel:  # the bridge levels each item: no quiet rule
            scale = torch.ones(b, dtype=clean.dtype, device=clean.device)
            heard = clean
        else:
            scale = quiet_gradient_scale(clean, lengths, self.quiet_rms)
            heard = scale_gradient(clean, scale)
        margins, feasible, kinds, status, infeasible, scored_items = [], [], [], [], 0, set()
        for i in range(b):
            n = int(lengths[i])
            words = self._words(texts[i]) if plans is None else None
            # the item as given (its dtype: a bf16 mel at the floor is silent in bf16, not after the fp32 cast)
            problem = self._unscorable(words, waves[i, :n], mel)
            if problem is None and plans is not None and plans[i].status != "ok":
                problem = plans[i]  # the recognizer is not run for an item its plan cannot score
            if problem is not None:
                status.append(problem.status)
                continue
            if mel:
                (log_probs, frames), seconds = self._bridged(heard[i, :n])
            else:
                audio = at_hearing_level(heard[i, :n])
                (log_probs, frames), seconds = self.recognizer(audio.float()[None]), n / SAMPLE_RATE
            plan = plans[i] if plans is not None else self._plan_on(seconds, words, (log_probs.detach(), frames))
            if plan.status != "ok":
                status.append(plan.status)
                continue
            if plan.frames != int(frames[0]) or plan.recognizer != str(self.recognizer.name):
                status.append("plan_mismatch")  # crops of other audio would score the wrong frames
                continue
            lp = log_probs[0, : int(frames[0])]
            evidence, _ = evidence_from_log_probs(lp, plan.specs, self.recognizer.blank, self.recognizer.frame_rate)
            for spec in plan.specs:
                site = evidence[spec.key]
                if not any(site.feasible):  # no crop where both paths align: its floored fits are no evidence
                    infeasible += 1
                    continue
                margins.append(site.margin)
                feasible.append(site.feasible)
                kinds.append(spec.kind)
                scored_items.add(i)
            status.append("ok")
        # a plan made on non-finite audio (e.g. a ground truth that could not be vocoded) counts as non-finite too
        nonfinite = sum(bad[i] or status[i] == "not_finite" for i in range(b))
        # only items with a scored site: a masked one reads as silence, and the others get no gradient
        quiet = sum(float(scale[i]) < 1 for i in scored_items)
        if not margins:  # nothing scored: zero, on the input's graph, with a zero gradient (no overflow: x * 0 first)
            empty = torch.zeros(0, dtype=waves.dtype, device=waves.device)
            parts = MarginParts(zero.detach(), {}, empty, (), 0, tuple(status), nonfinite, quiet, empty, infeasible)
            return (clean * 0.0).sum(), parts
        stacked = torch.stack(margins)  # [n, c]
        crops = torch.tensor(feasible, dtype=torch.bool, device=stacked.device)  # [n, c]
        active = torch.ones(stacked.shape[0], dtype=torch.bool, device=stacked.device)
        loss, per_site = site_margin_loss(stacked, active, self.tau, crops)
        per_kind = {k: per_site.detach()[[j for j, kind in enumerate(kinds) if kind == k]].mean()
                    for k in KINDS if k in kinds}
        kept = torch.where(crops, stacked.detach(), torch.zeros((), dtype=stacked.dtype, device=stacked.device))
        site_margins = kept.sum(-1) / crops.sum(-1)  # over the crops it is scored on
        parts = MarginParts(loss.detach(), per_kind, site_margins, tuple(kinds), len(kinds),
                            tuple(status), nonfinite, quiet, per_site.detach(), infeasible)
        return loss, parts
