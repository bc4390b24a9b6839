"""The text-paired path-margin term: how much better a frozen phone recognizer's CTC posteriors fit each testable
word's Hindi-ward phone path than its Nepali path, inside the word's frames.

Contract (unlike :class:`leakloss.penalty.LeakPenalty`, which reads audio and site spans only): the caller gives the
**text** of each item (a TTS training batch always has it; no ground-truth audio is needed, unlike
:class:`leakloss.paired_penalty.PairedPosteriorPenalty`). Each item is planned on its own audio without gradient
(:meth:`PathMarginPenalty.plan`: the text's testable sites, the words aligned by the recognizer, the scorer's three
crops of each site's word), then scored with gradient: for each site and crop the scorer's margin
``fit_hindi - fit_nepali`` (:func:`leakloss.acoustic.features.evidence_from_log_probs`), and the loss is the mean over
sites and crops of ``tau * softplus(margin / tau)`` (:func:`leakloss.functional.margin.site_margin_loss`). A plan
may be made once and reused while the audio changes (``plans=``), as sites are.

Why it exists: descending the frame head (``LeakPenalty``) moves an independent judge little, because small spectral
edits satisfy it; descending this term, judged by the scorer on another encoder (recognizer w), halved the flags on
20 fresh sentences (docs/penalty.md, "A text-paired path-margin term"). It runs the recognizer's whole encoder and
phone head (wb: all 6 layers and the BiLSTM), so it costs more than the frame head (4 layers).

Bad input never poisons the batch: an item with NaN/Inf samples is left out (status ``not_finite``, gradient exactly
0); an item whose plan fails (silent, too short, alignment failed, no testable site) is not scored, with the status;
audio louder than full scale is brought to it (detached), as site placement does;
with no scored site the loss is 0 with a zero gradient of the right shape.

Shapes: b batch, t samples (16 kHz), n sites (all items, flattened), c crops (3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from leakloss.acoustic.features import EvidenceExtractor, SiteSpec, evidence_from_log_probs
from leakloss.functional.leak import peak_limited
from leakloss.functional.margin import MARGIN_TAU, site_margin_loss
from leakloss.penalty import PenaltyInputError, check_lengths
from leakloss.schema import KINDS

#: The recognizer the term hears with unless told otherwise: wb, the signal's (multilingual Whisper base + CTC head).
DEFAULT_MARGIN_RECOGNIZER = "wb"


class MarginPlan(NamedTuple):
    """What :meth:`PathMarginPenalty.plan` found on one item: the site specs to score, or why there are none."""

    specs: tuple[SiteSpec, ...]
    status: str  # "ok" or the evidence status (leakloss.schema.EvidenceStatus): silent, alignment_failed, ...
    reason: str | None = None


class MarginParts(NamedTuple):
    """Detached parts of the term, for logging."""

    penalty: Tensor  # scalar: mean hinge over the scored sites
    per_kind: dict  # "deletion"/"quality" -> scalar mean hinge of that kind's scored sites
    site_margins: Tensor  # [n] each scored site's margin, mean over its crops (flattened over items)
    site_kinds: tuple[str, ...]  # [n]
    scored_sites: Tensor  # number of sites scored
    item_status: tuple[str, ...]  # [b] "ok", "not_finite", or the plan's status (too_short, silent, ...)


class PathMarginPenalty(nn.Module):
    """``forward(waves, texts, wave_lengths=None, plans=None) -> (loss, MarginParts)``; frozen, always in eval mode."""

    def __init__(self, recognizer: nn.Module, tau: float = MARGIN_TAU, finder=None) -> None:
        super().__init__()
        if not tau > 0:
            raise ValueError(f"tau must be > 0, got {tau!r}")
        self.recognizer, self.tau = recognizer, float(tau)
        self._finder = finder
        self.recognizer.requires_grad_(False)
        self.recognizer.eval()

    def train(self, mode: bool = True) -> PathMarginPenalty:  # frozen: always eval
        return super().train(False)

    @classmethod
    def load(cls, recognizer: str = DEFAULT_MARGIN_RECOGNIZER, *, device: str | torch.device = "cpu",
             tau: float = MARGIN_TAU) -> PathMarginPenalty:
        """The term on a recognizer by name (``wb``, ``w``, ``a``, ``b``) or folder."""
        from leakloss.acoustic.recognizer import Recognizer

        return cls(Recognizer.load(recognizer, device=device), tau=tau)

    @property
    def finder(self):
        if self._finder is None:
            from leakloss.text.sites import SiteFinder

            self._finder = SiteFinder()
        return self._finder

    def plan(self, wave: Tensor, text: str) -> MarginPlan:
        """``wave [t]`` (16 kHz), its ``text`` -> the site specs (crop frames from the recognizer's alignment of the
        text's Nepali phones, without gradient). A text the frontend rejects raises its
        :class:`leakloss.text.normalize.TextError`."""
        words = [w for w in self.finder(text) if w.skipped is None]
        if not any(w.testable_sites for w in words):
            return MarginPlan((), "no_testable_site", "the text has no testable contrast site")
        if int(self.recognizer.frame_lengths(torch.tensor([wave.shape[-1]]))[0]) < 1:
            return MarginPlan((), "too_short", "shorter than one recognizer frame")
        with torch.no_grad():
            evidence = EvidenceExtractor(self.recognizer).extract(peak_limited(wave.detach().float()),
                                                                  [w.nepali for w in words], words)
        if not evidence.ok:
            return MarginPlan((), evidence.status, evidence.reason)
        return MarginPlan(tuple(evidence.specs), "ok")

    def forward(self, waves: Tensor, texts: Sequence[str] | None = None, wave_lengths: Tensor | None = None,
                plans: Sequence[MarginPlan] | None = None) -> tuple[Tensor, MarginParts]:
        """``waves [b, t]`` 16 kHz (gradient flows to them), ``texts`` one per item (or ``plans``, one per item,
        from :meth:`plan`), ``wave_lengths [b]`` valid samples (default: all)."""
        if not isinstance(waves, Tensor) or waves.dim() != 2 or not waves.is_floating_point():
            raise PenaltyInputError(f"waves must be a float tensor [batch, samples], got "
                                    f"{getattr(waves, 'dtype', type(waves).__name__)} "
                                    f"{tuple(getattr(waves, 'shape', ()))}")
        b, t = waves.shape
        if plans is None:
            if texts is None or isinstance(texts, str) or len(texts) != b:
                raise PenaltyInputError(f"give one text per item ({b}), or plans")
        elif len(plans) != b or not all(isinstance(p, MarginPlan) for p in plans):
            raise PenaltyInputError(f"plans must be {b} MarginPlan (PathMarginPenalty.plan), got {plans!r:.200}")
        lengths = check_lengths(wave_lengths, b, t, "wave_lengths", waves.device) if wave_lengths is not None \
            else torch.full((b,), t, dtype=torch.long, device=waves.device)
        finite = torch.isfinite(waves) | (torch.arange(t, device=waves.device) >= lengths[:, None])
        finite_items = finite.all(-1).tolist()
        zero = torch.zeros((), dtype=waves.dtype, device=waves.device)
        clean = torch.where(finite, waves, zero)  # selected before any arithmetic: a NaN item's gradient is 0
        margins, kinds, status = [], [], []
        for i in range(b):
            n = int(lengths[i])
            if not finite_items[i]:
                status.append("not_finite")
                continue
            plan = plans[i] if plans is not None else self.plan(clean[i, :n], texts[i])
            if plan.status != "ok" or not plan.specs or n == 0:
                status.append(plan.status if plan.status != "ok" else "no_testable_site")
                continue
            log_probs, frames = self.recognizer(peak_limited(clean[i, :n].float())[None])
            lp = log_probs[0, : int(frames[0])]
            if any(max(last for _, last in spec.crops) > lp.shape[0] for spec in plan.specs):
                status.append("plan_mismatch")  # a plan made on other audio (longer than this item)
                continue
            evidence, _ = evidence_from_log_probs(lp, plan.specs, self.recognizer.blank, self.recognizer.frame_rate)
            for spec in plan.specs:
                margins.append(evidence[spec.key].margin)
                kinds.append(spec.kind)
            status.append("ok")
        if not margins:  # nothing scored: zero, on the input's graph, with a zero gradient
            empty = torch.zeros(0, dtype=waves.dtype, device=waves.device)
            return clean.sum() * 0.0, MarginParts(zero.detach(), {}, empty, (), torch.tensor(0), tuple(status))
        stacked = torch.stack(margins)  # [n, c]
        active = torch.ones(stacked.shape[0], dtype=torch.bool, device=stacked.device)
        loss, per_site = site_margin_loss(stacked, active, self.tau)
        per_kind = {k: per_site.detach()[[j for j, kind in enumerate(kinds) if kind == k]].mean()
                    for k in KINDS if k in kinds}
        parts = MarginParts(loss.detach(), per_kind, stacked.detach().mean(-1), tuple(kinds), torch.tensor(len(kinds)),
                            tuple(status))
        return loss, parts
