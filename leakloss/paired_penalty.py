"""The reference-paired leak term: how differently a frozen phone recognizer hears generated audio and the
ground-truth audio of the same utterance, inside each contrast site's window.

Contract (unlike :class:`leakloss.penalty.LeakPenalty`, which judges generated audio alone): the caller must hold
the **ground-truth audio of the same utterance**, frame-aligned with the generated audio (same length, same
timing: F5's clean-mel estimate ``x1_hat`` and the training item it infills, both vocoded). The sites are placed
on that ground truth (seconds from its start). Where the ground truth is not at hand (RL, inference-time
reranking), use the reference-free :class:`~leakloss.penalty.LeakPenalty` or :func:`leakloss.reward.leak_reward`.

:class:`PairedPosteriorPenalty` runs the recognizer (default ``wb``: a CTC phone head on multilingual Whisper
base's encoder; any recognizer by name: a config change) on both, and returns ``(loss, parts)``: the
mean over the active sites of ``KL(ref || gen)`` of the frame posteriors averaged over each site's window
(:func:`leakloss.functional.paired.paired_site_divergence`), and detached parts for logging. The reference
side runs without gradient (it is a target); no parameter of the recognizer receives one; the generated wave
does, through the recognizer's whole path (Whisper: log-mel, encoder, head).

Shapes: b batch, t samples (16 kHz), f recognizer frames, v vocabulary, n sites (all items, flattened).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from leakloss.frozen import FrozenScorer
from leakloss.functional.leak import (
    at_least_fp32,
    mask_nonfinite_items,
    quiet_gradient_scale,
    scale_gradient,
    site_masks,
)
from leakloss.functional.paired import paired_site_divergence
from leakloss.penalty import QUIET_RMS, PenaltyInputError, check_lengths, check_site_lists
from leakloss.schema import KINDS
from leakloss.timing import TimedSite

#: The recognizer the paired term hears with unless told otherwise (``leak.paired_recognizer`` in finetune-f5):
#: wb, the signal's recognizer (multilingual Whisper base, own length), as the reference-free head's.
DEFAULT_PAIRED_RECOGNIZER = "wb"


class PairedParts(NamedTuple):
    """Detached parts of the paired term, for logging."""

    penalty: Tensor  # scalar: mean site divergence (nats per frame)
    per_kind: dict  # "deletion"/"quality" -> scalar mean site divergence
    per_contrast: dict  # e.g. "ʌ->∅" -> scalar
    active_sites: Tensor  # number of sites scored (frames in a finite item)
    site_divergences: Tensor  # [n] KL(ref || gen) of each site, in the order of the flattened sites; 0 if inactive
    site_active: Tensor  # [n] bool
    nonfinite_items: Tensor  # pairs masked out for NaN/Inf in the generated or the reference audio
    quiet_items: Tensor  # items quieter than quiet_rms, whose gradient was scaled down
    frame_counts: Tensor  # [b] valid recognizer frames of each item (0 for a masked item)


def peak_limited_items(waves: Tensor) -> Tensor:
    """``[b, t]`` -> each item divided by ``max(1, its peak)`` (detached): within full scale bit-for-bit as it
    is (what the recognizer was trained on), louder finite audio brought to full scale, one item at a time."""
    if not waves.numel():
        return waves
    peak = waves.detach().abs().amax(-1, keepdim=True).clamp(min=1.0)
    return waves / peak


class PairedPosteriorPenalty(FrozenScorer):
    """``forward(waves, wave_lengths, ref_waves, sites) -> (loss, PairedParts)``.

    ``waves [b, t]``: generated audio (16 kHz, with gradient); ``ref_waves [b, t]``: the ground truth of the
    same utterances, frame-aligned with it (same length; its gradient is never taken); ``wave_lengths [b]``:
    valid samples of each pair (both sides); ``sites``: one list of :class:`TimedSite` per item, in seconds on
    the ground truth. A site's window is the recognizer frames whose centre lies within ``pad_s`` of it.

    Bad input never poisons the batch (each rule is tested):

    - **Non-finite input**: a pair with NaN/Inf among the valid samples of either side is masked out by
      ``torch.where`` before any arithmetic: zero contribution, a gradient of exactly 0, its sites inactive,
      counted in ``parts.nonfinite_items``.
    - **Near-silence**: the recognizer's log-mel makes the gradient grow as 1 / amplitude; below ``quiet_rms``
      an item's gradient is multiplied by ``rms / quiet_rms`` (same direction; the loss is unchanged), counted in
      ``parts.quiet_items``. Louder than full scale: each item is brought to full scale (detached factor).
    - **Short input**: 0 samples or a site outside the audio: no frames, the site is inactive, zero contribution.
    - Waves not ``[b, t]`` float, ``ref_waves`` of another shape, lengths outside ``[0, t]``, sites not one list
      of TimedSite per item: :class:`~leakloss.penalty.PenaltyInputError`.
    """

    def __init__(self, recognizer: nn.Module, pad_s: float = 0.02, quiet_rms: float = QUIET_RMS) -> None:
        from leakloss.checks import check_number

        check_number(pad_s, "pad_s must be a finite number of seconds >= 0", low=0.0)
        check_number(quiet_rms, "quiet_rms must be a finite number > 0", low=0.0, low_inclusive=False)
        super().__init__()
        self.recognizer = recognizer
        self.pad_s, self.quiet_rms = float(pad_s), float(quiet_rms)
        self.freeze()

    @classmethod
    def load(cls, recognizer: str = DEFAULT_PAIRED_RECOGNIZER, device: str | torch.device = "cpu",
             **kwargs) -> PairedPosteriorPenalty:
        """The paired term on a recognizer by name (``w``, ``wb``, ``a``, a folder; see
        :meth:`leakloss.acoustic.recognizer.Recognizer.load`, whose errors it raises)."""
        from leakloss.acoustic.recognizer import Recognizer

        return cls(Recognizer.load(recognizer, device=device), **kwargs).to(device)

    @property
    def hop_s(self) -> float:
        """Seconds between the recognizer's output frames (20 ms for Whisper heads)."""
        return 1.0 / float(self.recognizer.frame_rate)

    def log_probs(self, waves: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """``[b, t]`` (finite, peak-limited) -> (``log_probs [b, f, v]`` fp32, valid frames ``[b]``)."""
        # a conv front end needs a few frames of input; the valid lengths (and so the frames) stay the items' own
        shortest = 2 * int(getattr(self.recognizer, "samples_per_frame", 320))
        if waves.shape[-1] < shortest:
            waves = nn.functional.pad(waves, (0, shortest - waves.shape[-1]))
        # cuDNN's LSTM backward refuses a module in eval mode (the frozen Whisper head): the plain kernels take it
        no_cudnn = waves.is_cuda and torch.is_grad_enabled() and waves.requires_grad
        with torch.backends.cudnn.flags(enabled=not no_cudnn):
            # an item shorter than that runs as its zeros up to it (a wav2vec2 stack fails on 0 frames); its
            # valid frames are those of its own length (none)
            log_probs, frames = self.recognizer(waves, lengths.clamp(min=shortest))
        own = torch.as_tensor(self.recognizer.frame_lengths(lengths), device=frames.device)
        frames = torch.minimum(frames, own).to(log_probs.device)
        return log_probs.float() if log_probs.dtype != torch.float64 else log_probs, frames

    def forward(self, waves: Tensor, wave_lengths: Tensor | None = None, ref_waves: Tensor | None = None,
                sites: Sequence[Sequence[TimedSite]] = ()) -> tuple[Tensor, PairedParts]:
        self.freeze()
        waves, ref_waves, lengths = self._checked(waves, wave_lengths, ref_waves, sites)
        b = waves.shape[0]
        waves, bad_gen = mask_nonfinite_items(waves, lengths)
        ref_waves, bad_ref = mask_nonfinite_items(ref_waves.detach(), lengths)
        bad = bad_gen | bad_ref
        zero = torch.zeros((), dtype=waves.dtype, device=waves.device)
        waves = torch.where(bad[:, None], zero, waves)  # a pair whose reference is bad is out too
        ref_waves = torch.where(bad[:, None], zero.to(ref_waves.dtype), ref_waves)
        quiet = quiet_gradient_scale(waves, lengths, self.quiet_rms)
        waves = at_least_fp32(waves)  # before the gradient scale: a quiet fp16 item's gradient overflows fp16
        if waves.requires_grad:
            waves = scale_gradient(waves, quiet)
        valid = torch.arange(waves.shape[-1], device=waves.device)[None, :] < lengths[:, None]
        waves = peak_limited_items(waves * valid)
        ref_waves = peak_limited_items(at_least_fp32(ref_waves) * valid)
        if b == 0:
            log_gen = waves.new_zeros(0, 0, 1)
            log_ref, frames = log_gen, torch.zeros(0, dtype=torch.long, device=waves.device)
        else:
            log_gen, frames = self.log_probs(waves, lengths)
            with torch.no_grad():
                log_ref, _ = self.log_probs(ref_waves, lengths)
        frames = torch.where(bad.to(frames.device), torch.zeros_like(frames), frames)
        windows, active, index = self._windows(sites, log_gen.shape[1], frames, log_gen.device)
        loss, per_site, scored = paired_site_divergence(log_gen, log_ref.to(log_gen.dtype), windows, active)
        if waves.requires_grad and not loss.requires_grad:  # no frame at all: a zero still on the input's graph
            loss = loss + waves.sum() * 0
        flat_active = scored[active]
        flat = per_site[active].detach()
        parts = self._parts(loss, flat, flat_active, index, frames)
        return loss, parts._replace(nonfinite_items=bad.sum().detach(),
                                    quiet_items=((quiet < 1) & ~bad & (lengths > 0)).sum().detach())  # 0 samples: not quiet

    def _checked(self, waves, wave_lengths, ref_waves, sites) -> tuple[Tensor, Tensor, Tensor]:
        for name, value in (("waves", waves), ("ref_waves", ref_waves)):
            if not isinstance(value, Tensor):
                raise PenaltyInputError(f"{name} must be a tensor [batch, samples], got {type(value).__name__}"
                                        + (" (the paired term needs the ground-truth audio of the same utterance)"
                                           if name == "ref_waves" and value is None else ""))
            if value.dim() != 2:
                raise PenaltyInputError(f"{name} must be [batch, samples], got shape {tuple(value.shape)}")
            if not value.is_floating_point():
                raise PenaltyInputError(f"{name} must be real float samples, got dtype {value.dtype} "
                                        "(int16 PCM: divide by 32768)")
        if ref_waves.shape != waves.shape:
            raise PenaltyInputError(f"ref_waves {tuple(ref_waves.shape)} must be frame-aligned with waves "
                                    f"{tuple(waves.shape)}: the ground truth of the same utterances, same length")
        b, t = waves.shape
        check_site_lists(sites, b)
        if wave_lengths is None:
            lengths = torch.full((b,), t, dtype=torch.long, device=waves.device)
        else:
            lengths = check_lengths(wave_lengths, b, t, "wave_lengths", waves.device)
        return waves, ref_waves.to(waves.device), lengths

    def _windows(self, sites: Sequence[Sequence[TimedSite]], n_frames: int, frames: Tensor,
                 device: torch.device) -> tuple[Tensor, Tensor, list[tuple[int, TimedSite]]]:
        """Site windows ``[b, k, f]`` (k: most sites of an item), ``active [b, k]`` (a real site) and the flat
        ``(item, site)`` index, in the order of ``active``'s True entries."""
        masks, index = site_masks(sites, n_frames, hop_s=self.hop_s, pad_s=self.pad_s, frame_lengths=frames,
                                  device=device)
        b = len(sites)
        k = max((len(s) for s in sites), default=0)
        windows = torch.zeros(b, k, n_frames, dtype=torch.bool, device=device)
        active = torch.zeros(b, k, dtype=torch.bool, device=device)
        slot = [0] * b
        for row, (item, _) in enumerate(index):
            windows[item, slot[item]] = masks[row]
            active[item, slot[item]] = True
            slot[item] += 1
        return windows, active, index

    @staticmethod
    def _parts(loss: Tensor, divergences: Tensor, active: Tensor, index: list[tuple[int, TimedSite]],
               frames: Tensor) -> PairedParts:
        def mean_where(keep: list[bool]) -> Tensor:
            sel = torch.tensor(keep, dtype=torch.bool, device=divergences.device) & active
            return divergences[sel].mean().detach() if bool(sel.any()) else divergences.new_zeros(())

        per_kind = {k: mean_where([s.kind == k for _, s in index]) for k in KINDS}
        per_contrast = {c: mean_where([s.contrast == c for _, s in index]) for c in sorted({s.contrast for _, s in index})}
        zero = active.sum().detach() * 0
        return PairedParts(loss.detach(), per_kind, per_contrast, active.sum().detach(), divergences.detach(),
                           active.detach(), zero, zero, frames.detach())
