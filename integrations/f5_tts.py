"""F5-TTS / IndicF5 integration: a leak-aware CFM, checkpoint + vocab helpers, and a launcher for F5's own Trainer.

Needs the ``f5`` extra (``f5-tts==1.1.22`` and friends). Shapes follow F5: mels ``[b, n, d]`` (d = 100,
24 kHz, hop 256), text as ``list[str]`` (char vocab) or ``[b, nt]`` ids. Importing this module imports F5-TTS,
whose ``f5_tts.model`` package imports its own Trainer and so ``wandb``; the ``leakloss`` library itself never
does (``tests/test_import_cycles.py``).

How the leak penalty enters training (see :class:`LeakAwareCFM`): F5 trains by flow matching,
``x_t = (1 - t) x0 + t x1`` with target flow ``x1 - x0``; a prediction ``pred`` of the flow gives a one-step
estimate of the clean mel ``x1_hat = x_t + (1 - t) pred``. Inside the infilled span we score ``x1_hat``
with the leak penalty (outside it the ground truth is what the model is conditioned on). A second, separately
weighted term compares ``x1_hat`` with that ground truth (``inp``, the audio of the same utterance) through a
recognizer's posteriors at the sites (:class:`leakloss.paired_penalty.PairedPosteriorPenalty`). A third reads the
text: the scorer's CTC path margin (Hindi-ward path minus Nepali path) at each site of ``x1_hat``, planned once on
that ground truth (:class:`leakloss.margin_penalty.PathMarginPenalty`).
"""

from __future__ import annotations

import contextlib
import csv
from collections import OrderedDict
import json
import logging
import math
import os
import random
import unicodedata
from time import monotonic
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from f5_tts.model import CFM, DiT
from f5_tts.model.modules import MelSpec
from f5_tts.model.utils import lens_to_mask
from torch import nn
from torch.utils.data import Dataset

from leakloss.audio import resample
from leakloss.checks import first_line
from leakloss.constants import MEL_BINS, MEL_HOP, MEL_N_FFT, MEL_SAMPLE_RATE, SAMPLE_RATE
from leakloss.timing import TimedSite
from leakloss.vocoder import MelToWave, mel_lengths_to_samples, silence_past_lengths

if TYPE_CHECKING:
    from integrations.leak_curves import ProbeSet
    from leakloss.functional.crop import CropContext

log = logging.getLogger(__name__)

SiteLookup = Callable[[str], Sequence[TimedSite]]

#: F5's vocos-style mel settings (F5 configs: 24 kHz, n_fft 1024, hop 256, 100 mels).
MEL_SPEC_KWARGS: dict[str, Any] = dict(
    n_fft=MEL_N_FFT,
    hop_length=MEL_HOP,
    win_length=MEL_N_FFT,
    n_mel_channels=MEL_BINS,
    target_sample_rate=MEL_SAMPLE_RATE,
    mel_spec_type="vocos",
)


# ---------------------------------------------------------------------------------------------------------------
# leak-aware CFM


class _Shared:
    """Holds frozen helper modules outside ``nn.Module`` registration.

    Why: keeps them out of ``state_dict`` (checkpoints stay loadable by stock F5 inference), out of
    ``parameters()`` (the optimizer never sees them), and ``deepcopy`` returns the same holder so F5's
    EMA copy shares them instead of duplicating a recognizer in memory.
    """

    def __init__(self, leak_penalty: nn.Module | None, mel_to_wave: MelToWave | None,
                 paired_penalty: nn.Module | None = None, margin_penalty: nn.Module | None = None) -> None:
        self.leak_penalty = leak_penalty
        self.mel_to_wave = mel_to_wave
        self.paired_penalty = paired_penalty
        self.margin_penalty = margin_penalty
        # the margin term's plans, made once per utterance on its vocoded ground truth: (site key or text, mel frames)
        # -> plan, the least recently used dropped past MARGIN_PLAN_CACHE (a dropped one is planned again)
        self.margin_plans: OrderedDict[tuple[str, int], Any] = OrderedDict()

    def modules(self) -> list[nn.Module]:
        return [m for m in (self.leak_penalty, self.mel_to_wave, self.paired_penalty, self.margin_penalty)
                if m is not None]

    def __deepcopy__(self, memo: dict) -> "_Shared":
        return self


def _no_sites(_: str) -> list[TimedSite]:
    return []


def _text_key(item: str | Sequence[str]) -> str:
    """F5 passes each text as a str (char vocab) or a list of tokens (pinyin path): the lookup key is the str."""
    return item if isinstance(item, str) else "".join(item)


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _site_count(parts: NamedTuple, sites: Sequence[Sequence[TimedSite]] | None) -> int:
    """Sites the penalty averaged over: ``parts.active_sites`` when the penalty reports it, else all given."""
    active = getattr(parts, "active_sites", None)
    if active is not None:
        return int(active)
    return sum(len(s) for s in sites or [])


#: LeakAwareCFM's auxiliary terms, in the order they are added to the loss (each logged under its name + "/")
AUXILIARY_TERMS = ("leak", "paired", "margin")
#: utterances whose margin plans a LeakAwareCFM keeps (a few KB each: ~80 MB per process at this size)
MARGIN_PLAN_CACHE = 20_000


def sites_in_span(sites: Sequence[TimedSite], span: torch.Tensor, frame_rate: float) -> list[TimedSite]:
    """Sites whose midpoint frame lies inside ``span`` (``[n]`` bool over mel frames)."""
    kept = []
    for site in sites:
        frame = int(round(0.5 * (site.start + site.end) * frame_rate))
        if 0 <= frame < span.numel() and bool(span[frame]):
            kept.append(site)
    return kept


def plan_in_span(plan: Any, span: torch.Tensor, frame_rate: float, recognizer_rate: float) -> Any:
    """A :class:`~leakloss.margin_penalty.MarginPlan` cut to the sites whose word midpoint (its tight crop, in
    recognizer frames at ``recognizer_rate``) lies inside ``span`` (``[n]`` bool over mel frames at ``frame_rate``);
    none left: status ``no_testable_site``. As :func:`sites_in_span`: elsewhere ``x1_hat`` is the ground truth."""
    if plan.status != "ok":
        return plan
    kept = []
    for spec in plan.specs:
        first, last = spec.crops[0]
        frame = round(0.5 * (first + last) / recognizer_rate * frame_rate)
        if 0 <= frame < span.numel() and bool(span[frame]):
            kept.append(spec)
    if not kept:
        return plan._replace(specs=(), status="no_testable_site", reason="no site in the infilled span")
    return plan._replace(specs=tuple(kept))


