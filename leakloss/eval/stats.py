"""Statistics for listener studies and flag rates: intervals, agreement, rank correlation, ROC AUC.

Conventions follow NepTTS-Bench (seed 001): 95 % intervals, cluster bootstrap over raters
(listeners) with 2,000 resamples, Spearman's rho for ranking agreement and nominal
Krippendorff's alpha for inter-rater agreement. Rates are reported as counts first,
"36 of 100 (36.0%)", with an interval. Undefined quantities are ``None`` or a
``ValueError`` with a message, never NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = [
    "Interval",
    "wilson_interval",
    "cluster_bootstrap",
    "detection_rates",
    "detection_rates_bootstrap",
    "krippendorff_alpha_nominal",
    "spearman_rho",
    "roc_auc",
    "rate_with_interval",
    "format_count",
]


@dataclass(frozen=True)
class Interval:
    """A point estimate with a confidence interval ``[low, high]``.

    ``n_undefined`` counts bootstrap resamples in which the statistic was undefined (for
    example precision with no positive predictions) and which were therefore left out of
    the percentile interval; it is 0 for closed-form intervals.
    """

    estimate: float
    low: float
    high: float
    n_undefined: int = 0


def _check_confidence(confidence: float) -> float:
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    return float(confidence)


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer count, got {value!r}")
    return int(value)


def wilson_interval(successes: int, total: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for a binomial proportion ``successes / total``.

    ``estimate`` is the observed proportion (not the interval's centre).

    Raises:
        ValueError: ``total`` is 0, counts are negative or ``successes > total``.
    """
    k, n = _check_count("successes", successes), _check_count("total", total)
    if n <= 0:
        raise ValueError(f"total must be positive to estimate a rate, got {n}")
    if not 0 <= k <= n:
        raise ValueError(f"successes must be between 0 and total={n}, got {k}")
    z = NormalDist().inv_cdf(0.5 + _check_confidence(confidence) / 2)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At k = 0 (k = n) the lower (upper) bound is exactly 0 (1); avoid float round-off there.
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return Interval(p, low, high)


def _group_clusters(clusters: Sequence[Hashable], n: int) -> list[np.ndarray]:
    """Indices of each cluster, clusters sorted by their names (``str``; ties in order of first appearance): a
    resample draws clusters by position, so the same data in another row order (a sorted spreadsheet, result files
    named otherwise) gives the same interval."""
    if len(clusters) != n:
        raise ValueError(f"clusters has {len(clusters)} entries but there are {n} values")
    groups: dict[Hashable, list[int]] = {}
    for i, c in enumerate(clusters):
        groups.setdefault(c, []).append(i)
    return [np.asarray(groups[c], dtype=np.int64) for c in sorted(groups, key=str)]


def _check_resamplable(groups: list[np.ndarray]) -> None:
    if len(groups) < 2:
        raise ValueError(f"a cluster bootstrap needs at least 2 clusters, got {len(groups)}: one cluster resamples "
                         "to itself, a zero-width interval")


def _percentile_interval(estimate: float, draws: np.ndarray, confidence: float) -> Interval:
    """Percentile interval from bootstrap draws ``[n_resamples]``; non-finite draws are counted."""
    ok = np.isfinite(draws)
    if not ok.any():
        raise ValueError("the statistic is undefined in every bootstrap resample")
    alpha = 1.0 - confidence
    low, high = np.quantile(draws[ok], [alpha / 2, 1 - alpha / 2])
    return Interval(float(estimate), float(low), float(high), int((~ok).sum()))


def _resample_indices(n_clusters: int, n_resamples: int, seed: int) -> np.ndarray:
    """``[n_resamples, n_clusters]`` cluster indices drawn with replacement."""
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    return np.random.default_rng(seed).integers(0, n_clusters, size=(n_resamples, n_clusters))


