"""Pure functions of the text-paired path-margin term (:mod:`leakloss.margin_penalty`).

A site's *margin* is ``fit_hindi - fit_nepali``: the per-frame CTC log-likelihood of its word's Hindi-ward phone path
minus that of its Nepali path, over one crop of the word's frames (:func:`leakloss.acoustic.features.evidence_from_log_probs`,
the scorer's own numbers). Positive: the audio fits the Hindi reading better. The term is a smooth hinge at 0,
``tau * softplus(margin / tau)``: a site heard the Nepali way by a clear margin costs ~0 and stops pulling, one heard
the Hindi way costs about its margin.

Shapes: n sites, c crops per site.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

#: The hinge's width in nats per frame (fixed a priori for the 2026-12-06 trial, not tuned).
MARGIN_TAU = 0.1


def margin_hinge(margins: Tensor, tau: float = MARGIN_TAU) -> Tensor:
    """``tau * softplus(margins / tau)``, elementwise: > 0, -> 0 for margins far below 0, -> ``margins`` above."""
    if not isinstance(margins, Tensor):
        raise TypeError(f"margins must be a tensor, got {type(margins).__name__}")
    _check_tau(tau)
    # threshold 40, not torch's 20: past it softplus is x itself, off by e^-20 relative at 20 (float64 sees it)
    return tau * F.softplus(margins / tau, threshold=40.0)


def _check_tau(tau: float) -> None:
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or not tau > 0:
        raise ValueError(f"tau must be a finite number > 0, got {tau!r}")


def site_margin_loss(margins: Tensor, active: Tensor, tau: float = MARGIN_TAU, crops: Tensor | None = None
                     ) -> tuple[Tensor, Tensor]:
    """``margins [n, c]``, ``active [n]`` bool -> ``(loss, per_site [n])``: each site's hinge averaged over its crops
    (``crops [n, c]`` bool: only those; default all), the loss their mean over the active sites. A site with a
    non-finite margin or no crop is inactive. An inactive site, and a crop left out, contributes exactly 0 with a
    gradient of exactly 0 (``torch.where`` selects before the hinge, so a NaN there cannot leak in); with no active
    site the loss is ``0 * (finite part of margins).sum()``: zero, with a zero gradient of the right shape.

    ``crops`` marks the crops to keep: those where both paths can be aligned (``SiteEvidence.feasible``); in the
    others a fit is a floor, not a fit, so their margin is a constant the audio cannot lower. A left-out crop's
    value, even NaN, never disables its site."""
    for name, value in (("margins", margins), ("active", active)):
        if not isinstance(value, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(value).__name__}")
    _check_tau(tau)
    if margins.dim() != 2:
        raise ValueError(f"margins must be [sites, crops], got shape {tuple(margins.shape)}")
    if active.dtype != torch.bool or active.shape != margins.shape[:1]:
        raise ValueError(f"active must be bool [{margins.shape[0]}] (one flag per site), got {active.dtype} "
                         f"{tuple(active.shape)}")
    if crops is None:
        crops = torch.ones(margins.shape, dtype=torch.bool, device=margins.device)
    elif not isinstance(crops, Tensor) or crops.dtype != torch.bool or crops.shape != margins.shape:
        raise ValueError(f"crops must be bool {list(margins.shape)} (one flag per site and crop), got "
                         f"{getattr(crops, 'dtype', type(crops).__name__)} {tuple(getattr(crops, 'shape', ()))}")
    zero = torch.zeros((), dtype=margins.dtype, device=margins.device)
    crops = crops.to(margins.device)
    active = active & (torch.isfinite(margins) | ~crops).all(-1) & crops.any(-1)
    used = crops & active[:, None]
    safe = torch.where(used, margins, zero)
    hinges = torch.where(used, margin_hinge(safe, tau), zero).sum(-1)
    per_site = torch.where(active, hinges / used.sum(-1).clamp_min(1).to(margins.dtype), zero)
    n = active.sum()
    if not bool(n > 0):
        return safe.sum() * 0.0, per_site
    return per_site.sum() / n.to(per_site.dtype), per_site
