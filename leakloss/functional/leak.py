"""Pure functions of the frame-level leak signal.

Shapes: b batch, g conv frames (5 ms), n sites.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from leakloss.checks import check_number, check_whole
from leakloss.timing import TimedSite


def at_least_fp32(x: Tensor) -> Tensor:
    """fp32 for bf16/fp16/fp32 inputs; float64 stays float64 (gradcheck)."""
    return x if x.dtype == torch.float64 else x.float()


def peak_limited(wave: Tensor) -> Tensor:
    """``wave / max(1, peak)`` (detached peak): input within full scale stays bit-for-bit as it is; louder,
    finite input is brought to full scale, so that squared moments downstream (the recognizer's own
    normalisation) cannot overflow. Any shape; NaN/Inf input is returned as it is (callers mask it)."""
    if not wave.numel():
        return wave
    peak = wave.detach().abs().amax()
    if not bool(torch.isfinite(peak)) or bool(peak <= 1):
        return wave
    return wave / peak


def at_hearing_level(wave: Tensor) -> Tensor:
    """``wave`` (any shape, one reading) scaled to peak :data:`leakloss.constants.RECOGNIZER_HEARING_PEAK` by its
    detached peak, fp32 (fp64 stays fp64): what the training signal's CTC passes hear, so that their alignment and
    word check do not move with the reading's gain. All-zero or non-finite input is returned as it is (callers say
    why it cannot be heard). The scale is taken in fp64: a denormal peak cannot overflow it."""
    from leakloss.constants import RECOGNIZER_HEARING_PEAK

    if not wave.numel():
        return wave
    peak = float(wave.detach().abs().amax().double())
    if not (peak > 0 and peak < float("inf")):
        return wave
    out = wave.double() * (RECOGNIZER_HEARING_PEAK / peak)
    return out if wave.dtype == torch.float64 else out.float()


#: seconds within which a frame centre on a site's edge (± pad) counts as inside it
EDGE_TOLERANCE_S = 1e-9


def frame_centres(n_frames: int, hop_s: float, offset_s: float = 0.0, device=None) -> Tensor:
    """``[n_frames]`` float64 centres (seconds) of frames ``hop_s`` apart, the first starting at ``offset_s``.

    float64: aligned site edges +- a pad fall exactly on frame centres (10 ms grid, 20 ms frames), and in float32
    about a quarter of first frames rounded out of their site, by where the site sat."""
    return offset_s + (torch.arange(n_frames, device=device, dtype=torch.float64) + 0.5) * hop_s


def span_frames(centres: Tensor, start: float, end: float, pad_s: float) -> Tensor:
    """Boolean mask of the ``centres`` (:func:`frame_centres`) within ``[start - pad_s, end + pad_s]``, edges
    included (to :data:`EDGE_TOLERANCE_S`): the one rule for a site's frames, at inference and in training rows."""
    return (centres >= start - pad_s - EDGE_TOLERANCE_S) & (centres <= end + pad_s + EDGE_TOLERANCE_S)


def site_masks(sites: Sequence[Sequence[TimedSite]], n_frames: int, *, hop_s: float, pad_s: float = 0.02,
               frame_lengths: Tensor | None = None, device=None) -> tuple[Tensor, list[tuple[int, TimedSite]]]:
    """Boolean ``[n, g]`` masks of each site's frames (centre within the site ± ``pad_s``, edges included) and the
    (item, site) of each row.

    ``hop_s``: seconds between frames, from the recognizer's strides
    (:meth:`leakloss.acoustic.recognizer.Recognizer.conv_hop_s`), never assumed.

    A site entirely beyond the item's valid frames gets an empty mask (and contributes nothing).
    """
    check_number(hop_s, "hop_s must be a finite number of seconds > 0", low=0.0, low_inclusive=False)
    check_number(pad_s, "pad_s must be a finite number of seconds >= 0", low=0.0)
    check_whole(n_frames, "n_frames", low=0)
    index = [(b, s) for b, item in enumerate(sites) for s in item]
    if frame_lengths is not None and len(frame_lengths) != len(sites):
        raise ValueError(f"frame_lengths must have one length per item: {len(frame_lengths)} for {len(sites)} items")
    centers = frame_centres(n_frames, hop_s, device=device)
    masks = torch.zeros(len(index), n_frames, dtype=torch.bool, device=device)
    for row, (b, s) in enumerate(index):
        m = span_frames(centers, s.start, s.end, pad_s)
        if frame_lengths is not None:
            m &= torch.arange(n_frames, device=device) < frame_lengths[b]
        masks[row] = m
    return masks, index