@contextlib.contextmanager
def transformer_inputs(model: nn.Module) -> Iterator[dict[str, Any]]:
    """A dict filled, during the block, with the keyword arguments of ``model.transformer``'s last call (F5's
    ``CFM.forward`` passes ``x`` (= x_t), ``cond``, ``text``, ``time``, ``drop_text``, ... by keyword only)."""
    seen: dict[str, Any] = {}

    def grab(_module: nn.Module, _args: tuple, kwargs: dict, _out: torch.Tensor) -> None:
        seen.update(kwargs)

    handle = model.transformer.register_forward_hook(grab, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def infill_span(cond: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    """The frames F5 infilled: ``cond [b, n, d]`` (its masked ground truth), ``lens [b]`` -> ``[b, n]`` bool.
    CFM zeroes cond exactly on the infilled span; a real log-mel frame is never all-zero, and if one were it would
    just get the estimate instead of the ground truth (same frame, no harm)."""
    return (cond == 0).all(dim=-1) & lens_to_mask(lens, length=cond.shape[1])


def clean_mel_estimate(x_t: torch.Tensor, time: torch.Tensor, pred: torch.Tensor, cond: torch.Tensor,
                       lens: torch.Tensor, span: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """F5's one-step clean-mel estimate: ``x1_hat = x_t + (1 - t) * pred`` on the infilled span, the ground truth
    (= ``cond``) elsewhere; ``x_t, pred, cond [b, n, d]``, ``time [b]``, ``lens [b]`` -> ``(x1_hat, span [b, n])``
    (``span``: :func:`infill_span`, when the caller has it already)."""
    span = infill_span(cond, lens) if span is None else span  # [b, n]
    # t in fp32: under bf16 autocast t = 0.999 rounds to 1.0, and 1 - t (the estimate's gradient to pred) to 0
    t = time.reshape(-1, 1, 1).float()
    estimate = x_t.float() + (1 - t) * pred.float()
    return torch.where(span[..., None], estimate, cond.to(estimate.dtype)), span


class LeakAwareCFM(CFM):
    """F5's ``CFM`` whose training loss adds ``leak_weight * w(t) * leak_penalty(x1_hat)``,
    ``paired_weight * w(t) * paired_penalty(x1_hat, ground truth)`` and ``margin_weight * w(t) *
    margin_penalty(x1_hat, plans from the ground truth and the text)``, three separately weighted terms.

    ``forward(inp [b, n, d] | [b, nw], text, lens=[b]) -> (loss, cond [b, n, d], pred [b, n, d])`` exactly as
    F5's ``CFM.forward``. The parent does all the sampling (noise, time, random infill span, CFG drops); a
    forward hook on the transformer reads ``x_t``, ``t``, the masked ``cond`` and ``drop_text`` from the call.

    - ``x1_hat = x_t + (1 - t) * pred`` inside the infilled span, ground truth (= ``cond``) outside it.
    - ``w(t) = mean_b(t_b ** 2)``, one weight for the batch's items (F5 draws ``t`` per item, so on a batch of tens
      of items it is near its mean, 1/3: a steady scale, not a per-item discount). Each item's gradient to
      ``pred`` still carries the estimate's own ``1 - t_i``, so it is largest where ``x1_hat`` is the blurriest.
      Weighting each item by its own ``t_i ** 2`` was tried (2026-12-06, docs/penalty.md): on the fine-tune
      experiment's validation words it did not lower the judge's score of both terms, so the batch weight stays.
    - Dropped-text (unconditional CFG) steps get weight 0 and skip the penalty: without text there is no
      pronunciation to judge.
    - ``site_lookup(text_i)`` gives the utterance's sites in seconds on its ground-truth audio; with
      ``sites_in_span_only`` only sites centred in the infilled span are scored (elsewhere ``x1_hat`` is the
      ground truth: no gradient, just a constant). Items without sites are left out of the penalty call, so
      they contribute exactly zero; a batch without any contributes a zero penalty.
    - Penalty contract: ``leak_penalty(waves=None, wave_lengths=None, mels=None, mel_lengths=None, sites=...)
      -> (scalar loss, NamedTuple of detached parts)``. With ``mel_to_wave`` set, this model vocodes
      ``x1_hat`` to 16 kHz and passes ``waves``/``wave_lengths``; without it, it passes ``mels``/``mel_lengths``
      and the penalty vocodes itself.

    - Schedule: in training mode the penalty runs only on updates ``u >= leak_start_step`` with
      ``(u + 1) % leak_every == 0`` (``u`` counts updates from 0: forwards // ``grad_accumulation_steps``, or, under
      :func:`train_f5`, accelerate's own update boundaries, ``update_synced``; ``u + 1`` is the update's number as F5
      and the leak curve count them, so a curve logged every multiple of ``leak_every`` shows the penalty: until
      2026-12-07 it ran on ``(u - leak_start_step) % leak_every == 0``, never on a logged update); other steps do
      not call it at all (no cost). Eval-mode forwards always run it.
    - Many processes (``torch.distributed`` initialised, training mode): the penalty is normalised over the global
      batch: each rank's mean over its sites is rescaled by ``world * n_local / n_global`` and the ``t**2`` weight
      is the global mean, so DDP's gradient average equals the gradient of the global-batch penalty. Every rank
      joins one all-reduce per penalty step, also with no sites or a dropped text (no deadlock).
    - ``leak_item_fraction`` (``0 < f <= 1``, default 1: every item): each step scores only the ``ceil(f * m)`` of
      its ``m`` items with sites that have the largest ``t`` (ties: batch order), for every term. The cost of a
      term is per scored item (a Whisper recognizer cannot be cropped faithfully), and the largest-``t`` items are
      those whose one-step estimate is closest to speech. ``w(t)`` stays the whole batch's mean, so the term keeps
      its scale: the mean over the scored items' sites times the same weight.
    - ``leak_crop``: vocode and score only crops around the sites (:mod:`leakloss.functional.crop`; needs a
      vocoder) instead of the whole batch; a penalty with a mel bridge bridges whole items and runs Whisper's
      encoder on the crops only (:meth:`leakloss.penalty.LeakPenalty.cropped`). ``leak_bf16``: the penalty under
      bf16 autocast (loss in fp32).

    - **The reference-paired term** (``paired_penalty``, e.g. :class:`leakloss.paired_penalty.PairedPosteriorPenalty`;
      ``paired_weight``): its contract takes the **ground-truth audio of the same utterance**, which F5's batch
      always holds: ``inp`` (the mel F5 infills; a wave ``inp`` is turned into its mel as F5 does). This model
      vocodes ``x1_hat`` and that ground truth (the latter without gradient) with ``mel_to_wave`` (here or on the
      penalty: one is required) and calls ``paired_penalty(waves=, wave_lengths=, ref_waves=, sites=) -> (loss,
      parts)``: the recognizer's posteriors on both, compared inside each site's window. Same ``t**2`` weight,
      dropped-text rule, site rules, schedule and DDP normalisation as the reference-free term; a weight of 0
      monitors it without gradient. ``leak_crop`` crops only the reference-free term: the paired term always
      vocodes whole items (a Whisper recognizer attends over the whole clip, so a crop would change what it hears).
    - **The text-paired path-margin term** (``margin_penalty``, :class:`leakloss.margin_penalty.PathMarginPenalty`;
      ``margin_weight``): for each site of the scored items, the recognizer's CTC fit of the word's Hindi-ward phone
      path minus its Nepali path on vocoded ``x1_hat``, under a smooth hinge. Its contract takes the **text** and a
      plan of where each site's word lies, made without gradient on the **vocoded ground truth** (``inp``) the
      first time an utterance (its site key, else its text, and its mel length) is scored and kept (the
      :data:`MARGIN_PLAN_CACHE` most recently used; shared with F5's EMA copy); with ``sites_in_span_only`` only
      sites whose word is centred in the infilled span are scored (:func:`plan_in_span`). Items whose plan cannot
      be scored are not vocoded. Needs ``mel_to_wave``, unless the term hears mels through a mel bridge
      (``PathMarginPenalty(mel_bridge=...)``): then ``x1_hat``'s mels go straight into Whisper's log-mel and the
      plans are made on the ground truth's mel, with no vocoder (docs/penalty.md).
      Same ``t**2`` weight, dropped-text rule, item choice, schedule and DDP normalisation as the other terms;
      whole items, never cropped; weight 0 monitors it.

    ``leak_penalty``, ``paired_penalty``, ``margin_penalty`` and ``mel_to_wave`` are frozen helpers: not in
    ``state_dict``/``parameters()``, moved with the model by ``.to()``, shared by copies (F5's EMA), and untouched
    by ``.train()``/``.eval()``. After each training forward: ``last_leak_parts`` (parts or None when skipped),
    ``last_leak_weight`` (``leak_weight * w(t)``, 0.0 when skipped), ``last_leak_penalty`` and ``last_flow_loss``
    (detached); ``last_paired_*`` and ``last_margin_*`` the same for the paired and the margin term.
    """

    def __init__(
        self,
        transformer: nn.Module,
        *args: Any,
        leak_penalty: nn.Module | None = None,
        leak_weight: float = 0.0,
        site_lookup: SiteLookup | None = None,
        mel_to_wave: MelToWave | None = None,
        sites_in_span_only: bool = True,
        leak_start_step: int = 0,
        leak_every: int = 1,
        grad_accumulation_steps: int = 1,
        leak_crop: bool = False,
        leak_bf16: bool = False,
        paired_penalty: nn.Module | None = None,
        paired_weight: float = 0.0,
        leak_item_fraction: float = 1.0,
        margin_penalty: nn.Module | None = None,
        margin_weight: float = 0.0,
        **kwargs: Any,
    ) -> None:
        for name, weight, penalty in (("leak_weight", leak_weight, leak_penalty),
                                      ("paired_weight", paired_weight, paired_penalty),
                                      ("margin_weight", margin_weight, margin_penalty)):
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                    or weight < 0:  # NaN/inf made the training loss NaN/inf; a negative one rewarded leaking
                raise ValueError(f"{name} must be a finite number >= 0, got {weight!r}")
            if penalty is not None and weight > 0 and site_lookup is None:
                # the penalty then never acts: a "leak-aware" run whose penalty is identically zero
                raise ValueError(f"{name} > 0 with a {name.replace('weight', 'penalty')} needs a site_lookup (text -> "
                                 "the sites on its audio, e.g. integrations.f5_dataset.cache_lookup); without one no "
                                 "site is ever found")
        check_item_fraction(leak_item_fraction)
        from leakloss.checks import check_whole

        # 2.7 became 2, True 1, inf an OverflowError, "2" a TypeError: checked here, not at some later step
        leak_every, grad_accumulation_steps = check_whole(leak_every, "leak_every"), check_whole(
            grad_accumulation_steps, "grad_accumulation_steps")
        leak_start_step = check_whole(leak_start_step, "leak_start_step", low=0)
        if site_lookup is not None and not callable(site_lookup):  # a dict was a TypeError at the first forward
            raise ValueError(f"site_lookup must be a function text -> sites (a dict d: d.get), got "
                             f"{type(site_lookup).__name__}")
        from leakloss.penalty import LeakPenalty

        if isinstance(leak_penalty, LeakPenalty) and mel_to_wave is None and leak_penalty.mel_to_wave is None \
                and leak_penalty.mel_bridge is None:  # failed at the first scheduled step: "needs a vocoder"
            raise ValueError("leak_penalty hears x1_hat through a vocoder: give mel_to_wave (leakloss.vocoder."
                             "MelToWave) here or on the penalty, or load it with a mel bridge")
        if paired_penalty is not None and mel_to_wave is None and getattr(paired_penalty, "mel_to_wave", None) is None:
            raise ValueError("a paired_penalty compares vocoded x1_hat with the vocoded ground truth: give mel_to_wave "
                             "(leakloss.vocoder.MelToWave)")
        if margin_penalty is not None and mel_to_wave is None and getattr(margin_penalty, "mel_bridge", None) is None:
            raise ValueError("a margin_penalty hears vocoded x1_hat and plans on the vocoded ground truth: give "
                             "mel_to_wave (leakloss.vocoder.MelToWave), or load it with a mel bridge")
        super().__init__(transformer, *args, **kwargs)
        self._shared = _Shared(leak_penalty, mel_to_wave, paired_penalty, margin_penalty)
        self.leak_weight = float(leak_weight)
        self.paired_weight = float(paired_weight)
        self.margin_weight = float(margin_weight)
        self.site_lookup: SiteLookup = site_lookup if site_lookup is not None else _no_sites
        self.sites_in_span_only = sites_in_span_only
        self.leak_start_step, self.leak_every = int(leak_start_step), int(leak_every)
        self.grad_accumulation_steps = int(grad_accumulation_steps)
        self.leak_crop, self.leak_bf16 = bool(leak_crop), bool(leak_bf16)
        self.leak_item_fraction = float(leak_item_fraction)  # checked above
        self._crop_context = None  # computed from the penalty's modules on first use
        self.train_forwards = 0  # training-mode forwards so far: the update index is this // grad_accumulation_steps
        # set by train_f5: accelerate's sync flag, true on the forward that completes an update (accelerate also
        # completes one at each epoch's end, so with accumulation, forwards // steps runs behind by one an epoch)
        self.update_synced: Callable[[], bool] | None = None
        self.completed_updates = 0  # with update_synced: updates completed so far
        self._forwards_in_update = 0  # with update_synced: forwards of the update being accumulated
        self.last_leak_sites: list[list[TimedSite]] | None = None
        self.last_leak_parts: NamedTuple | None = None
        self.last_leak_weight: float = 0.0
        self.last_leak_penalty: torch.Tensor | None = None
        self.last_flow_loss: torch.Tensor | None = None
        self.last_paired_sites: list[list[TimedSite]] | None = None
        self.last_paired_parts: NamedTuple | None = None
        self.last_paired_weight: float = 0.0
        self.last_paired_penalty: torch.Tensor | None = None
        self.last_margin_sites: list[list[TimedSite]] | None = None
        self.last_margin_parts: NamedTuple | None = None
        self.last_margin_weight: float = 0.0
        self.last_margin_penalty: torch.Tensor | None = None

    @property
    def leak_penalty(self) -> nn.Module | None:
        return self._shared.leak_penalty

    @property
    def paired_penalty(self) -> nn.Module | None:
        return self._shared.paired_penalty

    @property
    def margin_penalty(self) -> nn.Module | None:
        return self._shared.margin_penalty

    @property
    def mel_to_wave(self) -> MelToWave | None:
        return self._shared.mel_to_wave

    def _apply(self, fn: Callable, recurse: bool = True) -> "LeakAwareCFM":
        # .to()/.float() etc. also reach the unregistered helpers so they follow the model's device
        super()._apply(fn, recurse)
        for module in self._shared.modules():
            module._apply(fn, recurse)
        return self

    def forward(
        self,
        inp: torch.Tensor,
        text: torch.Tensor | list[str],
        *,
        lens: torch.Tensor | None = None,
        noise_scheduler: str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``inp`` ``[b, n, d]`` mel (or ``[b, nw]`` wave), ``text`` list[str] or ``[b, nt]`` -> ``(loss, cond, pred)``."""
        with transformer_inputs(self) as seen:
            flow_loss, cond, pred = super().forward(inp, text, lens=lens, noise_scheduler=noise_scheduler)
        span = None  # computed once: the penalty's clean-mel estimate below uses it too
        if "x" in seen:
            # F5 averages the error over the infilled span: a batch of 1-frame items infills none (a mean of
            # nothing, NaN); a NaN loss from NaN input stays NaN (the curve logger stops on it). A device-side
            # choice, not a Python `if`: reading the loss on the host would stall every GPU step.
            if lens is None:
                lens = torch.full(seen["x"].shape[:1], seen["x"].shape[1], device=seen["x"].device, dtype=torch.long)
            span = infill_span(cond, lens)
            flow_loss = torch.where(span.any(), flow_loss, pred.sum() * 0)

        self.last_flow_loss = flow_loss.detach()
        for name in AUXILIARY_TERMS:
            self._record(name, None, None, 0.0)
            setattr(self, f"last_{name}_sites", None)
        due = self._leak_due()
        terms = [name for name in AUXILIARY_TERMS if getattr(self, f"{name}_penalty") is not None]
        if not terms or not due:
            return flow_loss, cond, pred
        distributed = self.training and _world_size() > 1
        if seen.get("drop_text", False):  # no text, no pronunciation to judge; other ranks may still have one
            if distributed:
                for _ in terms:  # one all-reduce per term, as on the ranks that score
                    self._global_stats(pred, 0.0, 0.0, 0, 0.0)
            return flow_loss, cond, pred

        x_t, time = seen["x"], seen["time"]  # [b, n, d], [b]
        batch, seq_len = x_t.shape[:2]
        if lens is None:
            lens = torch.full((batch,), seq_len, device=x_t.device, dtype=torch.long)
        x1_hat, span = clean_mel_estimate(x_t, time, pred, cond, lens, span=span)
        truth = None
        if self.paired_penalty is not None or self.margin_penalty is not None:  # the ground truth F5 infilled: inp
            # (its mel, for a wave inp)
            with torch.no_grad():
                truth = (self.mel_spec(inp).permute(0, 2, 1) if inp.ndim == 2 else inp).detach()

        loss = flow_loss
        for name in terms:
            added = self._auxiliary_term(name, x1_hat, truth, lens, span, text, time, pred, distributed)
            if added is not None:
                loss = loss + added
        return loss, cond, pred

    def _auxiliary_term(self, name: str, x1_hat: torch.Tensor, truth: torch.Tensor | None, lens: torch.Tensor,
                        span: torch.Tensor, text: torch.Tensor | list, time: torch.Tensor, pred: torch.Tensor,
                        distributed: bool) -> torch.Tensor | None:
        """One auxiliary term (one of :data:`AUXILIARY_TERMS`): ``weight * w(t) * penalty`` to add to the loss (None:
        nothing to add), its ``last_*`` recorded. Weight 0: computed without gradient, only monitored."""
        weight = getattr(self, f"{name}_weight")
        monitor_only = weight == 0.0  # baseline runs still log the curve, without gradient
        with torch.set_grad_enabled(torch.is_grad_enabled() and not monitor_only):
            estimate = x1_hat.detach() if monitor_only else x1_hat
            if name == "leak":
                penalty, parts = self._leak_penalty(estimate, lens, span, text, time)
            elif name == "paired":
                penalty, parts = self._paired_penalty(estimate, truth, lens, span, text, time)
            else:
                penalty, parts = self._margin_penalty(estimate, truth, lens, span, text, time)
        t2_sum, n_items = float((time.detach().float() ** 2).sum()), x1_hat.shape[0]
        sites = getattr(self, f"last_{name}_sites")
        n_sites = 0 if parts is None else _site_count(parts, sites)
        if distributed:
            n_global, t2_global, items_global, penalty_global = self._global_stats(
                pred, float(penalty.detach()) * n_sites if parts is not None else 0.0, t2_sum, n_items, n_sites)
            if parts is None:
                return None
            scale = _world_size() * n_sites / n_global if n_global else 0.0
            term_weight = weight * t2_global / max(items_global, 1)
            self._record(name, parts, penalty.new_tensor(penalty_global), 0.0 if monitor_only else term_weight)
            return None if monitor_only else term_weight * scale * penalty
        if parts is None:
            return None
        if monitor_only:
            self._record(name, parts, penalty.detach(), 0.0)
            return None
        term_weight = weight * t2_sum / n_items
        self._record(name, parts, penalty.detach(), term_weight)
        return term_weight * penalty

    def _record(self, name: str, parts: NamedTuple | None, penalty: torch.Tensor | None, weight: float) -> None:
        setattr(self, f"last_{name}_parts", parts)
        setattr(self, f"last_{name}_penalty", penalty)
        setattr(self, f"last_{name}_weight", weight)

    def updates_done(self) -> int:
        """Updates completed before the next training forward: counted at accelerate's sync points when
        ``update_synced`` is set (``train_f5``), else ``train_forwards // grad_accumulation_steps``."""
        if self.update_synced is None:
            return self.train_forwards // self.grad_accumulation_steps
        return self.completed_updates

    def at_update_start(self) -> bool:
        """Whether the next training forward is the first of an update."""
        if self.update_synced is None:
            return self.train_forwards % self.grad_accumulation_steps == 0
        return self._forwards_in_update == 0

    def resume_at(self, update: int) -> None:
        """The schedule goes on from ``update`` completed updates (a resumed run)."""
        from leakloss.checks import check_whole

        update = check_whole(update, "update", low=0)  # -2 or 2.5 were taken
        self.train_forwards = update * self.grad_accumulation_steps
        self.completed_updates, self._forwards_in_update = update, 0

    def _leak_due(self) -> bool:
        """Whether this forward runs the penalty (and, in training mode, count the forward)."""
        if not self.training:
            return True
        update = self.updates_done()  # the update this forward feeds
        self.train_forwards += 1
        if self.update_synced is not None:
            self._forwards_in_update += 1
            if self.update_synced():
                self.completed_updates, self._forwards_in_update = self.completed_updates + 1, 0
        return update >= self.leak_start_step and (update + 1) % self.leak_every == 0

    @staticmethod
    def _global_stats(ref: torch.Tensor, penalty_sum: float, t2_sum: float, n_items: int,
                      n_sites: float) -> tuple[float, float, float, float]:
        """All-reduce (sum) of ``[sites, t**2 sum, items, penalty * sites]`` -> global sites, t2, items, mean penalty."""
        import torch.distributed as dist

        device = ref.device if dist.get_backend() != "gloo" else torch.device("cpu")
        stats = torch.tensor([float(n_sites), t2_sum, float(n_items), penalty_sum], dtype=torch.float64,
                             device=device)
        dist.all_reduce(stats)
        n, t2, items, total = stats.tolist()
        return n, t2, items, (total / n if n else 0.0)

    def _leak_penalty(
        self, x1_hat: torch.Tensor, lens: torch.Tensor, span: torch.Tensor, text: torch.Tensor | list,
        time: torch.Tensor,
    ) -> tuple[torch.Tensor, NamedTuple | None]:
        """Penalty over the scored items (:meth:`_scored_items`): ``x1_hat`` ``[b, n, d]``, ``lens`` ``[b]``,
        ``span`` ``[b, n]``, ``time`` ``[b]``."""
        frame_rate = self.mel_spec.target_sample_rate / self.mel_spec.hop_length
        keep, sites = self._scored_items(text, span, time)
        if not keep:
            return x1_hat.new_zeros(()), None
        self.last_leak_sites = sites
        index = torch.tensor(keep, device=x1_hat.device)
        mels, mel_lengths = x1_hat.index_select(0, index), lens.index_select(0, index)
        autocast = torch.autocast(x1_hat.device.type, dtype=torch.bfloat16, enabled=self.leak_bf16)
        with autocast:
            if self.leak_crop:
                return self._cropped_penalty(mels, mel_lengths, sites, frame_rate)
            # a penalty with a mel bridge reads the mels itself; else vocode here when given a vocoder
            if self.mel_to_wave is not None and getattr(self.leak_penalty, "mel_bridge", None) is None:
                # as the other terms: x1_hat past an item's length never reaches its samples, and an item the vocoder
                # cannot hear finitely is vocoded as silence and masked (its backward gave the batch a NaN gradient)
                waves, wave_lengths, bad = vocode_items(self.mel_to_wave, mels, mel_lengths)
                return self.leak_penalty(waves=nan_items(waves, bad), wave_lengths=wave_lengths, sites=sites)
            return self.leak_penalty(mels=mels, mel_lengths=mel_lengths, sites=sites)

    def _scored_items(self, text: torch.Tensor | list, span: torch.Tensor,
                      time: torch.Tensor) -> tuple[list[int], list[list[TimedSite]]]:
        """The items to score and their sites: those with sites (``site_lookup``; with ``sites_in_span_only``
        those centred in the infilled ``span [b, n]``), of them the ``leak_item_fraction`` with the largest
        ``time [b]`` (:func:`largest_t_items`)."""
        if not isinstance(text, list):
            raise TypeError("LeakAwareCFM needs text as a list of strings to look up sites (got token ids)")
        frame_rate = self.mel_spec.target_sample_rate / self.mel_spec.hop_length
        if self.sites_in_span_only:  # one device-to-host copy per batch, not one sync per site
            span = span.detach().cpu()
        keep, sites = [], []
        for i, item in enumerate(text):
            item_sites = list(self.site_lookup(_text_key(item)) or [])
            if self.sites_in_span_only:
                item_sites = sites_in_span(item_sites, span[i], frame_rate)
            if item_sites:
                keep.append(i)
                sites.append(item_sites)
        chosen = largest_t_items(time.detach()[keep].tolist(), self.leak_item_fraction)
        return [keep[j] for j in chosen], [sites[j] for j in chosen]

    def _paired_penalty(self, x1_hat: torch.Tensor, truth: torch.Tensor, lens: torch.Tensor, span: torch.Tensor,
                        text: torch.Tensor | list, time: torch.Tensor) -> tuple[torch.Tensor, NamedTuple | None]:
        """The reference-paired term over the scored items (:meth:`_scored_items`): ``x1_hat`` and the ground
        truth ``truth`` (``[b, n, d]``, frame-aligned) vocoded and compared by ``paired_penalty``."""
        keep, sites = self._scored_items(text, span, time)
        if not keep:
            return x1_hat.new_zeros(()), None
        self.last_paired_sites = sites
        index = torch.tensor(keep, device=x1_hat.device)
        mels, ref, mel_lengths = (x.index_select(0, index) for x in (x1_hat, truth, lens))
        vocoder = self.mel_to_wave or self.paired_penalty.mel_to_wave
        autocast = torch.autocast(x1_hat.device.type, dtype=torch.bfloat16, enabled=self.leak_bf16)
        with autocast:  # vocoding and the recognizer both: leak_bf16 (or not) as for the reference-free term
            waves, wave_lengths, bad = vocode_items(vocoder, mels, mel_lengths)
            with torch.no_grad():
                ref_waves, _, bad_ref = vocode_items(vocoder, ref, mel_lengths)
            bad = bad | bad_ref
            waves = nan_items(waves, bad)  # the penalty masks these pairs itself (counted, zero gradient)
            return self.paired_penalty(waves=waves, wave_lengths=wave_lengths, ref_waves=ref_waves.to(waves.dtype),
                                       sites=sites)

    def _margin_penalty(self, x1_hat: torch.Tensor, truth: torch.Tensor, lens: torch.Tensor, span: torch.Tensor,
                        text: torch.Tensor | list, time: torch.Tensor) -> tuple[torch.Tensor, NamedTuple | None]:
        """The text-paired path-margin term over the scored items (:meth:`_scored_items`): vocoded ``x1_hat`` heard
        against plans made on the vocoded ground truth ``truth`` (``[b, n, d]``, frame-aligned), cut to the span."""
        keep, sites = self._scored_items(text, span, time)
        if not keep:
            return x1_hat.new_zeros(()), None
        self.last_margin_sites = sites
        index = torch.tensor(keep, device=x1_hat.device)
        mels, ref, mel_lengths = (x.index_select(0, index) for x in (x1_hat, truth, lens))
        plans = self._margin_plans([text[i] for i in keep], ref, mel_lengths)
        frame_rate = self.mel_spec.target_sample_rate / self.mel_spec.hop_length
        recognizer_rate = float(self.margin_penalty.recognizer.frame_rate)
        kept_span = span.detach().cpu().index_select(0, index.cpu())
        plans = [plan_in_span(p, kept_span[j], frame_rate, recognizer_rate) if self.sites_in_span_only else p
                 for j, p in enumerate(plans)]
        # only items with something to score are vocoded and heard; the others keep their plan's status
        scored = [j for j, p in enumerate(plans) if p.status == "ok"]
        unscored = sum(p.status == "not_finite" for p in plans)
        if not scored:
            from leakloss.margin_penalty import MarginParts

            zero = x1_hat.new_zeros(())
            empty = x1_hat.new_zeros(0)
            return zero, MarginParts(zero, {}, empty, (), 0, tuple(p.status for p in plans), unscored, 0, empty)
        if len(scored) < len(plans):
            pick = torch.tensor(scored, dtype=torch.long, device=x1_hat.device)
            mels, mel_lengths = mels.index_select(0, pick), mel_lengths.index_select(0, pick)
        autocast = torch.autocast(x1_hat.device.type, dtype=torch.bfloat16, enabled=self.leak_bf16)
        with autocast:
            if getattr(self.margin_penalty, "mel_bridge", None) is not None:  # no vocoder: mels into the bridge
                loss, parts = self.margin_penalty(mels=mels, mel_lengths=mel_lengths, plans=[plans[j] for j in scored])
            else:
                waves, wave_lengths, bad = vocode_items(self.mel_to_wave, mels, mel_lengths)
                waves = nan_items(waves, bad)  # the term masks these items itself (status not_finite, zero gradient)
                loss, parts = self.margin_penalty(waves=waves, wave_lengths=wave_lengths,
                                                  plans=[plans[j] for j in scored])
        if len(parts.item_status) != len(scored):
            raise RuntimeError(f"the margin term reported {len(parts.item_status)} item statuses for {len(scored)} items")
        heard = iter(parts.item_status)
        status = tuple(next(heard) if p.status == "ok" else p.status for p in plans)
        return loss, parts._replace(item_status=status, nonfinite_items=parts.nonfinite_items + unscored)

    def _margin_plans(self, texts: list, truth: torch.Tensor, mel_lengths: torch.Tensor) -> list[Any]:
        """Each item's margin plan on its vocoded ground truth (``truth [b, n, d]``), from the run's cache or made now
        (one vocoder and recognizer pass per new utterance, without gradient, in fp32). Keyed by the text's site key
        when it has one (``integrations.f5_dataset.SiteText``: audio hash + text, so two recordings of one text never
        share a plan), else the text, and the mel length."""
        from leakloss.margin_penalty import MarginPlan

        cache = self._shared.margin_plans
        keys = [_text_key(t) for t in texts]
        wanted = [(getattr(t, "site_key", None) or key, int(n)) for t, key, n in zip(texts, keys, mel_lengths.tolist())]
        plans: list[Any] = [cache.get(k) for k in wanted]
        for k, plan in zip(wanted, plans):
            if plan is not None:
                cache.move_to_end(k)
        new = [j for j, plan in enumerate(plans) if plan is None]
        if not new:
            return plans
        if getattr(self.margin_penalty, "mel_bridge", None) is not None:  # planned on the truth's mel, bridged
            with torch.no_grad(), torch.autocast(truth.device.type, enabled=False):
                for j in new:
                    mel = truth[j, : int(mel_lengths[j])].float()
                    plans[j] = self.margin_penalty.plan(text=str(keys[j]), mel=mel)
                    if plans[j].status == "not_finite":  # not cached: another batch may hold a finite copy
                        plans[j] = MarginPlan((), "not_finite", "the ground truth's mel is not finite")
                        continue
                    cache[wanted[j]] = plans[j]
                    while len(cache) > MARGIN_PLAN_CACHE:
                        cache.popitem(last=False)
            return plans
        index = torch.tensor(new, device=truth.device)
        with torch.no_grad(), torch.autocast(truth.device.type, enabled=False):
            ref_waves, ref_lengths, bad = vocode_items(self.mel_to_wave, truth.index_select(0, index).float(),
                                                       mel_lengths.index_select(0, index))
            for row, j in enumerate(new):
                if bool(bad[row]):  # not cached: another batch may hold a finite copy of the utterance
                    plans[j] = MarginPlan((), "not_finite", "the ground truth's mel is not finite")
                else:
                    wave = ref_waves[row, : int(ref_lengths[row])]
                    plans[j] = cache[wanted[j]] = self.margin_penalty.plan(wave, str(keys[j]))
                    while len(cache) > MARGIN_PLAN_CACHE:
                        cache.popitem(last=False)
        return plans

    def _cropped_penalty(self, mels: torch.Tensor, mel_lengths: torch.Tensor, sites: list[list[TimedSite]],
                         frame_rate: float) -> tuple[torch.Tensor, NamedTuple | None]:
        """The penalty on crops around the sites: ``mels`` ``[b, n, d]`` -> the same ``(loss, parts)`` contract."""
        if getattr(self.leak_penalty, "mel_bridge", None) is not None:  # no vocoder: the encoder runs on crops
            return self.leak_penalty.cropped(mels, mel_lengths, sites)  # parts in the items' site order
        crop_sites: list = []
        vocoder = self.mel_to_wave or getattr(self.leak_penalty, "mel_to_wave", None)
        if vocoder is None:
            raise ValueError("leak_crop needs a vocoder (mel_to_wave here or on the penalty)")
        if self._crop_context is None:
            self._crop_context = penalty_crop_context(self.leak_penalty, vocoder)
        result = cropped_penalty(self.leak_penalty, vocoder, mels, mel_lengths, sites, frame_rate,
                                 self._crop_context, out_sites=crop_sites)
        self.last_leak_sites = crop_sites  # the order of parts.site_probs
        return result


def check_item_fraction(value: object, name: str = "leak_item_fraction") -> float:
    """``value`` as a float if it is a number in ``(0, 1]`` (NaN and booleans are not), else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    return float(value)


def largest_t_items(times: Sequence[float], fraction: float) -> list[int]:
    """Indices (ascending) of the ``ceil(fraction * len(times))`` entries with the largest ``times``; ties go to
    the earlier index, so the choice is deterministic. ``fraction`` 1 keeps every index."""
    # at least one of a non-empty batch; 0.3 * 10 is 3, not 4, whatever the float rounding
    count = max(1, math.ceil(fraction * len(times) - 1e-9)) if len(times) else 0
    ranked = sorted(range(len(times)), key=lambda i: (-times[i], i))
    return sorted(ranked[:count])


def vocode_items(vocoder: nn.Module, mels: torch.Tensor,
                 mel_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``mels [b, n, d]`` -> (16 kHz ``waves [b, t]`` cut to the longest item, ``wave_lengths [b]``, ``bad [b]``).

    An item with NaN/Inf among its valid frames, or whose finite frames overflow inside the vocoder, is vocoded as
    silence and flagged ``bad`` (the vocoder's backward never sees a non-finite value); what the batch pads an item
    with never reaches it (:func:`silence_past_lengths`)."""
    from leakloss.functional.leak import mask_nonfinite_items

    mels, bad = mask_nonfinite_items(mels, mel_lengths)
    mels = silence_past_lengths(mels, mel_lengths)
    waves = vocoder(mels)
    blown = ~torch.isfinite(waves).all(-1) & ~bad
    if bool(blown.any()):
        mels = torch.where(blown[:, None, None], torch.zeros((), dtype=mels.dtype, device=mels.device), mels)
        waves, bad = vocoder(mels), bad | blown
    wave_lengths = mel_lengths_to_samples(mel_lengths).clamp(max=waves.shape[-1])
    return waves[:, : int(wave_lengths.max()) if waves.shape[0] else 0], wave_lengths, bad


def nan_items(waves: torch.Tensor, bad: torch.Tensor) -> torch.Tensor:
    """``waves [b, t]`` with the items flagged ``bad [b]`` (vocoded as silence by :func:`vocode_items`) set to NaN, so
    the term that hears them masks them as non-finite instead of scoring silence."""
    if not bool(bad.any()):
        return waves
    return torch.where(bad[:, None], torch.full((), math.nan, dtype=waves.dtype, device=waves.device), waves)


def _conv1d_context(module: nn.Module) -> int:
    """Frames each side reached by the stride-1 'same'-padded ``Conv1d`` chain of ``module`` (for a Vocos
    backbone or a raw-conv head stack: their convs are sequential, residuals only shorten paths)."""
    from leakloss.functional.crop import same_padded_context

    convs = [m for m in module.modules() if isinstance(m, nn.Conv1d)]
    return same_padded_context([c.kernel_size[0] for c in convs], [c.dilation[0] for c in convs])


def penalty_crop_context(penalty: nn.Module, vocoder: nn.Module) -> "CropContext":
    """:class:`leakloss.functional.crop.CropContext` of a :class:`leakloss.penalty.LeakPenalty` and a Vocos
    :class:`MelToWave`, from the modules themselves (not assumed): site pad + head + conv stack on the wave side;
    backbone convs + ISTFT overlap + resampler on the mel side."""
    from leakloss.functional.crop import CropContext, grid_frames

    rec = getattr(penalty, "recognizer", None)
    if rec is None or not hasattr(penalty, "head"):
        raise ValueError("leak_crop needs a LeakPenalty-like penalty (recognizer, head, conv_layer, pad_s, "
                         "crop_context_s)")
    hop_s = rec.frame_hop_s(penalty.conv_layer)
    # what one frame depends on: a wav2vec2 conv stack's receptive field; for Whisper's global attention, its
    # configured crop margin (leakloss.acoustic.whisper_recognizer.WHISPER_CROP_MARGIN_S)
    wave_s = penalty.crop_context_s
    istft = vocoder.head.istft
    # ISTFT ("same" padding): an output sample overlaps the windows of ceil(win / hop / 2) frames each side
    overlap = math.ceil(istft.win_length / istft.hop_length / 2)
    frames = _conv1d_context(vocoder.backbone) + overlap + 1  # + 1: the resampler's sinc reaches < 1 frame
    grid = grid_frames(MEL_HOP, MEL_SAMPLE_RATE, SAMPLE_RATE, round(hop_s * SAMPLE_RATE))
    phase = MEL_SAMPLE_RATE // math.gcd(MEL_SAMPLE_RATE, SAMPLE_RATE)
    return CropContext(wave_s=wave_s, vocoder_frames=frames + (-frames) % phase, grid=grid, phase=phase)


def cropped_penalty(penalty: nn.Module, vocoder: nn.Module, mels: torch.Tensor, mel_lengths: torch.Tensor,
                    sites: Sequence[Sequence[TimedSite]], frame_rate: float, ctx: "CropContext",
                    out_sites: list | None = None) -> tuple[torch.Tensor, NamedTuple | None]:
    """``penalty`` on the crops of ``mels [b, n, d]`` around ``sites`` (see :mod:`leakloss.functional.crop`):
    vocode only the crops, score only their site regions. ``(loss, parts)``; ``parts`` None when no site lies
    inside its item (the full computation gives those no frames either). ``out_sites`` (a list) receives the
    sites per crop, in the order of ``parts.site_probs``. An item with NaN/Inf among its valid frames (or whose
    crops overflow in the vocoder) is masked as ``LeakPenalty(mels=...)`` masks it: zero contribution, zero
    gradient, its sites inactive, counted in ``parts.nonfinite_items`` (items, not crops); never an error.
    ``parts.frame_counts`` is per item (the frames scored over its crops), ``parts.frame_probs`` one row per crop
    (its scored region), in the order of ``out_sites``.

    As the whole-item path, the crops come from :func:`silence_past_lengths` of ``mels``: what the batch pads an
    item with never reaches its crops, and a crop at an item's end sees the same silent tail."""
    from leakloss.functional.crop import (gather_mel_crops, length_groups, plan_crops, pooled_moments,
                                          trim_waves)
    from leakloss.functional.leak import mask_nonfinite_items

    # an item with NaN/Inf among its valid frames is masked as LeakPenalty(mels=...) masks it (zero contribution,
    # zero gradient, counted in nonfinite_items); its NaN made the pooled RMS NaN, a PenaltyInputError mid-run
    mels, bad = mask_nonfinite_items(mels, mel_lengths)
    mels = silence_past_lengths(mels, mel_lengths)
    n_frames = mels.shape[1]
    crops, shifted = plan_crops(sites, [int(n) for n in mel_lengths], frame_rate, ctx, padded_frames=n_frames)
    if out_sites is not None:
        out_sites[:] = shifted
    if not crops:
        return mels.new_zeros(()), None
    item = torch.tensor([c.item for c in crops], device=mels.device)

    def vocode(mels: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        # crops differ a lot in length (merged windows): vocode them in groups of similar length, not all padded
        # to the longest one (that would cost more than the whole batch)
        pieces: list[torch.Tensor] = [mels.new_zeros(0)] * len(crops)
        context: list[torch.Tensor] = [mels.new_zeros(0)] * len(crops)  # each crop's valid vocoded samples
        for group in length_groups([c.mel_frames for c in crops]):
            sub = [crops[i] for i in group]
            batch, pads = gather_mel_crops(mels, sub, ctx.phase)
            vocoded = vocoder(batch)
            waves, lengths = trim_waves(vocoded, sub, lambda k: int(mel_lengths_to_samples(k)), pads)
            for row, i in enumerate(group):
                pieces[i] = waves[row, : int(lengths[row])]
                c, p = crops[i], pads[row]
                # the moments leave out the vocoder context before a crop's right edge: the group's zero padding,
                # as long as the other crops make it, reaches those samples, so an item's loss depended on its batch.
                # (A crop aligned to the batch's end, whose left edge gets the padding, never occurs here: the silent
                # tail past every item is longer than the vocoder context.)
                trail = ctx.vocoder_frames if c.mel_end < n_frames else 0
                valid = min(c.mel_end - trail, int(mel_lengths[c.item])) - c.mel_start  # not the item's padding
                a = int(mel_lengths_to_samples(p))
                context[i] = vocoded[row, a: max(a, int(mel_lengths_to_samples(p + valid)))]
        return pieces, context

    def moments(context: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        # The penalty centres each utterance and divides it by its RMS, which is not vocoded here: pool both over
        # nearly everything that was (all crops of the item, their vocoder context but the trailing one), with
        # gradient as the full computation has them.
        return pooled_moments(torch.nn.utils.rnn.pad_sequence(context, batch_first=True),
                              torch.tensor([w.numel() for w in context], device=mels.device), item,
                              int(mels.shape[0]))

    pieces, context = vocode(mels)
    mean, rms = moments(context)
    # finite but huge mels can overflow inside the vocoder (or in the pooled moments): vocode again without
    # those items, so that no graph kept holds a non-finite value (LeakPenalty._vocode does the same)
    blown = torch.zeros_like(bad)
    for i, piece in enumerate(pieces):
        blown[crops[i].item] |= not bool(torch.isfinite(piece).all() and torch.isfinite(context[i]).all())
    blown |= ~(torch.isfinite(mean) & torch.isfinite(rms))
    blown &= ~bad
    if bool(blown.any()):
        bad = bad | blown
        mels = torch.where(bad[:, None, None], torch.zeros((), dtype=mels.dtype, device=mels.device), mels)
        pieces, context = vocode(mels)
        mean, rms = moments(context)
    lengths = torch.tensor([p.numel() for p in pieces], dtype=torch.long, device=mels.device)
    regions = torch.nn.utils.rnn.pad_sequence(pieces, batch_first=True)  # [c, t]
    bad_crop = bad[item]
    if bool(bad_crop.any()):  # the penalty masks these crops itself: no frames, so their sites stay inactive
        regions = torch.where(bad_crop[:, None], torch.full((), math.nan, dtype=regions.dtype,
                                                            device=regions.device), regions)
    loss, parts = penalty(waves=regions, wave_lengths=lengths, sites=shifted, wave_rms=rms[item],
                          wave_mean=mean[item])
    if hasattr(parts, "nonfinite_items"):  # items, not crops, as the whole-item path counts them
        parts = parts._replace(nonfinite_items=bad.sum().detach())
    if isinstance(getattr(parts, "frame_counts", None), torch.Tensor) and parts.frame_counts.shape == item.shape:
        # [b] as documented (logged as a mean over items): the frames scored of each item, over its crops
        per_item = torch.zeros(int(mels.shape[0]), dtype=parts.frame_counts.dtype, device=parts.frame_counts.device)
        parts = parts._replace(frame_counts=per_item.index_add(0, item.to(per_item.device), parts.frame_counts))
    quiet_rms = getattr(penalty, "quiet_rms", None)
    if hasattr(parts, "quiet_items") and quiet_rms is not None:  # the penalty's rule on the pooled RMS, per item
        cropped = torch.zeros_like(bad).index_fill(0, item, True)
        parts = parts._replace(quiet_items=((rms.detach() < quiet_rms) & cropped & ~bad).sum())
    return loss, parts


def tiny_f5(vocab_size: int = 256, seed: int = 0, **kwargs: Any) -> LeakAwareCFM:
    """A tiny offline ``LeakAwareCFM`` (DiT dim 64, depth 2, heads 2, ff_mult 2, text_dim 64, conv_layers 1, 100 mels).

    ``vocab_size`` is the char vocab size (256 = F5's byte tokenizer when no ``vocab_char_map`` is given);
    other keyword arguments go to :class:`LeakAwareCFM` (``vocab_char_map``, ``leak_penalty``, ...).
    """
    with torch.random.fork_rng():  # seeded init without disturbing the caller's RNG stream
        torch.manual_seed(seed)
        transformer = DiT(
            dim=64, depth=2, heads=2, dim_head=32, ff_mult=2, text_dim=64, conv_layers=1,
            mel_dim=MEL_BINS, text_num_embeds=vocab_size,
        )
        kwargs.setdefault("mel_spec_kwargs", MEL_SPEC_KWARGS)
        return LeakAwareCFM(transformer, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# checkpoints and vocab


class LoadReport(NamedTuple):
    """Outcome of :func:`load_indicf5_checkpoint`: key names (after prefix stripping)."""

    missing: list[str]
    unexpected: list[str]
    mismatched: list[str]  # present in both but with another shape: not loaded (e.g. a different vocab)


_PREFIXES = ("ema_model.", "_orig_mod.", "module.")
# EMA bookkeeping and mel buffers of old F5 checkpoints (F5's own loader drops the same keys)
_DROP = {"initted", "update", "step", "mel_spec.mel_stft.mel_scale.fb", "mel_spec.mel_stft.spectrogram.window"}


def _strip(key: str) -> str:
    stripped = True
    while stripped:
        stripped = False
        for prefix in _PREFIXES:
            if key.startswith(prefix):
                key, stripped = key[len(prefix):], True
    return key


class CheckpointReadError(ValueError):
    """A checkpoint file that cannot be read as F5 weights (not a safetensors/torch file, or no weight dict)."""


def load_state(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A checkpoint's model weights: the EMA weights when present (what F5 infers with), else the model's.

    Raises :class:`CheckpointReadError` naming the file when it is not a readable weight file."""
    import pickle


    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            ckpt: Any = load_file(str(path), device="cpu")
        else:  # weights_only: a pickle that is not plain tensors is refused, never run
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch's restricted unpickler raises IndexError, KeyError... on text
        if isinstance(err, pickle.UnpicklingError):  # torch's message is a page on weights_only
            first = "torch.load(weights_only=True) cannot read it as plain tensors"
        else:
            first = first_line(err) or type(err).__name__
        raise CheckpointReadError(f"{path}: not a readable F5 checkpoint (.safetensors or a torch .pt of "
                                  f"tensors): {first}") from err
    for key in ("ema_model_state_dict", "model_state_dict"):
        if isinstance(ckpt, Mapping) and key in ckpt:
            ckpt = ckpt[key]
            break
    if not isinstance(ckpt, Mapping) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                                for k, v in ckpt.items()):
        raise CheckpointReadError(f"{path}: holds a {type(ckpt).__name__}, not a dict of named weight tensors")
    return {_strip(k): v for k, v in ckpt.items() if _strip(k) not in _DROP}


def load_indicf5_checkpoint(model: nn.Module, path: str | os.PathLike,
                            state: Mapping[str, torch.Tensor] | None = None) -> LoadReport:
    """Load an F5 / IndicF5 ``.safetensors`` or ``.pt`` checkpoint into ``model`` (a ``CFM``) non-strictly.

    Strips ``ema_model.`` / ``_orig_mod.`` / ``module.`` prefixes; shape mismatches are skipped and reported.
    ``state``: the checkpoint's weights as :func:`load_state` read them (not read again).
    """
    state = load_state(path) if state is None else state
    own = model.state_dict()
    mismatched = sorted(k for k, v in state.items() if k in own and own[k].shape != v.shape)
    result = model.load_state_dict({k: v for k, v in state.items() if k not in mismatched}, strict=False)
    missing = sorted(set(result.missing_keys) - set(mismatched))  # each key reported once
    report = LoadReport(missing, sorted(result.unexpected_keys), mismatched)
    if report.missing or report.unexpected or report.mismatched:
        log.warning(
            "checkpoint %s: %d missing, %d unexpected, %d shape-mismatched keys (e.g. %s)",
            path, len(report.missing), len(report.unexpected), len(report.mismatched),
            (report.missing + report.unexpected + report.mismatched)[:3],
        )
    return report


_PUNCT = list(",.?!-'\":;()")


#: ``DiT`` keywords that cards (``model.json`` ``architecture``, train_f5) gained after cards were first written, at
#: the value every card without them meant.
LATER_ARCH_KEYS: dict[str, Any] = {"text_embedding_average_upsampling": False}


def written_architecture(arch: Mapping[str, Any]) -> dict[str, Any]:
    """A card's ``architecture`` with each key added since it was written at the value it then meant (a default
    that changes later must not change what an old card describes)."""
    return {**LATER_ARCH_KEYS, **arch}


def architecture_changes(written: Mapping[str, Any], now: Mapping[str, Any],
                         ignore: Sequence[str] = ("_target_", "seed")) -> dict[str, tuple[Any, Any]]:
    """``{key: (written value, value now)}`` for the keys both architectures state (a card's read with
    :func:`written_architecture`) whose values differ, ``ignore`` left out (the class path, the init seed)."""
    before, after = written_architecture(written), written_architecture(now)
    return {k: (before[k], after[k]) for k in sorted(after)
            if k in before and k not in ignore and before[k] != after[k]}


def card_architecture_problem(checkpoint: str | os.PathLike, arch: Mapping[str, Any]) -> str | None:
    """Why the card beside ``checkpoint`` (``model.json`` next to ``model.safetensors``, as train_f5 writes it)
    describes another architecture than ``arch`` (the keys both state), or None (no card, or the same). A switch
    that changes no weight shape (the text layout) loads without complaint and trains the weights as what they
    are not."""
    card_path = Path(checkpoint).with_suffix(".json")
    try:
        written = json.loads(card_path.read_text(encoding="utf-8")).get("architecture")
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(written, Mapping):
        return None
    changes = architecture_changes(written, arch)
    if not changes:
        return None
    return (f"its card {card_path} says {', '.join(f'{k}={a!r}' for k, (a, _) in changes.items())}, the preset "
            f"{', '.join(f'{k}={b!r}' for k, (_, b) in changes.items())}")


def devanagari_chars() -> list[str]:
    """F5 char vocab order: space first (F5 maps unknown chars to id 0), then every assigned character of the
    Devanagari block U+0900-U+097F (letters, matras, signs, digits, danda ``।`` / ``॥``), ZWNJ/ZWJ (Nepali
    half forms), ASCII digits and basic punctuation."""
    block = [chr(c) for c in range(0x0900, 0x0980) if unicodedata.category(chr(c)) != "Cn"]
    return [" ", *block, "\u200c", "\u200d", *"0123456789", *_PUNCT]


def devanagari_vocab(path: str | os.PathLike) -> dict[str, int]:
    """Write ``vocab.txt`` (one char per line, as F5's ``get_tokenizer(..., "custom")`` reads it) -> ``{char: id}``."""
    chars = devanagari_chars()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(f"{c}\n" for c in chars), encoding="utf-8")
    return {c: i for i, c in enumerate(chars)}


# ---------------------------------------------------------------------------------------------------------------
# data


class WaveTextDataset(Dataset):
    """In-memory (waveform, sample rate, text) items -> what F5's ``collate_fn`` expects.

    ``items[i] = (wave [t] float, sample_rate, text)``; waves are resampled to 24 kHz once here.
    ``__getitem__`` -> ``{"mel_spec": [d, n], "text": str}``; ``get_frame_len`` serves F5's
    ``DynamicBatchSampler``. Unlike F5's ``CustomDataset`` nothing is filtered by duration.
    """

    def __init__(self, items: Sequence[tuple[torch.Tensor, int, str]], mel_spec_kwargs: Mapping = MEL_SPEC_KWARGS):
        """Raises ``ValueError`` naming the item: a wave that is not 1-D (a ``[2, t]`` stereo wave was read as
        channels end to end, ``[t, 1]`` resampled along its size-1 axis), empty, or holding NaN/Inf (it trained a
        NaN model without a word)."""
        self.mel_spec = MelSpec(**mel_spec_kwargs)
        rate = self.mel_spec.target_sample_rate
        for i, (w, _, _) in enumerate(items):
            if not isinstance(w, torch.Tensor) or w.ndim != 1:
                raise ValueError(f"items[{i}]: the wave must be a 1-D tensor [t] (mono; average the channels "
                                 f"first), got {tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__}")
            if w.numel() == 0:
                raise ValueError(f"items[{i}]: the wave is empty")
            if not bool(torch.isfinite(w).all()):
                raise ValueError(f"items[{i}]: the wave holds NaN/Inf samples")
        # leakloss.audio.resample: torchaudio's polyphase kernel for 44,101 Hz -> 24 kHz asked for 4 GB
        self.waves = [w.float() if sr == rate else resample(w.float(), sr, rate) for w, sr, _ in items]
        shortest = self.mel_spec.n_fft // 2 + 1  # the STFT's reflect padding: a raw RuntimeError mid-training
        for i, w in enumerate(self.waves):
            if w.numel() < shortest:
                raise ValueError(f"items[{i}]: the wave is {w.numel()} samples at {rate} Hz, shorter than one mel "
                                 f"frame's window ({shortest})")
        self.texts = [text for _, _, text in items]

    def __len__(self) -> int:
        return len(self.texts)

    def get_frame_len(self, index: int) -> float:
        return self.waves[index].numel() / self.mel_spec.hop_length

    def __getitem__(self, index: int) -> dict[str, Any]:
        with torch.no_grad():
            mel = self.mel_spec(self.waves[index][None])[0]  # [d, n]
        return {"mel_spec": mel, "text": self.texts[index]}


class _Cycle(Dataset):
    """``base`` repeated to ``length`` items: one F5 "epoch" of exactly the requested number of batches."""

    def __init__(self, base: Dataset, length: int) -> None:
        self.base, self.length = base, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        return self.base[index % len(self.base)]


# ---------------------------------------------------------------------------------------------------------------
# training


def _scalar(value: torch.Tensor | float) -> float:
    """A logged number: scalars as is, tensors by their mean (per-site / per-contrast parts -> one curve)."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().float().mean()) if value.numel() else float("nan")
    return float(value)


#: what a penalty step measures about the sites (after the term's prefix, ``leak/``, ``paired/`` or ``margin/``): NaN
#: (not measured) when every item was masked as non-finite
_SITE_MEASURES = ("penalty", "loss", "per_kind/", "per_contrast/", "site_probs", "site_divergences", "site_margins",
                  "site_hinges")


def leak_log_row(model: LeakAwareCFM, total_loss: torch.Tensor) -> dict[str, float]:
    """Numbers to log after one forward: total/flow loss, and for each auxiliary term (``leak/``: the
    reference-free penalty; ``paired/``: the reference-paired term; ``margin/``: the path-margin term; each when the
    model has it) its weight, penalty and every numeric part of its last parts.

    A non-finite total loss adds ``loss/nonfinite`` 1.0; a penalty step whose items were all masked as
    non-finite (``*/nonfinite_items`` > 0, no active site) logs its penalty and site means as NaN, not
    measured: the penalty's 0.0 there read as "no leak" for a dead model."""
    row = {"loss/total": _scalar(total_loss)}
    if not math.isfinite(row["loss/total"]):
        row["loss/nonfinite"] = 1.0
    if model.last_flow_loss is not None:
        row["loss/flow"] = _scalar(model.last_flow_loss)
    row |= _term_row("leak", model.last_leak_weight, model.last_leak_penalty, model.last_leak_parts)
    for name in AUXILIARY_TERMS[1:]:
        if getattr(model, f"{name}_penalty", None) is not None:
            row |= _term_row(name, getattr(model, f"last_{name}_weight"), getattr(model, f"last_{name}_penalty"),
                             getattr(model, f"last_{name}_parts"))
    return row


def _term_row(prefix: str, weight: float, penalty: torch.Tensor | None, parts: NamedTuple | None) -> dict[str, float]:
    row = {f"{prefix}/weight": weight}
    if penalty is not None:
        row[f"{prefix}/penalty"] = _scalar(penalty)
    if parts is not None:
        empty: list[str] = []
        for k, v in parts._asdict().items():
            if k == "penalty" and penalty is not None:  # under DDP ``penalty`` is the global batch's, parts' this rank's
                continue
            if isinstance(v, dict):  # per contrast kind / per contrast: one curve each
                row.update({f"{prefix}/{k}/{kk}": _scalar(vv) for kk, vv in v.items()})
            elif v is None or isinstance(v, (tuple, list, str)):  # per-site kinds, per-item statuses: labels
                continue
            elif isinstance(v, torch.Tensor) and v.numel() == 0:  # no site this step (a margin step that scored no
                empty.append(f"{prefix}/{k}")                     # item): no point, not a NaN in the curve
            elif not (isinstance(v, torch.Tensor) and v.dim() > 1):  # per-frame maps are not curves
                row[f"{prefix}/{k}"] = _scalar(v)
        if row.get(f"{prefix}/nonfinite_items", 0.0) > 0 and row.get(f"{prefix}/active_sites", 1.0) == 0:
            measures = tuple(f"{prefix}/{m}" for m in _SITE_MEASURES)
            row |= {k: math.nan for k in [*row, *empty] if k.startswith(measures)}
    return row


#: each term's per-site parts (``[n]``, one value per site of its last call, in the order of its flattened sites):
#: the first is the value its ``per_kind`` / ``per_contrast`` means average over the active sites
PER_SITE_PARTS = {"leak": ("site_probs",), "paired": ("site_divergences",), "margin": ("site_hinges", "site_margins")}


class SiteRecord(NamedTuple):
    """One site of a term's last call, as :func:`global_log_row` gathers it from every rank."""

    kind: str
    contrast: str | None  # None where the parts name only kinds (the margin term's ``site_kinds``)
    active: bool  # counted in the term's means (the penalty's ``site_active``; a margin site is scored or absent)
    values: tuple[float, ...]  # the term's :data:`PER_SITE_PARTS`, in that order


def site_records(model: LeakAwareCFM, name: str) -> list[SiteRecord]:
    """The :class:`SiteRecord` of each site of term ``name``'s last call; [] when it has none, or its parts lack a
    per-site field or hold one value per site not given (a custom penalty: its means are averaged over the ranks)."""
    parts = getattr(model, f"last_{name}_parts", None)
    fields = PER_SITE_PARTS[name]
    if parts is None or any(getattr(parts, f, None) is None for f in fields):
        return []
    columns = [getattr(parts, f).detach().float().cpu().tolist() for f in fields]
    if hasattr(parts, "site_kinds"):
        labels = [(kind, None) for kind in parts.site_kinds]
    else:
        labels = [(s.kind, s.contrast) for item in getattr(model, f"last_{name}_sites") or [] for s in item]
    active = getattr(parts, "site_active", None)
    active = [True] * len(labels) if active is None else [bool(a) for a in active.detach().cpu().tolist()]
    if not len(labels) == len(active) == len(columns[0]):  # parts not in the order of the sites: no site statistics
        return []  # (never raise here: the other ranks would wait in the gather for good)
    return [SiteRecord(kind, contrast, a, tuple(c[j] for c in columns))
            for j, ((kind, contrast), a) in enumerate(zip(labels, active))]


def _global_site_stats(name: str, records: list[SiteRecord], keys: set[str]) -> dict[str, float]:
    """Term ``name``'s site statistics over the records of all ranks, as one process would log them for the whole
    batch: per-kind / per-contrast means over the active sites (0.0 for one logged with no active site anywhere, the
    penalty's own convention), each per-site part's mean over all sites, the share of them active."""
    active = [r for r in records if r.active]
    if not active:  # nothing measured anywhere: the ranks' own rows (0.0, or NaN where every item was non-finite)
        return {}
    out = {k: 0.0 for k in keys if k.startswith((f"{name}/per_kind/", f"{name}/per_contrast/"))}
    for field, label in (("per_kind", "kind"), ("per_contrast", "contrast")):
        groups: dict[str, list[float]] = {}
        for r in active:
            if getattr(r, label) is not None:
                groups.setdefault(getattr(r, label), []).append(r.values[0])
        out |= {f"{name}/{field}/{k}": sum(v) / len(v) for k, v in groups.items()}
    for j, field in enumerate(PER_SITE_PARTS[name]):
        if f"{name}/{field}" in keys:
            out[f"{name}/{field}"] = sum(r.values[j] for r in records) / len(records)
    if f"{name}/site_active" in keys:
        out[f"{name}/site_active"] = len(active) / len(records)
    return out


#: parts that count sites or items: summed over the ranks, not averaged
_COUNT_PARTS = ("active_sites", "nonfinite_items", "quiet_items", "infeasible_sites")
#: each term's per-item parts (``[b]``, one value per item of its last call), logged as their mean over the items:
#: under DDP the mean over every rank's items, from each rank's sum and item count (:func:`item_totals`), not the mean
#: of the ranks' means (wrong where the ranks hold different numbers of items: frame batches)
#: (on the cropped path ``leak/frame_counts`` counts the frames scored inside an item's crops, whole items all their
#: frames: compare the curve within one ``leak.crop`` setting)
PER_ITEM_PARTS = {"leak": ("frame_counts",), "paired": ("frame_counts",), "margin": ()}


def item_totals(model: LeakAwareCFM, name: str) -> dict[str, tuple[float, int]]:
    """``{"<term>/<part>": (sum, items)}`` of term ``name``'s :data:`PER_ITEM_PARTS` in its last call (what
    :func:`merge_rank_rows` weighs the ranks' means by); a part that is absent, empty or not ``[b]`` is left out."""
    parts = getattr(model, f"last_{name}_parts", None)
    out: dict[str, tuple[float, int]] = {}
    for field in PER_ITEM_PARTS[name]:
        value = getattr(parts, field, None) if parts is not None else None
        if isinstance(value, torch.Tensor) and value.dim() == 1 and value.numel():
            out[f"{name}/{field}"] = (float(value.detach().double().sum()), int(value.numel()))
    return out


def rank_log_payload(model: LeakAwareCFM, row: dict[str, float]) -> tuple[dict[str, float], dict[str, list[SiteRecord]],
                                                                           dict[str, tuple[float, int]]]:
    """What each rank contributes to :func:`merge_rank_rows`: its :func:`leak_log_row`, its terms' site records and
    per-item totals."""
    return (row, {name: site_records(model, name) for name in AUXILIARY_TERMS},
            {k: v for name in AUXILIARY_TERMS for k, v in item_totals(model, name).items()})


def merge_rank_rows(gathered: Sequence[tuple]) -> dict[str, float]:
    """One row from each rank's ``(leak_log_row, {term: site_records}[, {key: (sum, items)}])``
    (:func:`rank_log_payload`): the global batch's site statistics (:func:`_global_site_stats`), counts (summed) and
    per-item means (``*/frame_counts``: the ranks' sums over their summed item counts, where every rank that logs the
    key gave its totals); every other number averaged over the ranks that have it finite (the losses: what DDP
    optimises; each term's penalty is already the global batch's)."""
    rows = [entry[0] for entry in gathered]
    totals = [entry[2] if len(entry) > 2 else {} for entry in gathered]
    out: dict[str, float] = {}
    for key in sorted({k for r in rows for k in r}):
        values = [r[key] for r in rows if key in r and math.isfinite(r[key])]
        out[key] = sum(values) / len(values) if values else float("nan")
        logged = [t for r, t in zip(rows, totals) if key in r]
        if logged and all(key in t for t in logged) and sum(t[key][1] for t in logged):
            out[key] = sum(t[key][0] for t in logged) / sum(t[key][1] for t in logged)
    for name in AUXILIARY_TERMS:
        out |= _global_site_stats(name, [rec for entry in gathered for rec in entry[1].get(name, [])], set(out))
        for count in _COUNT_PARTS:
            if f"{name}/{count}" in out:
                out[f"{name}/{count}"] = float(sum(r.get(f"{name}/{count}", 0.0) for r in rows))
    return out


def global_log_row(model: LeakAwareCFM, row: dict[str, float]) -> dict[str, float]:
    """:func:`leak_log_row` over all ranks (a collective: every rank calls it at the same step), merged by
    :func:`merge_rank_rows`."""
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, rank_log_payload(model, row))
    return merge_rank_rows(gathered)


class LeakCurveLogger:
    """Forward hook for a training ``LeakAwareCFM``: every ``every`` updates, log :func:`leak_log_row`;
    every ``probe_every`` updates also ``probe(model)`` (e.g. :func:`f5_probe`: the probe set synthesised
    by the model being trained).

    Rows go to ``csv_path`` in long form (``step,name,value``: parts may differ from step to step) and to
    ``log_fn(row, step)`` (e.g. ``accelerator.log`` -> W&B) when given. Only training-mode calls count.

    Many processes: register it on every rank (the log steps are the same on all, by call count); each row is
    then the global batch's (:func:`merge_rank_rows`): each term's per-kind / per-contrast / per-site means over the
    sites of all ranks, its counts summed, its per-item parts (``*/frame_counts``) the mean over all ranks' items,
    losses averaged over ranks (what DDP optimises); only ``is_main`` writes and probes.

    ``stop_on_nonfinite``: a forward whose loss is NaN/Inf (on any rank) is logged whatever ``every`` says, then
    :class:`TrainingDivergedError` is raised, before its backward pass reaches the weights.
    """

    def __init__(
        self,
        csv_path: str | os.PathLike,
        every: int = 10,
        log_fn: Callable[[dict[str, float], int], None] | None = None,
        grad_accumulation_steps: int = 1,
        probe: Callable[[nn.Module], dict[str, float]] | None = None,
        probe_every: int = 100,
        is_main: bool = True,
        start_update: int = 0,
        stop_on_nonfinite: bool = True,
    ) -> None:
        from leakloss.checks import check_whole

        # 0 was a ZeroDivisionError at the first training forward
        every = check_whole(every, "every")
        probe_every = check_whole(probe_every, "probe_every", low=1 if probe is not None else 0)  # 0: no probe
        grad_accumulation_steps = check_whole(grad_accumulation_steps, "grad_accumulation_steps")
        self.csv_path, self.every, self.log_fn = Path(csv_path), every, log_fn
        self.stop_on_nonfinite = stop_on_nonfinite
        self.is_main = is_main
        self.grad_accumulation_steps = grad_accumulation_steps
        self.probe, self.probe_every = probe, probe_every
        if isinstance(start_update, bool) or not isinstance(start_update, int) or start_update < 0:
            raise ValueError(f"start_update must be a whole number >= 0, got {start_update!r}")
        # a resumed run counts on from its checkpoint's update, and keeps the curve up to it (the rows
        # after it were logged by updates the checkpoint does not hold: they are trained again)
        self.calls = start_update * grad_accumulation_steps
        if is_main:
            self.csv_path.parent.mkdir(parents=True, exist_ok=True)
            kept: list[list[str]] = []
            if start_update > 0 and self.csv_path.is_file():
                with self.csv_path.open(newline="") as f:
                    kept = [r for r in list(csv.reader(f))[1:] if r and r[0].isdigit() and int(r[0]) <= start_update]
            with self.csv_path.open("w", newline="") as f:
                csv.writer(f).writerows([["step", "name", "value"], *kept])

    def __call__(self, model: nn.Module, _args: tuple, output: tuple) -> None:
        if not model.training:
            return
        self.calls += 1
        if getattr(model, "update_synced", None) is not None:
            # accelerate's own update boundaries (it also completes one at each epoch's end): the model has
            # counted this forward already; calls // accumulation ran behind by one update an epoch
            at_update = model.at_update_start()
            step = model.updates_done() + (0 if at_update else 1)
        else:
            step = math.ceil(self.calls / self.grad_accumulation_steps)  # the update this forward feeds (F5 logs
            at_update = self.calls % self.grad_accumulation_steps == 0  # at it)
        log_now = at_update and step % self.every == 0
        # every rank agrees (one all-reduce): a rank stopping alone would leave the others waiting in backward
        diverged = self.stop_on_nonfinite and _all_agree(not bool(torch.isfinite(output[0].detach()).all()))
        log_now = log_now or diverged
        probe_now = (self.probe is not None and at_update and step % self.probe_every == 0 and self.is_main
                     and not diverged)
        if not (log_now or probe_now):
            return
        row = leak_log_row(model, output[0]) if log_now else {}
        if log_now and _world_size() > 1:
            row = global_log_row(model, row)
        if self.is_main:
            if probe_now:
                row |= self.probe(model)
            with self.csv_path.open("a", newline="") as f:
                csv.writer(f).writerows([step, k, v] for k, v in row.items())
            if self.log_fn is not None:
                self.log_fn({k: v for k, v in row.items() if math.isfinite(v)}, step)
        if diverged:
            raise TrainingDivergedError(step, _divergence_summary(row))


def f5_probe(probe: "ProbeSet", ref_wave: torch.Tensor, ref_text: str, mel_to_wave: MelToWave, *, nfe: int = 8,
             seed: int = 0, cfg_strength: float = 1.0, sway_sampling_coef: float | None = None,
             ref_rate: int = SAMPLE_RATE) -> Callable[[nn.Module], dict[str, float]]:
    """A probe for :class:`LeakCurveLogger`: the model synthesises each probe sentence (F5's ``CFM.sample``,
    ``nfe`` steps, ``cfg_strength`` and ``sway_sampling_coef`` as F5 takes them -- the defaults are ``CFM.sample``'s
    own --, prompted with ``ref_wave`` at ``ref_rate`` / ``ref_text``; a 24 kHz prompt is used as it is, a 16 kHz
    one has nothing above 8 kHz, unlike F5's prompts), the vocoder makes it audible, and
    :meth:`integrations.leak_curves.ProbeSet.measure` aligns it and logs the leak per contrast kind and the
    share of flagged sites. The model goes back to training mode afterwards; no gradient is kept."""
    from leakloss.audio import resample  # bounded memory at any rate (a polyphase kernel at 22051 Hz is gigabytes)

    cond = ref_wave.float() if ref_rate == MEL_SAMPLE_RATE else resample(ref_wave.float(), ref_rate, MEL_SAMPLE_RATE)
    cond = cond[None]  # [1, nw] at 24 kHz

    def measure(model: nn.Module) -> dict[str, float]:
        was_training = model.training
        prompt = cond.to(next(model.parameters()).device)
        ref_frames = int(model.mel_spec(prompt).shape[-1])
        waves = []
        devices = [torch.cuda.current_device()] if prompt.is_cuda else []
        # F5's sample() seeds torch's global generator: without a fork every probe reset training's noise and times
        fork = torch.random.fork_rng(devices=devices)
        try:
            with fork, torch.no_grad():
                for text in probe.texts:
                    extra = max(8, round(ref_frames * len(text) / max(len(ref_text), 1)))
                    mel, _ = model.sample(prompt, [ref_text + " " + text], ref_frames + extra, steps=nfe, seed=seed,
                                          cfg_strength=cfg_strength, sway_sampling_coef=sway_sampling_coef)
                    waves.append(mel_to_wave(mel[:, ref_frames:].float())[0].cpu())  # the new sentence only
        finally:
            model.train(was_training)
        return probe.measure(waves)

    return measure


class F5Run(NamedTuple):
    """Where :func:`train_f5` wrote: the log dir, the offline W&B run dir (None if W&B absent), CSV, checkpoints."""

    log_dir: Path
    wandb_run_dir: Path | None
    leak_csv: Path
    checkpoint_dir: Path
    updates: int = 0  # optimizer updates the run was set up for
    start_update: int = 0  # the update its checkpoint resumed from (0: a fresh run)
    done_updates: int = 0  # updates the saved checkpoint holds (less than ``updates`` when the time budget ran out)
    budget_reached: bool = False  # stopped by ``max_minutes``, saved, resumable
    mixed_precision: str = "no"  # what accelerate's autocast ran (fp16 asked on a CPU ran nothing: "no")
    warmup_updates: int = 0  # the learning rate's warm-up that ran (the default: a tenth of the updates)


class NothingToTrainError(ValueError):
    """``out_dir`` already holds the run's last update: a rerun would train nothing."""


class TrainingDivergedError(RuntimeError):
    """The training loss (or a weight about to be saved) became NaN/Inf: the run stopped at ``update`` before
    any of it was saved. ``str()`` says what was non-finite."""

    def __init__(self, update: int, detail: str) -> None:
        super().__init__(f"update {update}: {detail}")
        self.update, self.detail = update, detail


def _divergence_summary(row: Mapping[str, float]) -> str:
    """What a logged row of a non-finite step says, in a few words (total, flow loss, penalty)."""
    said = [f"{k} {row[k]:g}" for k in ("loss/total", "loss/flow", "leak/penalty", "paired/penalty", "margin/penalty")
            if k in row]
    for prefix, term in (("leak", "leak penalty"), ("paired", "paired term"), ("margin", "margin term")):
        masked = row.get(f"{prefix}/nonfinite_items", 0.0)
        if masked > 0:
            said.append(f"{masked:g} item(s) of the {term} non-finite")
    return "the training loss is not finite (" + ", ".join(said) + ")"


def _guard_saves(trainer: Any) -> None:
    """Make F5's ``trainer.save_checkpoint`` refuse weights (model or EMA) holding NaN/Inf: a diverged step
    after a finite loss must not become ``model_last.pt``; and write each checkpoint to a temporary file renamed
    over the old one: a Ctrl-C during a save had left a truncated ``model_last.pt``, the only resume point."""
    from leakloss.checks import nonfinite_tensors

    save = trainer.save_checkpoint
    accelerator_save = trainer.accelerator.save  # what F5's save_checkpoint writes each file with

    def save_atomic(obj: Any, f: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        path = Path(f)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            accelerator_save(obj, str(tmp), *args, **kwargs)  # writes on the main process only
            if tmp.exists():
                os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    trainer.accelerator.save = save_atomic

    def save_finite(update: int, last: bool = False) -> None:
        bad = nonfinite_tensors(trainer.accelerator.unwrap_model(trainer.model).state_dict())
        ema = getattr(trainer, "ema_model", None)  # only the main process keeps the EMA
        bad += [f"ema:{k}" for k in nonfinite_tensors(ema.state_dict())] if ema is not None else []
        if _all_agree(bool(bad)):
            raise TrainingDivergedError(update, f"weights hold NaN/Inf ({', '.join(bad[:3]) or 'on another rank'})")
        save(update, last=last)

    trainer.save_checkpoint = save_finite


class _BudgetReached(Exception):
    """Raised between two updates once ``max_minutes`` has passed (the state was saved just before)."""


def checkpoint_update(ckpt_dir: str | os.PathLike) -> int:
    """The update F5's ``model_last.pt`` in ``ckpt_dir`` holds (0 when there is none), read without loading the
    tensors. :class:`CheckpointReadError` when it cannot be read (a truncated save)."""
    path = Path(ckpt_dir) / "model_last.pt"
    if not path.is_file():
        return 0
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        update = ckpt.get("update", 0) if isinstance(ckpt, dict) else None
    except Exception as err:  # noqa: BLE001 - zip, pickle and OS errors all mean "cannot be read"
        raise CheckpointReadError(f"{path}: cannot be read ({type(err).__name__}); delete it to start afresh") from None
    if isinstance(update, bool) or not isinstance(update, int) or update < 0:
        raise CheckpointReadError(f"{path}: its 'update' is {update!r}, not a whole number")
    return update


def _all_agree(flag: bool) -> bool:
    """True when ``flag`` is true on any process (every rank must stop at the same update)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor([float(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _KeyCheckShim:
    """Stands in for the ``wandb`` name inside ``f5_tts.model.trainer`` during ``Trainer.__init__`` only.

    Why: F5 turns W&B off when ``wandb.api.api_key`` is empty, which is always the case offline; this says
    "a key exists" to that one check (no key is read or written) so accelerate opens an offline run.
    """

    class api:  # noqa: N801 - mirrors wandb.api
        api_key = "offline"


def _epoch_updates(dataset: Dataset, batch_size: int, batch_size_type: str, max_samples: int, seed: int,
                   processes: int, grad_accumulation_steps: int) -> int:
    """Updates per epoch of F5's dataloader on each of ``processes`` ranks (F5 counts its LR schedule the same way)."""
    if batch_size_type == "sample":
        batches = math.ceil(len(dataset) / batch_size)
    else:
        from f5_tts.model.dataset import DynamicBatchSampler
        from torch.utils.data import SequentialSampler

        batches = len(DynamicBatchSampler(SequentialSampler(dataset), batch_size, max_samples=max_samples,
                                          random_seed=seed, drop_residual=False))
    return max(1, math.ceil(math.ceil(batches / processes) / grad_accumulation_steps))


def train_f5(
    model: LeakAwareCFM,
    dataset: Dataset,
    out_dir: str | os.PathLike,
    *,
    steps: int,
    batch_size: int = 4,
    batch_size_type: str = "sample",
    max_samples: int = 32,
    learning_rate: float = 1e-4,
    num_warmup_updates: int | None = None,
    log_every: int = 5,
    grad_accumulation_steps: int = 1,
    wandb_project: str = "leakloss-f5",
    run_name: str = "leak-aware-f5",
    num_workers: int = 1,
    seed: int = 0,
    trainer_kwargs: Mapping[str, Any] | None = None,
    probe: Callable[[nn.Module], dict[str, float]] | None = None,
    probe_every: int = 100,
    wandb_online: bool | None = None,
    save_every: int | None = None,
    max_minutes: float | None = None,
) -> F5Run:
    """Run F5's own ``Trainer``: ``steps`` (>= 2) updates of ``batch_size`` items (``batch_size_type="sample"``) or of
    ``batch_size`` mel frames per GPU (``"frame"``, at most ``max_samples`` items), as F5's ``finetune_cli`` does.

    ``dataset`` yields F5 items (``{"mel_spec": [d, n], "text": str}``, e.g. :class:`WaveTextDataset`). Sample
    batches: it is cycled to one epoch of exactly ``steps`` updates on every process. Frame batches: F5's
    ``DynamicBatchSampler`` packs whole epochs, so the run takes the fewest epochs with at least ``steps``
    updates (``F5Run.updates`` says how many). ``out_dir`` should be fresh: F5 resumes from any checkpoint
    already in ``out_dir/ckpts`` (``model_last.pt``, saved every ``save_every`` updates -- None: at the end only --
    and when ``max_minutes`` of training have passed: the run then stops there, resumable by the same call;
    :class:`NothingToTrainError` when the checkpoint already holds the last update). A resumed run continues
    the leak schedule and the curves from the checkpoint's update. Leak curves every ``log_every`` updates go to W&B (online when
    ``WANDB_API_KEY`` is set or ``wandb_online=True``, else an offline run under ``out_dir/wandb``) and
    ``out_dir/leak_curves.csv``; with ``probe`` (see :func:`f5_probe`) the probe-set curves every
    ``probe_every`` updates too. Under ``accelerate launch`` every process runs this; only the main one
    writes curves and probes, and ``model.grad_accumulation_steps`` is set for the leak schedule.
    """
    import wandb  # noqa: F401  - fail early if the extra is missing
    from f5_tts.model import trainer as f5_trainer

    if batch_size_type not in ("sample", "frame"):
        raise ValueError(f"batch_size_type must be 'sample' or 'frame', got {batch_size_type!r}")
    if save_every is not None and (isinstance(save_every, bool) or not isinstance(save_every, int) or save_every < 1):
        raise ValueError(f"save_every must be a whole number >= 1 or None, got {save_every!r}")
    if max_minutes is not None and not (isinstance(max_minutes, (int, float)) and not isinstance(max_minutes, bool)
                                        and math.isfinite(max_minutes) and max_minutes > 0):
        raise ValueError(f"max_minutes must be a finite number > 0 or None, got {max_minutes!r}")
    # F5's schedule with no warm-up update starts at lr x 1e-8 and its decay scales that value: the whole run
    # trained at ~1e-8 of the rate (the warm-up is cut to updates - 1, so one update has none either)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 2:
        raise ValueError(f"steps must be a whole number >= 2 (F5's schedule needs a warm-up update), got {steps!r}")
    if num_warmup_updates is not None and (isinstance(num_warmup_updates, bool)
                                           or not isinstance(num_warmup_updates, int) or num_warmup_updates < 1):
        raise ValueError(f"num_warmup_updates must be a whole number >= 1 or None, got {num_warmup_updates!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start_update = checkpoint_update(out_dir / "ckpts")
    random.seed(seed)  # CFM draws its CFG drops from python's random
    torch.manual_seed(seed)
    online = bool(os.environ.get("WANDB_API_KEY")) if wandb_online is None else wandb_online
    env = dict(WANDB_DIR=str(out_dir), WANDB_SILENT="true") | ({} if online else dict(WANDB_MODE="offline"))
    model.grad_accumulation_steps = grad_accumulation_steps

    with _env(**env):
        real_wandb = f5_trainer.wandb
        if not online:
            f5_trainer.wandb = _KeyCheckShim
        try:
            trainer = f5_trainer.Trainer(
                model,
                epochs=1,
                learning_rate=learning_rate,
                num_warmup_updates=0,  # set below, once the epoch length is known
                save_per_updates=steps,
                keep_last_n_checkpoints=0,  # only model_last.pt
                last_per_updates=steps,
                checkpoint_path=str(out_dir / "ckpts"),
                batch_size_per_gpu=batch_size,
                batch_size_type=batch_size_type,
                max_samples=max_samples,
                grad_accumulation_steps=grad_accumulation_steps,
                logger="wandb",
                wandb_project=wandb_project,
                wandb_run_name=run_name,
                **dict(trainer_kwargs or {}),
            )
        finally:
            f5_trainer.wandb = real_wandb
        processes = trainer.accelerator.num_processes
        if batch_size_type == "sample":
            data = _Cycle(dataset, steps * batch_size * grad_accumulation_steps * processes)
            trainer.epochs, updates = 1, steps
        else:
            data = dataset
            per_epoch = _epoch_updates(dataset, batch_size, batch_size_type, max_samples, seed, processes,
                                       grad_accumulation_steps)
            trainer.epochs = math.ceil(steps / per_epoch)
            updates = trainer.epochs * per_epoch
        warmup = num_warmup_updates if num_warmup_updates is not None else max(1, updates // 10)
        # F5's LR schedule needs decay updates > 0 (it scales the warm-up by the process count itself: the
        # warm-up is in updates of each process, as ``updates`` is)
        trainer.num_warmup_updates = min(warmup, updates - 1)  # updates >= steps >= 2
        if start_update >= updates:
            raise NothingToTrainError(f"{out_dir / 'ckpts' / 'model_last.pt'} already holds update {start_update} of "
                                      f"this run's {updates}: nothing to train (another out_dir starts a new run)")
        trainer.save_per_updates = updates  # keep_last_n_checkpoints=0: no model_{update}.pt is written
        trainer.last_per_updates = min(save_every, updates) if save_every else updates
        model.resume_at(start_update)  # the leak schedule goes on from there, counted at accelerate's updates
        model.update_synced = lambda: trainer.accelerator.sync_gradients

        run = trainer.accelerator.get_tracker("wandb", unwrap=True) if trainer.logger == "wandb" else None
        run_dir = Path(run.dir).parent if run is not None and getattr(run, "dir", None) else None
        curve_log = LeakCurveLogger(
            out_dir / "leak_curves.csv", every=log_every,
            log_fn=lambda row, step: trainer.accelerator.log(row, step=step),
            grad_accumulation_steps=grad_accumulation_steps, probe=probe, probe_every=probe_every,
            is_main=trainer.accelerator.is_main_process, start_update=start_update,
        )
        handles = [model.register_forward_hook(curve_log)]
        _guard_saves(trainer)
        budget_start = monotonic()

        def stop_when_out_of_time(module: nn.Module, _args: tuple) -> None:
            # between two updates (the first forward of the next one): F5 has stepped the optimizer, the
            # scheduler and the EMA of the last one, so its own save of that update is a clean resume point
            if not module.training or not module.at_update_start():
                return
            done = module.updates_done()
            late = (monotonic() - budget_start) / 60 >= max_minutes
            if done > start_update and _all_agree(late):
                trainer.save_checkpoint(done, last=True)
                raise _BudgetReached(done)

        if max_minutes is not None:
            handles.append(model.register_forward_pre_hook(stop_when_out_of_time))
        budget_reached, done_updates = False, updates
        try:
            trainer.train(data, num_workers=num_workers, resumable_with_seed=seed)
        except _BudgetReached as stop:
            budget_reached, done_updates = True, int(stop.args[0])
            trainer.accelerator.end_training()  # close the W&B run as F5's own end of training does
        except TrainingDivergedError as err:
            trainer.accelerator.end_training()
            kept = checkpoint_update(out_dir / "ckpts")
            where = (f"{out_dir / 'ckpts' / 'model_last.pt'} still holds update {kept}" if kept
                     else "no checkpoint was written")
            raise TrainingDivergedError(err.update, f"{err.detail}: the training diverged and stopped there, before "
                                        f"saving it ({where}; {curve_log.csv_path} has the curves); lower the "
                                        "learning rate") from None
        finally:
            for handle in handles:
                handle.remove()
            model.update_synced = None  # the trainer's flag means nothing outside its loop
    ran = trainer.accelerator.mixed_precision if trainer.accelerator.native_amp else "no"
    return F5Run(out_dir, run_dir, curve_log.csv_path, out_dir / "ckpts", updates, start_update, done_updates,
                 budget_reached, ran, int(trainer.num_warmup_updates))


def read_leak_curve(path: str | os.PathLike, name: str = "leak/penalty") -> list[tuple[int, float]]:
    """``(step, value)`` points of one curve from a :class:`LeakCurveLogger` CSV."""
    with open(path, newline="") as f:
        return [(int(r["step"]), float(r["value"])) for r in csv.DictReader(f) if r["name"] == name]


def final_leak(path: str | os.PathLike, name: str = "leak/penalty", tail: float = 0.25) -> float:
    """Mean of a curve over its last ``tail`` share of points (one step's value is one random ``t``: noisy)."""
    values = [v for _, v in read_leak_curve(path, name) if math.isfinite(v)]
    if not values:
        raise ValueError(f"{path}: no finite points of {name!r}")
    n = max(1, int(len(values) * tail))
    return sum(values[-n:]) / n


def penalty_comparison(
    items: Sequence[tuple[torch.Tensor, int, str]],
    sites: Sequence[Sequence[TimedSite]],
    out_dir: str | os.PathLike,
    *,
    leak_penalty: nn.Module,
    mel_to_wave: MelToWave,
    steps: int = 200,
    leak_weight: float = 5.0,
    batch_size: int = 4,
    learning_rate: float = 3e-4,
    log_every: int = 1,
    seed: int = 0,
    probe: Callable[[nn.Module], dict[str, float]] | None = None,
    probe_every: int = 100,
    make_model: Callable[..., LeakAwareCFM] = tiny_f5,
) -> dict[str, F5Run]:
    """The same F5 fine-tuned twice through F5's ``Trainer``: ``without_penalty`` (weight 0: the leak curve is
    only monitored) and ``with_penalty``. Same seed, so both see the same batches, times and noise; only the
    auxiliary loss differs. ``items`` are ``(wave, sample_rate, text)``, ``sites[i]`` item i's sites on its
    ground-truth audio (:func:`leakloss.site_placement.place_dataset_sites`). ``make_model(seed=, leak_penalty=,
    leak_weight=, mel_to_wave=, site_lookup=)`` builds each run's model afresh (default :func:`tiny_f5`, from
    scratch; e.g. a function that loads a pretrained base's weights into a :class:`LeakAwareCFM`)."""
    by_text: dict[str, list[TimedSite]] = {}
    for (_, _, text), item_sites in zip(items, sites, strict=True):
        by_text.setdefault(text, list(item_sites))
    runs = {}
    for name, weight in (("without_penalty", 0.0), ("with_penalty", leak_weight)):
        model = make_model(seed=seed, leak_penalty=leak_penalty, leak_weight=weight, mel_to_wave=mel_to_wave,
                           site_lookup=lambda text: by_text.get(text, []))
        runs[name] = train_f5(model, WaveTextDataset(items), Path(out_dir) / name, steps=steps, batch_size=batch_size,
                              log_every=log_every, learning_rate=learning_rate, run_name=name, seed=seed,
                              probe=probe, probe_every=probe_every)
    return runs


__all__ = [
    "F5Run",
    "NothingToTrainError",
    "TrainingDivergedError",
    "checkpoint_update",
    "LeakAwareCFM",
    "LeakCurveLogger",
    "LoadReport",
    "MEL_SPEC_KWARGS",
    "WaveTextDataset",
    "devanagari_chars",
    "devanagari_vocab",
    "f5_probe",
    "final_leak",
    "penalty_comparison",
    "read_leak_curve",
    "leak_log_row",
    "merge_rank_rows",
    "site_records",
    "SiteRecord",
    "load_indicf5_checkpoint",
    "load_state",
    "sites_in_span",
    "tiny_f5",
    "train_f5",
    "vocode_items",
]
