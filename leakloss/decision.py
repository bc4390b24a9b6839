"""The gated decision rule (seed: "What decides a flag?") as pure functions on the 57 features.

Per site and reference, with features from recognizers A and B:

- the reference qualifies at the site (on both recognizers): it prefers the Nepali path in every
  crop (reference margin max < 0), the Nepali vowel is clearly present (reference Nepali-vowel peak
  log emission above -1.5) — otherwise the reference is dropped for that site;
- the gates pass (on both recognizers): the reference prefers Nepali, the query's margin is positive
  in every crop (query margin min > 0), and the query carries the Hindi realisation
  (:func:`hindi_realised`: the Hindi vowel fires for a quality site; the Nepali vowel is not clearly
  present for a deletion site);
- head score >= flag threshold and gates pass -> ``flagged``; score < no-change threshold ->
  ``no_change``; otherwise ``uncertain``;
- across references every qualified reference must agree, else ``uncertain``; none qualified ->
  ``unscored``. A word is flagged if any of its sites is.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from leakloss.acoustic.features import FEATURE_NAMES
from leakloss.checks import check_number
from leakloss.schema import Decision, SiteDecision

REFERENCE_VOWEL_LOG = -1.5
HINDI_PRESENT_LOG = -2.3  # log(0.1)
_I = {name: i for i, name in enumerate(FEATURE_NAMES)}



def reference_qualifies(features: Tensor) -> Tensor:
    """``[..., 57]`` -> ``[...]`` bool: the reference is a trusted Nepali reading at this site."""
    return (features[..., _I["margin_reference_max"]] < 0) & (
        features[..., _I["reference_nepali_peak"]] > REFERENCE_VOWEL_LOG)


def hindi_realised(features: Tensor) -> Tensor:
    """``[..., 57]`` -> ``[...]`` bool: the query actually carries the Hindi realisation of the site.

    Quality site: the Hindi vowel fires (peak log emission above ``HINDI_PRESENT_LOG``). Deletion site:
    the Hindi realisation is the *absence* of the vowel, so the Nepali vowel must not be clearly present
    (peak below ``REFERENCE_VOWEL_LOG``, the same line a reference must clear to count as Nepali).
    """
    deletion = features[..., _I["kind_deletion"]] > 0.5
    return torch.where(deletion, features[..., _I["query_nepali_peak"]] < REFERENCE_VOWEL_LOG,
                       features[..., _I["query_hindi_peak"]] > HINDI_PRESENT_LOG)


def gates_pass(features: Tensor) -> Tensor:
    """``[..., 57]`` -> ``[...]`` bool: reference prefers Nepali, query margin > 0 in every crop, and the
    Hindi realisation is present (:func:`hindi_realised`)."""
    return (features[..., _I["margin_reference_max"]] < 0) & (features[..., _I["margin_query_min"]] > 0) & \
        hindi_realised(features)


def failed_gates(features: Tensor) -> list[str]:
    """``[57]`` (one site, one recognizer) -> what :func:`gates_pass` found missing, in words (``[]`` if it passes)."""
    out = []
    if not bool(features[_I["margin_reference_max"]] < 0):
        out.append("the reference does not prefer the Nepali form")
    if not bool(features[_I["margin_query_min"]] > 0):
        out.append("the query does not prefer the Hindi form in every crop")
    if not bool(hindi_realised(features)):
        out.append("the Hindi realisation is not heard in the query")
    return out


def check_thresholds(flag: float, no_change: float | None = None) -> None:
    """``ValueError`` unless ``flag`` (and ``no_change``) are finite numbers in [0, 1] with ``no_change <= flag``:
    a NaN or a flag threshold above 1 would silently flag nothing."""
    for name, value in (("flag threshold", flag), ("no-change threshold", no_change)):
        if value is not None:
            check_number(value, f"the {name} must be a probability in [0, 1]", low=0.0, high=1.0)
    if no_change is not None and no_change > flag:
        raise ValueError(f"the no-change threshold ({no_change}) must not exceed the flag threshold ({flag})")


def site_decision(score: float, gates: bool, *, flag: float, no_change: float) -> SiteDecision:
    """One reference's decision at one site; ``flag``/``no_change`` are the head card's thresholds."""
    if score >= flag:
        return "flagged" if gates else "uncertain"
    if score < no_change:
        return "no_change"
    return "uncertain"


def combine_references(decisions: Sequence[SiteDecision]) -> SiteDecision:
    """One decision per qualified reference -> the site's decision (all must agree)."""
    if not decisions:
        return "unscored"
    return decisions[0] if all(d == decisions[0] for d in decisions) else "uncertain"


def word_decision(site_decisions: Sequence[SiteDecision]) -> Decision:
    """A word is flagged if any site is; then uncertain; unscored if no site was scored; else no_change: every
    scored site says so (an unscored site beside them, e.g. one whose reference did not qualify, is left out)."""
    if not site_decisions:
        return "not_tested"
    for d in ("flagged", "uncertain"):
        if d in site_decisions:
            return d
    if all(d == "unscored" for d in site_decisions):
        return "unscored"
    return "no_change" if all(d in ("no_change", "unscored") for d in site_decisions) else "uncertain"


def batch_decisions(scores: Tensor, feats_a: Tensor, feats_b: Tensor, *, flag: float,
                    no_change: float) -> list[SiteDecision]:
    """Vectorised decision for rows with one reference each (held-out tables): ``unscored`` where
    the reference does not qualify on both recognizers."""
    qualified = reference_qualifies(feats_a) & reference_qualifies(feats_b)
    gates = gates_pass(feats_a) & gates_pass(feats_b)
    out = []
    for s, q, g in zip(scores.tolist(), qualified.tolist(), gates.tolist()):
        out.append(site_decision(s, g, flag=flag, no_change=no_change) if q else "unscored")
    return out