def _check_rows(frame_logits: Tensor, masks: Tensor, item_of_row: Tensor) -> None:
    for name, value in (("frame_logits", frame_logits), ("masks", masks), ("item_of_row", item_of_row)):
        if not isinstance(value, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(value).__name__}")
    if not frame_logits.is_floating_point():
        raise TypeError(f"frame_logits must be a float tensor, got {frame_logits.dtype}")
    if masks.dtype != torch.bool:
        raise TypeError(f"masks must be a bool tensor (site_masks), got {masks.dtype}")
    if item_of_row.dtype == torch.bool or item_of_row.is_floating_point() or item_of_row.is_complex():
        raise TypeError(f"item_of_row must be an integer tensor of item ids, got {item_of_row.dtype}")
    if frame_logits.dim() != 2 or masks.dim() != 2 or masks.shape[1] != frame_logits.shape[1]:
        raise ValueError(f"masks {tuple(masks.shape)} must be [sites, {frame_logits.shape[-1]}] for frame_logits "
                         f"{tuple(frame_logits.shape)} [batch, frames]")
    if item_of_row.shape != (masks.shape[0],):
        raise ValueError(f"item_of_row must be [{masks.shape[0]}] (one item per mask row), got {tuple(item_of_row.shape)}")
    if item_of_row.numel() and (int(item_of_row.min()) < 0 or int(item_of_row.max()) >= frame_logits.shape[0]):
        raise ValueError(f"item_of_row must lie in [0, {frame_logits.shape[0]}), got {item_of_row.tolist()}")


def pooled_site_logits(frame_logits: Tensor, masks: Tensor, item_of_row: Tensor, temperature: float = 4.0) -> Tensor:
    """``frame_logits [b, g]``, ``masks [n, g]``, ``item_of_row [n]`` -> ``[n]`` soft-max pooled logits (fp32).

    Rows with an empty mask get a large negative logit (probability ~0, gradient 0), never NaN. NaN frame
    logits count as outside the mask; +-Inf ones are clamped to ``+-LOGIT_BOUND``.

    Raises:
        ValueError: ``masks`` not ``[n, g]`` for ``frame_logits [b, g]``, or ``item_of_row`` not ``[n]`` ids in ``[0, b)``.
    """
    from leakloss.checks import check_number
    _check_rows(frame_logits, masks, item_of_row)
    check_number(temperature, "temperature must be a finite number > 0", low=0.0, low_inclusive=False)
    return _pooled(frame_logits, masks, item_of_row, temperature)


#: |frame logit| beyond which nothing is learned (a real head gives tens): +-Inf is clamped here, NaN is
#: a frame with no evidence (pooled as if masked out), so that one bad frame never makes the loss NaN/Inf
LOGIT_BOUND = 1e3


def _pooled(frame_logits: Tensor, masks: Tensor, item_of_row: Tensor, temperature: float = 4.0) -> Tensor:
    x = at_least_fp32(frame_logits)[item_of_row]  # [n, g]
    masks = masks & ~torch.isnan(x)
    x = torch.nan_to_num(x, nan=0.0, posinf=LOGIT_BOUND, neginf=-LOGIT_BOUND).clamp(-LOGIT_BOUND, LOGIT_BOUND)
    x = x * temperature
    x = x.masked_fill(~masks, -(LOGIT_BOUND * temperature + 1e4))  # below every real frame at any temperature
    count = masks.sum(-1).clamp(min=1).to(x.dtype)
    pooled = (torch.logsumexp(x, -1) - torch.log(count)) / temperature
    return torch.where(masks.any(-1), pooled, torch.full_like(pooled, -1e4))  # p ~ 0 at any temperature