def cluster_bootstrap(
    values: Sequence[float],
    clusters: Sequence[Hashable],
    statistic: Callable[[np.ndarray], float] = np.mean,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval that resamples whole clusters (e.g. listeners).

    Each resample draws as many clusters as there are, with replacement, and applies
    ``statistic`` to the concatenated values of the drawn clusters (a 1-D float array).
    ``estimate`` is ``statistic(values)``. Deterministic for a given ``seed``.

    Raises:
        ValueError: empty or non-finite values, length mismatch, fewer than 2 clusters (one cluster
            resamples to itself: a zero-width interval that measures nothing), a non-finite estimate,
            or a statistic that is non-finite in any resample.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"values must be a non-empty 1-D sequence, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"values contain {int((~np.isfinite(x)).sum())} NaN or Inf entries")
    confidence = _check_confidence(confidence)
    groups = _group_clusters(clusters, x.size)
    _check_resamplable(groups)
    estimate = float(statistic(x))
    if not math.isfinite(estimate):
        raise ValueError(f"statistic of the full sample is not finite ({estimate})")
    draws = np.array(
        [float(statistic(x[np.concatenate([groups[g] for g in row])]))
         for row in _resample_indices(len(groups), n_resamples, seed)]
    )
    n_bad = int((~np.isfinite(draws)).sum())
    if n_bad:
        # A generic statistic that breaks on some resamples needs the caller's decision.
        raise ValueError(f"statistic is not finite in {n_bad} of {n_resamples} resamples")
    return _percentile_interval(estimate, draws, confidence)


def _as_bools(name: str, seq: Sequence[bool]) -> np.ndarray:
    arr = np.asarray(seq)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of booleans, got shape {arr.shape}")
    if arr.dtype != np.bool_:
        if arr.size and not (np.issubdtype(arr.dtype, np.integer) and np.isin(arr, (0, 1)).all()):
            raise ValueError(f"{name} must contain only booleans (or 0/1), got dtype {arr.dtype}")
        arr = arr.astype(bool)
    return arr


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _rates_from_counts(tp: float, fp: float, fn: float, tn: float) -> dict[str, float | None]:
    return {
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, tp + fn),
        "false_alarm_rate": _ratio(fp, fp + tn),
    }


def detection_rates(pred: Sequence[bool], truth: Sequence[bool]) -> dict:
    """Precision, recall and false-alarm rate of flags ``pred`` against ``truth``.

    Returns:
        ``{"precision", "recall", "false_alarm_rate", "tp", "fp", "fn", "tn", "n"}``;
        ``false_alarm_rate = fp / (fp + tn)``. A ratio with a zero denominator is ``None``.

    Raises:
        ValueError: lengths differ, inputs are empty or not boolean.
    """
    p, t = _as_bools("pred", pred), _as_bools("truth", truth)
    if p.size != t.size:
        raise ValueError(f"pred has {p.size} entries but truth has {t.size}")
    if p.size == 0:
        raise ValueError("pred and truth are empty")
    tp, fp = int((p & t).sum()), int((p & ~t).sum())
    fn, tn = int((~p & t).sum()), int((~p & ~t).sum())
    return {**_rates_from_counts(tp, fp, fn, tn), "tp": tp, "fp": fp, "fn": fn, "tn": tn, "n": int(p.size)}


def detection_rates_bootstrap(
    pred: Sequence[bool],
    truth: Sequence[bool],
    clusters: Sequence[Hashable],
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Interval | None]:
    """Cluster-bootstrap intervals (over listeners) for :func:`detection_rates`.

    Returns:
        ``{"precision", "recall", "false_alarm_rate"}`` -> :class:`Interval`, or ``None`` when
        the ratio is undefined on the full data or there is only one cluster (it resamples to itself).
        Resamples where a ratio is undefined are left out of its interval and counted in
        ``Interval.n_undefined``.
    """
    point = detection_rates(pred, truth)
    p, t = _as_bools("pred", pred), _as_bools("truth", truth)
    groups = _group_clusters(clusters, p.size)
    confidence = _check_confidence(confidence)
    # Per-cluster confusion counts [n_clusters, 4] make each resample a sum, not a re-scan.
    cells = np.stack([p & t, p & ~t, ~p & t, ~p & ~t], axis=1).astype(np.int64)
    if len(groups) < 2:
        return {key: None for key in ("precision", "recall", "false_alarm_rate")}
    per_cluster = np.stack([cells[g].sum(axis=0) for g in groups])
    sums = per_cluster[_resample_indices(len(groups), n_resamples, seed)].sum(axis=1)
    tp, fp, fn, tn = (sums[:, i].astype(np.float64) for i in range(4))
    with np.errstate(divide="ignore", invalid="ignore"):
        draws = {
            "precision": tp / (tp + fp),
            "recall": tp / (tp + fn),
            "false_alarm_rate": fp / (fp + tn),
        }
    return {
        key: None if point[key] is None else _percentile_interval(point[key], draws[key], confidence)
        for key in draws
    }


