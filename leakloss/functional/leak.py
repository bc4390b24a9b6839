"""Pure functions of the frame-level leak signal.

Shapes: b batch, g conv frames (5 ms), n sites.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from leakloss.timing import TimedSite

def _at_least_fp32(x: Tensor) -> Tensor:
    """fp32 for bf16/fp16/fp32 inputs; float64 stays float64 (gradcheck)."""
    return x if x.dtype == torch.float64 else x.float()


def site_masks(sites: Sequence[Sequence[TimedSite]], n_frames: int, *, hop_s: float, pad_s: float = 0.02,
               frame_lengths: Tensor | None = None, device=None) -> tuple[Tensor, list[tuple[int, TimedSite]]]:
    """Boolean ``[n, g]`` masks of each site's frames (± ``pad_s``) and the (item, site) of each row.

    ``hop_s``: seconds between frames, from the recognizer's strides
    (:meth:`leakloss.acoustic.recognizer.Recognizer.conv_hop_s`), never assumed.

    A site entirely beyond the item's valid frames gets an empty mask (and contributes nothing).
    """
    index = [(b, s) for b, item in enumerate(sites) for s in item]
    centers = (torch.arange(n_frames, device=device, dtype=torch.float32) + 0.5) * hop_s
    masks = torch.zeros(len(index), n_frames, dtype=torch.bool, device=device)
    for row, (b, s) in enumerate(index):
        m = (centers >= s.start - pad_s) & (centers <= s.end + pad_s)
        if frame_lengths is not None:
            m &= torch.arange(n_frames, device=device) < frame_lengths[b]
        masks[row] = m
    return masks, index


def pooled_site_logits(frame_logits: Tensor, masks: Tensor, item_of_row: Tensor, temperature: float = 4.0) -> Tensor:
    """``frame_logits [b, g]``, ``masks [n, g]``, ``item_of_row [n]`` -> ``[n]`` soft-max pooled logits (fp32).

    Rows with an empty mask get a large negative logit (probability ~0, gradient 0), never NaN.
    """
    x = _at_least_fp32(frame_logits)[item_of_row] * temperature  # [n, g]
    x = x.masked_fill(~masks, -1e4)
    count = masks.sum(-1).clamp(min=1).to(x.dtype)
    pooled = (torch.logsumexp(x, -1) - torch.log(count)) / temperature
    return torch.where(masks.any(-1), pooled, torch.full_like(pooled, -1e4 / temperature))


def leak_penalty_from_logits(frame_logits: Tensor, masks: Tensor, item_of_row: Tensor) -> tuple[Tensor, Tensor]:
    """The penalty (scalar) and the per-site leak probabilities ``[n]``.

    The penalty is the mean over active sites of ``-log(1 - p) = softplus(pooled logit)``: the binary
    cross-entropy towards "no leak". Unlike the mean probability it does not saturate, so a site the
    head is sure about (p ~ 1, where the signal matters most) still gets a gradient of ~1 per logit.
    With no active site the penalty is ``0 * frame_logits.sum()``: zero, finite, and a zero gradient
    of the right shape.
    """
    active = masks.any(-1)
    if not bool(active.any()):
        x = _at_least_fp32(frame_logits)
        return x.sum() * 0.0, x.new_zeros(masks.shape[0])
    logits = pooled_site_logits(frame_logits, masks, item_of_row)
    return torch.nn.functional.softplus(logits[active]).mean(), torch.sigmoid(logits)