def active_sites(frame_logits: Tensor, masks: Tensor, item_of_row: Tensor) -> Tensor:
    """``[n]`` bool: the sites with at least one frame that is in their mask and not NaN (a NaN frame is no
    evidence, :func:`pooled_site_logits`; a site of NaN frames only is no site, not a confident "no leak")."""
    return (masks & ~torch.isnan(frame_logits.detach()[item_of_row])).any(-1)


def leak_penalty_from_logits(frame_logits: Tensor, masks: Tensor, item_of_row: Tensor,
                             active: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The penalty (scalar) and the per-site leak probabilities ``[n]``.

    The penalty is the mean over active sites of ``-log(1 - p) = softplus(pooled logit)``: the binary
    cross-entropy towards "no leak". Unlike the mean probability it does not saturate, so a site the
    head is sure about (p ~ 1, where the signal matters most) still gets a gradient of ~1 per logit.
    With no active site the penalty is ``0 * frame_logits.sum()`` over the finite logits: zero, finite (NaN
    logits included), and a zero gradient of the right shape.
    """
    _check_rows(frame_logits, masks, item_of_row)
    if active is None:  # a caller that needs it too passes its own (one computation, not two)
        active = active_sites(frame_logits, masks, item_of_row)
    elif not isinstance(active, Tensor) or active.dtype != torch.bool or active.shape != (masks.shape[0],):
        # an integer 0/1 tensor would index sites, not select them: a wrong penalty, silently
        raise TypeError(f"active must be a bool tensor [{masks.shape[0]}] (active_sites), got "
                        f"{getattr(active, 'dtype', type(active).__name__)} {tuple(getattr(active, 'shape', ()))}")
    if not bool(active.any()):
        x = at_least_fp32(frame_logits)
        finite = torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype, device=x.device))
        return finite.sum() * 0.0, x.new_zeros(masks.shape[0])
    logits = _pooled(frame_logits, masks, item_of_row)  # checked above: one host sync per call, not two
    return torch.nn.functional.softplus(logits[active]).mean(), torch.sigmoid(logits)  # finite: _pooled bounds


def mask_nonfinite_items(x: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``x [b, t, ...]`` (``lengths [b]`` valid steps along dim 1) -> (``x`` with every non-finite item zeroed,
    ``bad [b]`` bool: an item with any NaN/Inf among its valid steps).

    Non-finite values in the padding (beyond ``lengths``) are zeroed too without making the item bad.
    ``torch.where`` selects before any arithmetic, so the graph downstream never sees a non-finite value and
    the gradient reaching ``x`` is exactly 0 at every masked position (``NaN * 0`` would be NaN).
    """
    finite = torch.isfinite(x)
    step_ok = finite.flatten(2).all(-1) if x.dim() > 2 else finite  # [b, t]
    if lengths is not None:
        valid = torch.arange(x.shape[1], device=x.device)[None, :] < lengths.to(x.device)[:, None]
        bad = (~step_ok & valid).any(-1)
    else:
        bad = (~step_ok).any(-1)
    keep = finite & ~bad.reshape(-1, *([1] * (x.dim() - 1)))
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device)), bad


def item_rms(waves: Tensor, lengths: Tensor | None = None) -> Tensor:
    """``[b, t]`` -> ``[b]`` root mean square of the mean-removed valid samples (fp32/fp64, detached).

    Taken on each item divided by ``max(1, peak)``, as in :func:`rms_normalize`, so that loud but finite
    input (up to the dtype's largest value) gives a finite RMS, never an overflowed square."""
    with torch.no_grad():
        x = at_least_fp32(waves)
        t = x.shape[-1]
        if lengths is None:
            lengths = torch.full((x.shape[0],), t, device=x.device)
        mask = torch.arange(t, device=x.device)[None, :] < lengths.to(x.device)[:, None]
        x = torch.where(mask, x, x.new_zeros(()))  # selected, not multiplied: NaN in the padding is not the item's
        n = lengths.to(x.device).clamp(min=1).to(x.dtype)
        m = (x * mask).abs().amax(-1).clamp(min=1.0) if x.numel() else x.new_ones(x.shape[0])
        scaled = x / m[:, None]
        mean = (scaled * mask).sum(-1) / n
        return ((((scaled - mean[:, None]) * mask) ** 2).sum(-1) / n).clamp(min=0).sqrt() * m


