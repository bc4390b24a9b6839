"""Pure functions of the reference-paired leak term: how differently a recognizer hears generated audio and the
ground truth of the same utterance, inside each contrast site's window.

DMOSpeech 2 fine-tunes with KL(real || generated) of CTC posteriors over whole utterances; here the divergence
is taken only where a contrast is (a site's frames), so a dropped schwa or a Hindi vowel costs and the rest of
the utterance (a different but correct voice quality elsewhere) does not. The reference posteriors are a
target: detached.

Shapes: b batch, f recognizer frames, v vocabulary, k sites per item (padded; ``active`` says which are real).
"""

from __future__ import annotations

import torch
from torch import Tensor

#: Log-probabilities below it (nats) are read as it: a saturated log-softmax's -inf (or -1e30) would make
#: ``p_ref * (log p_ref - log p_gen)`` inf or NaN; e^-100 is far below any probability that matters.
LOG_PROB_FLOOR = -100.0


def window_masks(starts: Tensor, ends: Tensor, n_frames: int) -> Tensor:
    """``starts [b, k]``, ``ends [b, k]`` frame indices (end exclusive) -> ``[b, k, n_frames]`` bool windows.
    A window reaching past the frames is cut there; ``end <= start`` is empty."""
    for name, value in (("starts", starts), ("ends", ends)):
        if not isinstance(value, Tensor) or value.is_floating_point() or value.is_complex() \
                or value.dtype == torch.bool:
            raise TypeError(f"{name} must be an integer tensor of frame indices, got "
                            f"{value.dtype if isinstance(value, Tensor) else type(value).__name__}")
    if starts.dim() != 2 or starts.shape != ends.shape:
        raise ValueError(f"starts {tuple(starts.shape)} and ends {tuple(ends.shape)} must both be [batch, sites]")
    frames = torch.arange(n_frames, device=starts.device)
    return (frames >= starts[..., None]) & (frames < ends.to(starts.device)[..., None])


def _finite_log_probs(x: Tensor) -> tuple[Tensor, Tensor]:
    """``[b, f, v]`` -> (log-probabilities with NaN/+Inf zeroed and every value floored at
    :data:`LOG_PROB_FLOOR` (a finite one keeps its gradient through the floor), ``bad [b, f]``: frames holding NaN/+Inf). ``torch.where`` selects before any
    arithmetic, so the gradient at a bad value is exactly 0; -Inf (probability 0) is a legitimate value."""
    bad_value = torch.isnan(x) | (x == float("inf"))
    x = torch.where(bad_value, torch.zeros((), dtype=x.dtype, device=x.device), x)
    # the floor is a value, not a wall: a finite log-probability under it keeps its gradient (a clamp gave 0, so a
    # generated posterior that put the reference's token under e^-100 was never pulled back); -inf gets none
    floored = x.clamp(min=LOG_PROB_FLOOR)
    return torch.where(torch.isfinite(x), floored.detach() + (x - x.detach()), floored), bad_value.any(-1)


def frame_kl(log_probs_gen: Tensor, log_probs_ref: Tensor) -> Tensor:
    """``KL(ref || gen)`` of each frame, ``[b, f, v]`` twice -> ``[b, f]``, the reference detached; finite
    log-probabilities only (:func:`paired_site_divergence` cleans them). Rounding below 0 reads as 0."""
    ref = log_probs_ref.detach()
    return (ref.exp() * (ref - log_probs_gen)).sum(-1).clamp(min=0.0)