def krippendorff_alpha_nominal(ratings: Mapping[Hashable, Mapping[Hashable, Hashable]]) -> float:
    """Krippendorff's alpha for nominal labels, from ``{unit: {coder: label}}``.

    Missing ratings are simply absent (a ``None`` label also counts as missing). Units
    with fewer than two ratings are not pairable and are ignored. Uses the coincidence
    matrix: ``alpha = 1 - (n - 1) * D_o / sum_{c != k} n_c n_k``.

    Raises:
        ValueError: no unit has two ratings, or all pairable ratings share one label
            (alpha is then 0/0, undefined).
    """
    labels: dict[Hashable, int] = {}
    units: list[list[int]] = []
    for unit, by_coder in ratings.items():
        if not isinstance(by_coder, Mapping):
            raise ValueError(f"ratings[{unit!r}] must map coder -> label, got {type(by_coder).__name__}")
        vals = [labels.setdefault(v, len(labels)) for v in by_coder.values() if v is not None]
        if len(vals) >= 2:
            units.append(vals)
    if not units:
        raise ValueError("no unit has ratings from two or more coders; alpha is undefined")
    # Coincidence matrix o[c, k]: ordered pairs of values within a unit, each weighted 1/(m_u - 1).
    o = np.zeros((len(labels), len(labels)))
    for vals in units:
        counts = np.bincount(vals, minlength=len(labels)).astype(np.float64)
        o += (np.outer(counts, counts) - np.diag(counts)) / (len(vals) - 1)
    n_c = o.sum(axis=1)
    n = n_c.sum()
    expected_pairs = n * n - (n_c**2).sum()  # sum over c != k of n_c n_k
    if expected_pairs == 0:
        raise ValueError("all pairable ratings use the same label; alpha is undefined (0/0)")
    observed = o.sum() - np.trace(o)
    return float(1.0 - (n - 1) * observed / expected_pairs)


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given the mean of the ranks they span."""
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    # Start of each run of equal values.
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], x.size]
    ranks = np.empty(x.size)
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + 1 + e) / 2.0  # mean of ranks s+1 .. e
    return ranks


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation: Pearson correlation of average ranks (ties handled).

    Raises:
        ValueError: lengths differ, fewer than 2 pairs, non-finite values, or a constant
            input (rho undefined).
    """
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1 or a.size != b.size:
        raise ValueError(f"x and y must be 1-D and the same length, got {a.shape} and {b.shape}")
    if a.size < 2:
        raise ValueError("Spearman's rho needs at least 2 pairs")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("x and y must not contain NaN or Inf")
    ra, rb = _average_ranks(a), _average_ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = math.sqrt(float((ra**2).sum()) * float((rb**2).sum()))
    if denom == 0:
        raise ValueError("x or y is constant; Spearman's rho is undefined")
    return float(np.clip((ra * rb).sum() / denom, -1.0, 1.0))


def roc_auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """ROC AUC of scores that should rank ``positives`` above ``negatives``: the share of (positive, negative)
    pairs ordered so, ties counting one half (the Mann-Whitney U over ``len(positives) * len(negatives)``),
    from average ranks in O(n log n). 0.5 is chance, 1.0 a perfect ranking.

    Raises:
        ValueError: either group empty, or a NaN/Inf score (it has no rank).
    """
    pos, neg = np.asarray(positives, dtype=np.float64), np.asarray(negatives, dtype=np.float64)
    if pos.ndim != 1 or neg.ndim != 1:
        raise ValueError(f"positives and negatives must be 1-D, got {pos.shape} and {neg.shape}")
    if pos.size == 0 or neg.size == 0:
        raise ValueError(f"ROC AUC needs at least one positive and one negative, got {pos.size} and {neg.size}")
    if not (np.isfinite(pos).all() and np.isfinite(neg).all()):
        raise ValueError("scores must not contain NaN or Inf")
    ranks = _average_ranks(np.concatenate([pos, neg]))
    u = float(ranks[: pos.size].sum()) - pos.size * (pos.size + 1) / 2.0
    return u / (pos.size * neg.size)


def format_count(k: int, n: int) -> str:
    """``"36 of 100 (36.0%)"``; ``"0 of 0 (no data)"`` when ``n`` is 0.

    Raises:
        ValueError: negative counts or ``k > n``.
    """
    k, n = _check_count("k", k), _check_count("n", n)
    if n < 0 or not 0 <= k <= max(n, 0):
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return "0 of 0 (no data)"
    return f"{k} of {n} ({100.0 * k / n:.1f}%)"


def rate_with_interval(
    flags: Sequence[bool],
    clusters: Sequence[Hashable] | None = None,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> dict:
    """How many of ``flags`` are true, with a Wilson and (given clusters) a cluster-bootstrap interval.

    Returns:
        ``{"count": k, "total": n, "rate": k / n, "wilson": Interval,
        "bootstrap": Interval | None, "text": "k of n (r%)"}``; ``bootstrap`` is ``None``
        when ``clusters`` is not given or names only one cluster (no interval to resample).

    Raises:
        ValueError: empty or non-boolean flags, or clusters of the wrong length.
    """
    f = _as_bools("flags", flags)
    if f.size == 0:
        raise ValueError("flags is empty; a rate needs at least one observation")
    k, n = int(f.sum()), int(f.size)
    boot = None
    if clusters is not None and len(_group_clusters(clusters, n)) >= 2:
        boot = cluster_bootstrap(
            f.astype(np.float64), clusters, np.mean,
            n_resamples=n_resamples, confidence=confidence, seed=seed,
        )
    return {
        "count": k,
        "total": n,
        "rate": k / n,
        "wilson": wilson_interval(k, n, confidence),
        "bootstrap": boot,
        "text": format_count(k, n),
    }