def rms_normalize(waves: Tensor, lengths: Tensor | None = None, rms: Tensor | None = None,
                  mean: Tensor | None = None, eps: float = 1e-7) -> Tensor:
    """``[b, t]`` -> ``[b, t]`` fp32: each item minus its mean, divided by the RMS of what is left (its std),
    both over its valid samples (or ``mean [b]`` / ``rms [b]`` when given: the cropped penalty passes them
    pooled over an utterance's crops, :func:`leakloss.functional.crop.pooled_moments`), zero beyond its
    length; with gradient (through the computed mean and RMS too).

    The leak penalty's input normalisation, as the recognizer's own (per-utterance zero mean, unit variance):
    a DC offset must not change the score, or a waveform model descending the penalty (or an RL policy
    climbing the reward) learns to add one. Loud input does not overflow: moments are taken on the item
    divided by ``max(1, peak)`` (detached), which leaves input up to full scale bit-for-bit as it was.
    """
    x = at_least_fp32(waves)
    t = x.shape[-1]
    if lengths is None:
        lengths = torch.full((x.shape[0],), t, device=x.device)
    valid = torch.arange(t, device=x.device)[None, :] < lengths.to(x.device)[:, None]
    x = torch.where(valid, x, x.new_zeros(()))  # selected, not multiplied: NaN in the padding is not the item's
    mask = valid.to(x.dtype)
    n = lengths.to(x.device).clamp(min=1).to(x.dtype)
    # (x / m)^2 cannot overflow; m = 1 for anything within full scale
    m = (x.detach() * mask).abs().amax(-1).clamp(min=1.0) if x.numel() else x.new_ones(x.shape[0])
    scaled = x / m[:, None]
    mu = (scaled * mask).sum(-1) / n if mean is None else mean.to(x) / m
    if rms is None:  # the mean square, not its root: sqrt(0) has no gradient
        square = (((scaled - mu[:, None]) * mask) ** 2).sum(-1) / n
    else:
        square = (rms.to(x) / m) ** 2
    # eps / m^2 underflows to 0 for loud input (m ~ 1e20 in fp32): a constant item would then give 0 / 0
    floor = (eps / m[:, None] ** 2).clamp(min=torch.finfo(x.dtype).tiny)
    return (scaled - mu[:, None]) * mask / torch.sqrt(square[:, None] + floor)


def quiet_gradient_scale(waves: Tensor, lengths: Tensor | None = None, rms_floor: float = 0.01) -> Tensor:
    """``[b]`` factors ``min(1, rms / rms_floor)`` (detached) that bound the penalty's gradient on quiet input.

    The penalty normalises each item to unit RMS and the conv stack LayerNorms each frame, so the
    penalty is scale-invariant down to ~1e-4 of unit amplitude and its gradient grows as ``1 / rms``
    (near-silence: 1e4-fold speech's). Multiplying an item's gradient by this factor keeps its direction
    and caps its size at what the same waveform gets at ``rms_floor``. A floor on the std in the forward
    normalisation alone does not do it: the conv LayerNorms re-normalise the quiet frames.
    """
    return (item_rms(waves, lengths) / rms_floor).clamp(max=1.0)


def scale_gradient(x: Tensor, factor: Tensor) -> Tensor:
    """Identity on ``x [b, ...]`` in the forward (bit-exact); the backward multiplies item b's gradient by
    ``factor[b]``."""
    f = factor.to(x.dtype).reshape(-1, *([1] * (x.dim() - 1)))
    return x.detach() + (x - x.detach()) * f
