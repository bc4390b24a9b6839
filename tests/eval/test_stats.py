"""Tests for leakloss.eval.stats against published values and naive reference implementations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from leakloss.eval.stats import (
    Interval,
    cluster_bootstrap,
    detection_rates,
    detection_rates_bootstrap,
    format_count,
    krippendorff_alpha_nominal,
    rate_with_interval,
    roc_auc,
    spearman_rho,
    wilson_interval,
)

Z95 = 1.959963984540054


# --- Wilson ----------------------------------------------------------------------------------------

def naive_wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Invert the score test by bisection: bounds are where |k/n - p| = z * sqrt(p(1-p)/n)."""
    phat = k / n

    def outside(p: float) -> bool:
        return abs(phat - p) > z * math.sqrt(p * (1 - p) / n)

    def bisect(lo: float, hi: float, lo_outside: bool) -> float:
        for _ in range(200):
            mid = (lo + hi) / 2
            if outside(mid) == lo_outside:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    low = 0.0 if k == 0 else bisect(0.0, phat, True)
    high = 1.0 if k == n else bisect(phat, 1.0, False)
    return low, high


@pytest.mark.parametrize(
    "k, n, low, high",
    [  # Newcombe (1998), Stat. Med. 17:857, Table I, method 3 (score interval)
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
        # Seed 000: 36 of 100 flagged. (The brief's "[0.2702, 0.4604]" is not the Wilson
        # interval; both the closed form and the bisection reference give [0.2727, 0.4576].)
        (36, 100, 0.2727, 0.4576),
    ],
)
def test_wilson_published_values(k, n, low, high):
    iv = wilson_interval(k, n)
    assert iv.estimate == pytest.approx(k / n)
    assert iv.low == pytest.approx(low, abs=5e-5)
    assert iv.high == pytest.approx(high, abs=5e-5)


def test_wilson_against_bisection_reference():
    for k, n in [(0, 1), (1, 1), (3, 7), (36, 100), (4, 104), (99, 100), (500, 1000)]:
        iv = wilson_interval(k, n)
        low, high = naive_wilson(k, n)
        assert iv.low == pytest.approx(low, abs=1e-9) and iv.high == pytest.approx(high, abs=1e-9)


def test_wilson_edges_and_confidence():
    assert wilson_interval(0, 20).low == 0.0 and wilson_interval(20, 20).high == 1.0
    wide, narrow = wilson_interval(36, 100, 0.99), wilson_interval(36, 100, 0.80)
    base = wilson_interval(36, 100)
    assert wide.low < base.low < narrow.low and narrow.high < base.high < wide.high


@pytest.mark.parametrize("k, n, conf", [(0, 0, 0.95), (5, 4, 0.95), (-1, 4, 0.95), (1, 4, 1.0), (1, 4, 0.0)])
def test_wilson_bad_input(k, n, conf):
    with pytest.raises(ValueError):
        wilson_interval(k, n, conf)


def test_wilson_total_zero_message():
    with pytest.raises(ValueError, match="total must be positive"):
        wilson_interval(0, 0)


# --- cluster bootstrap -------------------------------------------------------------------------------

def clustered_sample(seed: int = 0, n_clusters: int = 30, per: int = 8):
    rng = np.random.default_rng(seed)
    offsets = rng.normal(0, 1.0, n_clusters)  # strong listener effect
    values = np.concatenate([o + rng.normal(0, 0.3, per) for o in offsets])
    clusters = np.repeat([f"L{i}" for i in range(n_clusters)], per)
    return values, clusters


def test_bootstrap_deterministic_for_seed():
    v, c = clustered_sample()
    a = cluster_bootstrap(v, c, seed=3)
    assert a == cluster_bootstrap(v, c, seed=3)
    assert a != cluster_bootstrap(v, c, seed=4)


def test_bootstrap_covers_mean_and_estimate_is_statistic():
    v, c = clustered_sample()
    iv = cluster_bootstrap(v, c)
    assert iv.estimate == pytest.approx(v.mean())
    assert iv.low < v.mean() < iv.high
    med = cluster_bootstrap(v, c, np.median)
    assert med.estimate == pytest.approx(np.median(v))