def _check(log_probs_gen: Tensor, log_probs_ref: Tensor, windows: Tensor, active: Tensor) -> None:
    for name, value in (("log_probs_gen", log_probs_gen), ("log_probs_ref", log_probs_ref)):
        if not isinstance(value, Tensor) or not value.is_floating_point():
            raise TypeError(f"{name} must be a float tensor [batch, frames, vocab], got "
                            f"{value.dtype if isinstance(value, Tensor) else type(value).__name__}")
    if log_probs_gen.dim() != 3 or log_probs_gen.shape != log_probs_ref.shape:
        raise ValueError(f"log_probs_gen {tuple(log_probs_gen.shape)} and log_probs_ref {tuple(log_probs_ref.shape)} "
                         "must both be [batch, frames, vocab] (frame-aligned audio of the same length)")
    b, f, _ = log_probs_gen.shape
    if windows.dtype != torch.bool or windows.dim() != 3 or windows.shape[0] != b or windows.shape[2] != f:
        raise ValueError(f"site_windows must be bool [{b}, sites, {f}], got {windows.dtype} {tuple(windows.shape)}")
    if not isinstance(active, Tensor) or active.dtype != torch.bool or active.shape != windows.shape[:2]:
        raise ValueError(f"active must be bool {tuple(windows.shape[:2])} (one flag per site), got "
                         f"{getattr(active, 'dtype', type(active).__name__)} {tuple(getattr(active, 'shape', ()))}")


def paired_site_divergence(log_probs_gen: Tensor, log_probs_ref: Tensor,
                           site_windows: Tensor | tuple[Tensor, Tensor],
                           active: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The reference-paired leak term: ``(loss, per_site [b, k], scored [b, k])``.

    ``per_site[i, j]`` is ``KL(ref || gen)`` of the recognizer's frame posteriors averaged over the frames of
    site j's window in item i (``site_windows [b, k, f]`` bool, or ``(starts, ends)`` ``[b, k]`` frame indices,
    end exclusive); ``loss`` is its mean over the scored sites: active (``active [b, k]``, default all),
    with at least one frame, and no NaN/+Inf among the window's frames of either input. ``log_probs_*``:
    ``[b, f, v]`` log-posteriors (log-softmax) of the same recognizer on generated audio and on the ground
    truth of the same utterance, frame-aligned. The reference is a target: no gradient reaches it.

    Never NaN: an unscored site contributes exactly 0 with a gradient of exactly 0 (a non-finite frame is
    replaced before any arithmetic); with no scored site the loss is ``0 * (finite part of log_probs_gen).sum()``,
    zero with a zero gradient of the right shape. -Inf log-probabilities are floored at :data:`LOG_PROB_FLOOR`.

    Raises:
        TypeError / ValueError: inputs of the wrong type or shape (a caller bug).
    """
    if isinstance(site_windows, tuple):
        if len(site_windows) != 2:
            raise ValueError("site_windows as a tuple must be (starts, ends)")
        site_windows = window_masks(*site_windows, log_probs_gen.shape[1] if log_probs_gen.dim() == 3 else 0)
    if not isinstance(site_windows, Tensor):
        raise TypeError(f"site_windows must be a bool tensor [batch, sites, frames] or (starts, ends), got "
                        f"{type(site_windows).__name__}")
    if active is None:
        active = torch.ones(site_windows.shape[:2], dtype=torch.bool, device=site_windows.device)
    _check(log_probs_gen, log_probs_ref, site_windows, active)
    gen, bad_gen = _finite_log_probs(log_probs_gen if log_probs_gen.dtype == torch.float64 else log_probs_gen.float())
    ref, bad_ref = _finite_log_probs(log_probs_ref.detach().to(gen.dtype))
    windows = site_windows.to(gen.device)
    bad_frames = (bad_gen | bad_ref)[:, None, :]  # [b, 1, f]
    counts = windows.sum(-1)  # [b, k]
    scored = active.to(gen.device) & (counts > 0) & ~(windows & bad_frames).any(-1)
    kl = frame_kl(gen, ref)  # [b, f], finite
    summed = (kl[:, None, :] * windows.to(kl.dtype)).sum(-1)  # [b, k]
    per_site = torch.where(scored, summed / counts.clamp(min=1).to(kl.dtype),
                           torch.zeros((), dtype=kl.dtype, device=kl.device))
    n_scored = scored.sum()
    if not bool(n_scored > 0):
        return gen.sum() * 0.0, per_site, scored
    return per_site.sum() / n_scored.to(kl.dtype), per_site, scored