def test_bootstrap_iid_matches_normal_theory():
    rng = np.random.default_rng(1)
    v = rng.normal(5.0, 2.0, 400)
    iv = cluster_bootstrap(v, range(400), n_resamples=4000)
    half = Z95 * v.std(ddof=1) / math.sqrt(v.size)
    assert (iv.high - iv.low) / 2 == pytest.approx(half, rel=0.1)
    assert (iv.low + iv.high) / 2 == pytest.approx(v.mean(), abs=0.1 * half)


def test_clustering_widens_interval():
    v, c = clustered_sample()
    clustered = cluster_bootstrap(v, c)
    iid = cluster_bootstrap(v, range(v.size))
    # Values within a listener are correlated, so treating them as independent is overconfident.
    assert (clustered.high - clustered.low) > 1.8 * (iid.high - iid.low)


def test_bootstrap_two_clusters_by_enumeration():
    # Clusters {0,0} and {1,1}: resample means are 0, .5, .5, 1 with probabilities 1/4, 1/2, 1/4.
    iv = cluster_bootstrap([0.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], n_resamples=4000)
    assert (iv.low, iv.high) == (0.0, 1.0)
    iv = cluster_bootstrap([0.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"], n_resamples=4000, confidence=0.4)
    assert iv.low == iv.high == 0.5


def test_bootstrap_depends_on_grouping_not_labels():
    v, c = clustered_sample()
    renamed = [{"L": "listener-"}.get(x[0]) + x[1:] for x in c]
    assert cluster_bootstrap(v, c) == cluster_bootstrap(v, renamed)
    # clusters need not be contiguous
    perm = np.random.default_rng(0).permutation(v.size)
    shuffled = cluster_bootstrap(v[perm], c[perm])
    assert shuffled.estimate == pytest.approx(v.mean())


def test_bootstrap_bad_input():
    with pytest.raises(ValueError, match="clusters has 2 entries"):
        cluster_bootstrap([1.0, 2.0, 3.0], ["a", "b"])
    with pytest.raises(ValueError, match="NaN"):
        cluster_bootstrap([1.0, float("nan")], ["a", "b"])
    with pytest.raises(ValueError, match="non-empty"):
        cluster_bootstrap([], [])
    with pytest.raises(ValueError, match="not finite in"):
        # undefined on resamples that draw only cluster "a"
        cluster_bootstrap([0.0, 1.0], ["a", "b"], lambda x: x.max() if x.max() else float("nan"))


# --- detection rates -----------------------------------------------------------------------------

PRED = [True, True, True, False, False, False, False, True]
TRUTH = [True, False, True, True, False, False, False, False]


def test_detection_rates_hand_computed():
    # tp: 0, 2   fp: 1, 7   fn: 3   tn: 4, 5, 6
    r = detection_rates(PRED, TRUTH)
    assert (r["tp"], r["fp"], r["fn"], r["tn"], r["n"]) == (2, 2, 1, 3, 8)
    assert r["precision"] == pytest.approx(2 / 4)
    assert r["recall"] == pytest.approx(2 / 3)
    assert r["false_alarm_rate"] == pytest.approx(2 / 5)


def test_detection_rates_undefined_are_none():
    r = detection_rates([False, False], [False, True])
    assert r["precision"] is None and r["recall"] == 0.0 and r["false_alarm_rate"] == 0.0
    r = detection_rates([True, False], [False, False])
    assert r["recall"] is None and r["precision"] == 0.0 and r["false_alarm_rate"] == 0.5
    r = detection_rates([True, True], [True, True])
    assert r["false_alarm_rate"] is None


def test_detection_rates_accepts_numpy_and_01():
    assert detection_rates(np.array(PRED), [int(t) for t in TRUTH]) == detection_rates(PRED, TRUTH)


def test_detection_rates_bad_input():
    with pytest.raises(ValueError, match="8 entries but truth has 7"):
        detection_rates(PRED, TRUTH[:7])
    with pytest.raises(ValueError, match="booleans"):
        detection_rates([0.5, 1.0], [True, False])
    with pytest.raises(ValueError, match="empty"):
        detection_rates([], [])


def _encoded_ratio(num_code: set[int], den_code: set[int]):
    """Statistic on values 2*pred + truth, for cross-checking with the generic bootstrap."""
    def stat(x: np.ndarray) -> float:
        den = np.isin(x, list(den_code)).sum()
        return np.isin(x, list(num_code)).sum() / den if den else float("nan")
    return stat


def test_detection_bootstrap_matches_generic_cluster_bootstrap():
    rng = np.random.default_rng(5)
    n = 300
    truth = rng.random(n) < 0.4
    pred = np.where(rng.random(n) < 0.8, truth, ~truth)
    listeners = rng.integers(0, 25, n)
    out = detection_rates_bootstrap(pred, truth, listeners, n_resamples=500, seed=7)
    codes = 2 * pred.astype(int) + truth.astype(int)  # 3 tp, 2 fp, 1 fn, 0 tn
    ref = {
        "precision": cluster_bootstrap(codes, listeners, _encoded_ratio({3}, {3, 2}), n_resamples=500, seed=7),
        "recall": cluster_bootstrap(codes, listeners, _encoded_ratio({3}, {3, 1}), n_resamples=500, seed=7),
        "false_alarm_rate": cluster_bootstrap(codes, listeners, _encoded_ratio({2}, {2, 0}), n_resamples=500, seed=7),
    }
    point = detection_rates(pred, truth)
    for key in ref:
        assert out[key].estimate == pytest.approx(point[key])
        assert out[key].low == pytest.approx(ref[key].low) and out[key].high == pytest.approx(ref[key].high)
        assert out[key].n_undefined == 0
        assert out[key].low <= out[key].estimate <= out[key].high
    assert out == detection_rates_bootstrap(pred, truth, listeners, n_resamples=500, seed=7)


def test_detection_bootstrap_undefined():
    # No positive predictions anywhere: precision undefined -> None, not NaN.
    out = detection_rates_bootstrap([False] * 4, [True, False, True, False], ["a", "a", "b", "b"], n_resamples=50)
    assert out["precision"] is None
    assert isinstance(out["recall"], Interval) and out["recall"].estimate == 0.0
    # Positives only in listener "a": resamples drawing only "b" have undefined precision.
    out = detection_rates_bootstrap(
        [True, False, False, False], [True, False, True, False], ["a", "a", "b", "b"], n_resamples=400
    )
    iv = out["precision"]
    assert iv.estimate == 1.0 and 40 < iv.n_undefined < 160  # about a quarter of 400
    assert not any(math.isnan(v) for v in (iv.low, iv.high))


# --- Krippendorff's alpha ----------------------------------------------------------------------------

def naive_alpha(ratings) -> float:
    """1 - D_o / D_e from explicit pairs (Krippendorff 2011, eqs. for nominal data)."""
    units = [[v for v in u.values() if v is not None] for u in ratings.values()]
    units = [u for u in units if len(u) >= 2]
    pooled = [v for u in units for v in u]
    n = len(pooled)
    d_o = sum(
        sum(a != b for a, b in itertools.permutations(u, 2)) / (len(u) - 1) for u in units
    ) / n
    d_e = sum(a != b for a, b in itertools.permutations(pooled, 2)) / (n * (n - 1))
    return 1 - d_o / d_e


def krippendorff_2011_example():
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", sec. C: 4 observers,
    # 12 units, missing values; nominal alpha = 0.743.
    rows = {
        "A": [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
        "B": [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
        "C": [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
        "D": [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
    }
    return {u: {c: v[u] for c, v in rows.items() if v[u] is not None} for u in range(12)}


def test_alpha_textbook_nominal_example():
    assert krippendorff_alpha_nominal(krippendorff_2011_example()) == pytest.approx(0.743, abs=5e-4)


def test_alpha_textbook_binary_two_coders():
    # Krippendorff (2011), sec. A: two observers, binary data, 10 units; alpha = 0.095.
    a = [0, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    b = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]
    ratings = {i: {"A": a[i], "B": b[i]} for i in range(10)}
    assert krippendorff_alpha_nominal(ratings) == pytest.approx(0.095, abs=5e-4)


def test_alpha_perfect_and_systematic_disagreement():
    perfect = {u: {c: u % 3 for c in "abcd"} for u in range(9)}
    assert krippendorff_alpha_nominal(perfect) == pytest.approx(1.0)
    opposed = {u: {"a": u % 2, "b": 1 - u % 2} for u in range(10)}
    assert krippendorff_alpha_nominal(opposed) < 0


def test_alpha_ignores_unpairable_units_and_none():
    base = krippendorff_2011_example()
    extra = dict(base)
    extra["lonely"] = {"A": 7}
    extra["none"] = {"A": 1, "B": None}
    assert krippendorff_alpha_nominal(extra) == pytest.approx(krippendorff_alpha_nominal(base))


def test_alpha_against_naive_random():
    rng = np.random.default_rng(2)
    for _ in range(20):
        ratings = {}
        for u in range(int(rng.integers(3, 15))):
            coders = rng.choice(6, size=int(rng.integers(1, 6)), replace=False)
            ratings[u] = {int(c): str(rng.integers(0, 3)) for c in coders}
        try:
            naive = naive_alpha(ratings)
        except ZeroDivisionError:
            continue
        assert krippendorff_alpha_nominal(ratings) == pytest.approx(naive, abs=1e-12)


def test_alpha_undefined_cases():
    with pytest.raises(ValueError, match="same label"):
        krippendorff_alpha_nominal({u: {"a": "x", "b": "x"} for u in range(5)})
    with pytest.raises(ValueError, match="two or more coders"):
        krippendorff_alpha_nominal({u: {"a": u} for u in range(5)})
    with pytest.raises(ValueError, match="coder -> label"):
        krippendorff_alpha_nominal({0: ["x", "y"]})  # type: ignore[dict-item]


# --- Spearman ------------------------------------------------------------------------------------

def naive_rho(x, y) -> float:
    """Pearson correlation of average ranks, both computed by brute force."""
    def ranks(v):
        return [1 + sum(w < a for w in v) + (sum(w == a for w in v) - 1) / 2 for a in v]

    rx, ry = ranks(list(x)), ranks(list(y))
    n = len(rx)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))


def test_spearman_against_naive_with_ties():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(3, 30))
        x = rng.integers(0, 5, n).astype(float)  # many ties
        y = x + rng.integers(-2, 3, n)
        if len(set(x)) == 1 or len(set(y)) == 1:
            continue
        assert spearman_rho(x, y) == pytest.approx(naive_rho(x, y), abs=1e-12)


def test_spearman_no_ties_classic_formula():
    rng = np.random.default_rng(4)
    x, y = rng.permutation(12).astype(float), rng.permutation(12).astype(float)
    d2 = ((x - y) ** 2).sum()
    assert spearman_rho(x, y) == pytest.approx(1 - 6 * d2 / (12 * (144 - 1)))


def test_spearman_known_values():
    assert spearman_rho([1, 2, 3, 4], [10, 20, 30, 1000]) == pytest.approx(1.0)
    assert spearman_rho([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties: ranks x = 1, 2.5, 2.5, 4 and y = 1, 2, 3, 4 -> 0.9486832980505138
    assert spearman_rho([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(3 / math.sqrt(10))


def test_spearman_bad_input():
    with pytest.raises(ValueError, match="constant"):
        spearman_rho([1, 1, 1], [1, 2, 3])
    with pytest.raises(ValueError, match="same length"):
        spearman_rho([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 2"):
        spearman_rho([1], [1])
    with pytest.raises(ValueError, match="NaN"):
        spearman_rho([1, 2, float("nan")], [1, 2, 3])


def naive_auc(pos, neg) -> float:
    """Every (positive, negative) pair counted: 1 when ordered, 1/2 when tied."""
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def test_roc_auc_against_naive_pairwise_count_with_ties():
    rng = np.random.default_rng(5)
    for _ in range(100):
        pos = rng.integers(0, 6, int(rng.integers(1, 25))).astype(float)  # small integers: many ties
        neg = rng.integers(0, 6, int(rng.integers(1, 25))).astype(float) - rng.integers(0, 2)
        assert roc_auc(pos, neg) == pytest.approx(naive_auc(pos, neg), abs=1e-12)


def test_roc_auc_known_values():
    assert roc_auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert roc_auc([0.1, 0.2], [0.9, 0.8]) == 0.0
    assert roc_auc([0.5, 0.5], [0.5]) == 0.5  # all tied: chance
    assert roc_auc([3.0, 1.0], [2.0]) == 0.5


def test_roc_auc_bad_input():
    with pytest.raises(ValueError, match="at least one positive"):
        roc_auc([], [0.1])
    with pytest.raises(ValueError, match="at least one positive"):
        roc_auc([0.1], [])
    with pytest.raises(ValueError, match="NaN"):
        roc_auc([float("nan")], [0.1])
    with pytest.raises(ValueError, match="1-D"):
        roc_auc([[0.1]], [0.2])


# --- rates and counts ----------------------------------------------------------------------------

def test_format_count():
    assert format_count(36, 100) == "36 of 100 (36.0%)"
    assert format_count(4, 104) == "4 of 104 (3.8%)"
    assert format_count(5, 13) == "5 of 13 (38.5%)"
    assert format_count(0, 0) == "0 of 0 (no data)"
    for k, n in [(5, 4), (-1, 3), (1, -1)]:
        with pytest.raises(ValueError):
            format_count(k, n)


def test_rate_with_interval_seed_numbers():
    flags = [True] * 36 + [False] * 64
    r = rate_with_interval(flags)
    assert (r["count"], r["total"], r["rate"], r["text"]) == (36, 100, 0.36, "36 of 100 (36.0%)")
    assert r["wilson"] == wilson_interval(36, 100)
    assert r["bootstrap"] is None


def test_rate_with_interval_bootstrap_over_clusters():
    flags = [True] * 36 + [False] * 64
    voices = [i % 4 for i in range(100)]
    r = rate_with_interval(flags, voices)
    assert r["bootstrap"] == cluster_bootstrap([float(f) for f in flags], voices)
    assert r["bootstrap"].estimate == pytest.approx(0.36)
    assert r["bootstrap"].low <= 0.36 <= r["bootstrap"].high


def test_rate_with_interval_bad_input():
    with pytest.raises(ValueError, match="empty"):
        rate_with_interval([])
    with pytest.raises(ValueError, match="booleans"):
        rate_with_interval(["yes", "no"])
    with pytest.raises(ValueError, match="clusters has"):
        rate_with_interval([True, False], ["a"])


# --- against scipy, where scipy has the statistic ----------------------------------------------------------------

@pytest.mark.parametrize("k, n", [(0, 1), (0, 18), (17, 18), (5, 40), (40, 40), (123, 1000)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_wilson_matches_scipy(k, n, confidence):
    scipy_stats = pytest.importorskip("scipy.stats")
    ci = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    ours = wilson_interval(k, n, confidence)
    assert ours.low == pytest.approx(ci.low, abs=1e-9) and ours.high == pytest.approx(ci.high, abs=1e-9)


def test_spearman_matches_scipy_with_and_without_ties():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(20):
        x, y = rng.integers(0, 6, 30).astype(float), rng.normal(size=30)
        assert spearman_rho(x, y) == pytest.approx(scipy_stats.spearmanr(x, y).statistic, abs=1e-12)


def test_one_cluster_gives_no_bootstrap_interval():
    """One cluster resamples to itself: the interval was [estimate, estimate], printed beside a real Wilson one."""
    flags = [True] * 10 + [False] * 30
    with pytest.raises(ValueError, match="at least 2 clusters, got 1"):
        cluster_bootstrap([float(f) for f in flags], ["s1"] * 40)
    r = rate_with_interval(flags, ["s1"] * 40)
    assert r["bootstrap"] is None and r["wilson"].low < 0.25 < r["wilson"].high
    assert rate_with_interval(flags, ["s1", "s2"] * 20)["bootstrap"] is not None
    boot = detection_rates_bootstrap([True, False] * 30, [True, True, False] * 20, ["L1"] * 60)
    assert boot == {"precision": None, "recall": None, "false_alarm_rate": None}
