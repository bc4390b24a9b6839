"""Tests for leakloss.functional.ctc_paths: CTC forward scoring of set-valued phone paths.

References: ``torch.nn.functional.ctc_loss`` (single-token paths), a scalar pure-Python dynamic
program, and brute-force enumeration (of frame labellings and of state alignments).
"""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from leakloss.functional.ctc_paths import (
    NEG_INF_FINITE,
    PathMargin,
    ctc_set_log_likelihood,
    ctc_set_occupancy,
    frame_fit,
    path_margin,
    paths_from_token_sets,
    set_emissions,
)

# ----------------------------------------------------------------------------- helpers


def _lse(xs: list[float]) -> float:
    m = max(xs)
    if m == -math.inf:
        return -math.inf
    return m + math.log(sum(math.exp(x - m) for x in xs))


def _random_log_probs(b: int, t: int, v: int, dtype=torch.float64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # peaky-ish logits like a CTC recogniser
    return (3.0 * torch.randn(b, t, v, generator=g, dtype=torch.float64)).log_softmax(-1).to(dtype)


def _random_set_paths(b: int, s_max: int, v: int, blank: int, seed: int, max_set: int = 3,
                      min_len: int = 0) -> list[list[list[int]]]:
    g = torch.Generator().manual_seed(seed)
    tokens = [x for x in range(v) if x != blank]
    paths = []
    for _ in range(b):
        s = int(torch.randint(min_len, s_max + 1, (1,), generator=g))
        path = []
        for _ in range(s):
            k = int(torch.randint(1, max_set + 1, (1,), generator=g))
            perm = torch.randperm(len(tokens), generator=g)[:k].tolist()
            path.append(sorted(tokens[i] for i in perm))
        paths.append(path)
    return paths


def _naive_dp(lp: list[list[float]], path: list[list[int]], blank: int) -> float:
    """Scalar CTC forward over extended states, written straightforwardly with -inf."""
    T = len(lp)
    states: list[list[int] | None] = [None]
    for tok in path:
        states += [list(tok), None]
    N = len(states)

    def emit(t: int, n: int) -> float:
        st = states[n]
        if st is None:
            return lp[t][blank]
        return _lse([lp[t][x] for x in st]) if st else -math.inf

    def can_skip(n: int) -> bool:
        return states[n] is not None and n >= 3 and not (set(states[n]) & set(states[n - 2]))

    if T == 0:
        return 0.0 if N == 1 else -math.inf
    alpha = [-math.inf] * N
    alpha[0] = emit(0, 0)
    if N > 1:
        alpha[1] = emit(0, 1)
    for t in range(1, T):
        new = []
        for n in range(N):
            terms = [alpha[n]]
            if n >= 1:
                terms.append(alpha[n - 1])
            if can_skip(n):
                terms.append(alpha[n - 2])
            new.append(_lse(terms) + emit(t, n))
        alpha = new
    return _lse([alpha[-1]] + ([alpha[-2]] if N > 1 else []))


def _naive_labelling_sum(lp: list[list[float]], path: list[list[int]], blank: int) -> float:
    """Brute force over all frame labellings: log of the total probability of labellings the
    path accepts. Acceptance is a regular expression (independent of the lattice code):
    B* (S0+ B*) ... with B+ instead of B* between overlapping neighbouring sets."""
    T, V = len(lp), len(lp[0])
    sym = lambda x: chr(ord("a") + x)  # noqa: E731
    blank_re = re.escape(sym(blank))
    parts = [f"{blank_re}*"]
    for k, tok in enumerate(path):
        if k > 0:
            overlap = bool(set(tok) & set(path[k - 1]))
            parts.append(f"{blank_re}+" if overlap else f"{blank_re}*")
        parts.append("[" + "".join(sym(x) for x in tok) + "]+" if tok else "(?!)")
    parts.append(f"{blank_re}*")
    pattern = re.compile("".join(parts))
    terms = []
    for lab in itertools.product(range(V), repeat=T):
        if pattern.fullmatch("".join(sym(x) for x in lab)):
            terms.append(sum(lp[t][x] for t, x in enumerate(lab)))
    return _lse(terms) if terms else -math.inf


def _naive_alignments(lp: list[list[float]], path: list[list[int]], blank: int):
    """Enumerate all state alignments; returns (ll, expected log emission per frame)."""
    T = len(lp)
    states: list[list[int] | None] = [None]
    for tok in path:
        states += [list(tok), None]
    N = len(states)

    def emit(t, n):
        st = states[n]
        return lp[t][blank] if st is None else _lse([lp[t][x] for x in st])

    weights, fits = [], []
    for z in itertools.product(range(N), repeat=T):
        if z[0] > 1 or z[-1] < N - 2:
            continue
        ok = True
        for a, c in zip(z, z[1:]):
            d = c - a
            if d in (0, 1):
                continue
            if d == 2 and states[c] is not None and c >= 3 and not (set(states[c]) & set(states[c - 2])):
                continue
            ok = False
            break
        if not ok:
            continue
        e = [emit(t, n) for t, n in enumerate(z)]
        weights.append(sum(e))
        fits.append(e)
    ll = _lse(weights)
    post = [math.exp(w - ll) for w in weights]
    fit = [sum(p * f[t] for p, f in zip(post, fits)) for t in range(T)]
    return ll, fit


def _single_token_batch(b, t, v, s, seed, repeats=True, blank=0):
    """Random single-token targets with repeats, lengths in [0, s], feasible frame lengths."""
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, v - 1, (b, s), generator=g)
    targets = targets + (targets >= blank).long()  # skip the blank id
    if repeats and s >= 2:
        targets[0, 1] = targets[0, 0]  # "a a"
    path_lengths = torch.randint(0, s + 1, (b,), generator=g)
    path_lengths[0] = s
    if b > 1:
        path_lengths[1] = 0  # all blank
    need = []
    for i in range(b):
        tg = targets[i, : path_lengths[i]].tolist()
        need.append(len(tg) + sum(1 for x, y in zip(tg, tg[1:]) if x == y))
    frame_lengths = torch.tensor([int(torch.randint(max(n, 1), t + 1, (1,), generator=g)) for n in need])
    frame_lengths[0] = max(need[0], 1)  # t = minimum feasible
    if b > 2:
        frame_lengths[2] = t
    return targets, path_lengths, frame_lengths


# ----------------------------------------------------------------------------- ctc_loss parity

SHAPES = [(1, 1, 3, 1), (3, 6, 4, 3), (4, 12, 6, 5), (5, 40, 20, 12), (2, 80, 60, 15)]


@pytest.mark.parametrize("b,t,v,s", SHAPES)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-8)])
@pytest.mark.parametrize("blank", [0, 2])
def test_matches_ctc_loss(b, t, v, s, dtype, tol, blank):
    targets, path_lengths, frame_lengths = _single_token_batch(b, t, v, s, seed=b * 100 + t, blank=blank)
    lp = _random_log_probs(b, t, v, dtype, seed=t)
    allowed = F.one_hot(targets, v).bool()
    ours = ctc_set_log_likelihood(lp, allowed, frame_lengths, path_lengths, blank=blank)
    ref = -F.ctc_loss(lp.transpose(0, 1), targets, frame_lengths, path_lengths, blank=blank,
                      reduction="none", zero_infinity=False)
    assert ours.dtype == dtype
    assert torch.isfinite(ref).all()
    torch.testing.assert_close(ours, ref, rtol=tol, atol=tol)


def test_matches_ctc_loss_with_repeats_and_edge_lengths():
    v, blank = 5, 0
    # "a a" needs 3 frames, "a b" 2, "" any, "a a a" at exactly 5 frames
    targets = torch.tensor([[1, 1, 0], [1, 2, 0], [0, 0, 0], [3, 3, 3]])
    path_lengths = torch.tensor([2, 2, 0, 3])
    frame_lengths = torch.tensor([3, 2, 4, 5])
    lp = _random_log_probs(4, 5, v, torch.float64, seed=7)
    allowed = F.one_hot(targets, v).bool()
    ours = ctc_set_log_likelihood(lp, allowed, frame_lengths, path_lengths, blank)
    ref = -F.ctc_loss(lp.transpose(0, 1), targets, frame_lengths, path_lengths, blank=blank,
                      reduction="none", zero_infinity=False)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    # empty path = every frame blank
    torch.testing.assert_close(ours[2], lp[2, :4, blank].sum())


def test_gradient_matches_ctc_loss_through_log_softmax():
    # ctc_loss's backward assumes log_softmax inputs, so compare gradients wrt the logits
    b, t, v, s = 4, 15, 7, 5
    targets, path_lengths, frame_lengths = _single_token_batch(b, t, v, s, seed=3)
    logits = torch.randn(b, t, v, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    allowed = F.one_hot(targets, v).bool()
    x1 = logits.clone().requires_grad_(True)
    ctc_set_log_likelihood(x1.log_softmax(-1), allowed, frame_lengths, path_lengths).sum().backward()
    x2 = logits.clone().requires_grad_(True)
    (-F.ctc_loss(x2.log_softmax(-1).transpose(0, 1), targets, frame_lengths, path_lengths,
                 reduction="none")).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-8, atol=1e-10)


# ----------------------------------------------------------------------------- set-valued references


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_set", [1, 2, 4])
def test_matches_naive_dp_on_random_set_paths(seed, max_set):
    b, t, v, s_max, blank = 6, 14, 7, 5, 0
    paths = _random_set_paths(b, s_max, v, blank, seed=seed, max_set=max_set)
    allowed, path_lengths = paths_from_token_sets(paths, v)
    g = torch.Generator().manual_seed(seed)
    frame_lengths = torch.randint(1, t + 1, (b,), generator=g)
    frame_lengths[0] = t
    lp = _random_log_probs(b, t, v, torch.float64, seed=seed + 50)
    ours = ctc_set_log_likelihood(lp, allowed, frame_lengths, path_lengths, blank)
    for i in range(b):
        ref = _naive_dp(lp[i, : frame_lengths[i]].tolist(), paths[i], blank)
        if ref == -math.inf or ref < NEG_INF_FINITE:
            assert ours[i].item() == NEG_INF_FINITE
        else:
            assert ours[i].item() == pytest.approx(ref, rel=1e-10, abs=1e-10), (i, paths[i])


def test_naive_dp_covers_overlapping_and_disjoint_neighbours():
    # guard that the random paths above actually exercise both skip rules
    kinds = set()
    for seed in range(6):
        for path in _random_set_paths(6, 5, 7, 0, seed=seed, max_set=4):
            for a, c in zip(path, path[1:]):
                kinds.add(bool(set(a) & set(c)))
    assert kinds == {True, False}


@pytest.mark.parametrize(
    "path",
    [
        [],
        [[1]],
        [[1], [1]],  # repeated single token: blank required
        [[1, 2], [2, 3]],  # overlapping sets: blank required (conservative)
        [[1, 2], [3]],  # disjoint: direct jump allowed
        [[1, 2, 3]],
        [[2], [1, 3], [2]],
    ],
)
def test_matches_brute_force_over_labellings(path):
    t, v, blank = 5, 4, 0
    lp = _random_log_probs(1, t, v, torch.float64, seed=len(path) + 11)
    allowed, lengths = paths_from_token_sets([path], v)
    ours = ctc_set_log_likelihood(lp, allowed, torch.tensor([t]), lengths, blank)
    ref = _naive_labelling_sum(lp[0].tolist(), path, blank)
    assert ours.item() == pytest.approx(ref, rel=1e-10, abs=1e-10)
    # a genuine probability: never above 1
    assert ours.item() <= 1e-12


def test_skip_rule_changes_the_score():
    # the same emissions scored with disjoint vs overlapping neighbours must differ: with
    # t == s only the direct jump can align, so overlap makes the path impossible
    v = 4
    lp = _random_log_probs(1, 2, v, torch.float64, seed=2)
    disjoint, ld = paths_from_token_sets([[[1], [2]]], v)
    overlap, lo = paths_from_token_sets([[[1, 2], [2]]], v)
    assert ctc_set_log_likelihood(lp, disjoint, torch.tensor([2]), ld).item() > NEG_INF_FINITE
    assert ctc_set_log_likelihood(lp, overlap, torch.tensor([2]), lo).item() == NEG_INF_FINITE


# ----------------------------------------------------------------------------- set_emissions


def test_set_emissions_matches_masked_logsumexp():
    b, t, v, s = 3, 7, 9, 4
    lp = _random_log_probs(b, t, v, torch.float64, seed=4)
    g = torch.Generator().manual_seed(4)
    allowed = torch.rand(b, s, v, generator=g) < 0.3
    allowed[0, 0] = False  # empty set
    allowed[1, 1] = True  # every token: logsumexp of a log-softmax row is 0
    ours = set_emissions(lp, allowed)
    ref = torch.logsumexp(lp[:, :, None, :].masked_fill(~allowed[:, None], -math.inf), dim=-1)
    ref = ref.clamp_min(NEG_INF_FINITE)
    assert ours.shape == (b, t, s)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    assert (ours[0, :, 0] == NEG_INF_FINITE).all()
    torch.testing.assert_close(ours[1, :, 1], torch.zeros(t, dtype=torch.float64))


def test_set_emissions_low_precision_input_computes_in_float32():
    lp = _random_log_probs(2, 5, 6, torch.float32, seed=5)
    allowed, _ = paths_from_token_sets([[[1, 2]], [[3]]], 6)
    for dtype in (torch.float16, torch.bfloat16):
        out = set_emissions(lp.to(dtype), allowed)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, set_emissions(lp.to(dtype).float(), allowed))


# ----------------------------------------------------------------------------- gradients


def _gradcheck_inputs():
    paths = [[[1, 2], [3]], [[2], [2, 3], [1]], []]
    allowed, path_lengths = paths_from_token_sets(paths, 4)
    frame_lengths = torch.tensor([5, 6, 3])
    lp = _random_log_probs(3, 6, 4, torch.float64, seed=9).requires_grad_(True)
    return lp, allowed, frame_lengths, path_lengths


def test_gradcheck_log_likelihood():
    lp, allowed, fl, pl = _gradcheck_inputs()
    assert torch.autograd.gradcheck(lambda x: ctc_set_log_likelihood(x, allowed, fl, pl), (lp,))


def test_gradcheck_frame_fit():
    lp, allowed, fl, pl = _gradcheck_inputs()
    assert torch.autograd.gradcheck(lambda x: frame_fit(x, allowed, fl, pl), (lp,))


def test_gradcheck_occupancy():
    lp, allowed, fl, pl = _gradcheck_inputs()
    assert torch.autograd.gradcheck(lambda x: ctc_set_occupancy(x, allowed, fl, pl)[1], (lp,))


def test_gradient_is_zero_on_padding_frames():
    lp, allowed, fl, pl = _gradcheck_inputs()
    frame_fit(lp, allowed, fl, pl).sum().backward()
    for i, n in enumerate(fl.tolist()):
        assert (lp.grad[i, n:] == 0).all()
        assert (lp.grad[i, :n] != 0).any()


# ----------------------------------------------------------------------------- occupancy and fit


def test_occupancy_rows_sum_to_one_on_valid_frames():
    b, t, v, s_max = 5, 20, 8, 6
    paths = _random_set_paths(b, s_max, v, 0, seed=1, max_set=3, min_len=1)
    allowed, pl = paths_from_token_sets(paths, v)
    fl = torch.tensor([20, 17, 12, 20, 15])
    lp = _random_log_probs(b, t, v, torch.float32, seed=1)
    ll, gamma = ctc_set_occupancy(lp, allowed, fl, pl)
    assert gamma.shape == (b, t, 2 * allowed.shape[1] + 1)
    assert (ll > NEG_INF_FINITE).all()
    rows = gamma.sum(-1)
    valid = torch.arange(t) < fl[:, None]
    torch.testing.assert_close(rows[valid], torch.ones_like(rows[valid]), rtol=0, atol=1e-5)
    assert (rows[~valid] == 0).all()
    assert (gamma >= 0).all()
    # states beyond the path are never occupied
    for i in range(b):
        assert (gamma[i, :, 2 * pl[i] + 1:] == 0).all()
    # first frame is in state 0 or 1; last valid frame in one of the two final states
    assert torch.allclose(gamma[:, 0, :2].sum(-1), torch.ones(b), atol=1e-5)
    for i in range(b):
        last = gamma[i, fl[i] - 1]
        assert last[2 * pl[i] - 1: 2 * pl[i] + 1].sum().item() == pytest.approx(1.0, abs=1e-5)


def test_occupancy_is_the_gradient_for_single_token_paths():
    # for single-token sets, d ll / d log_probs[t, tok] = sum of gamma over states emitting tok
    b, t, v, s = 3, 12, 6, 4
    targets, pl, fl = _single_token_batch(b, t, v, s, seed=8)
    allowed = F.one_hot(targets, v).bool()
    lp = _random_log_probs(b, t, v, torch.float64, seed=8).requires_grad_(True)
    ll, gamma = ctc_set_occupancy(lp, allowed, fl, pl)
    (grad,) = torch.autograd.grad(ll.sum(), lp)
    n = gamma.shape[-1]
    state_token = torch.zeros(b, n, dtype=torch.long)
    state_token[:, 1::2] = targets
    expected = torch.zeros(b, t, v, dtype=torch.float64)
    expected.scatter_add_(2, state_token[:, None, :].expand(b, t, n), gamma.detach())
    torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("path", [[[1]], [[1, 2], [3]], [[2], [2, 3]], [[1], [1]], []])
def test_frame_fit_and_ll_match_alignment_enumeration(path):
    t, v = 5, 4
    lp = _random_log_probs(1, t, v, torch.float64, seed=21)
    allowed, pl = paths_from_token_sets([path], v)
    ll_ref, fit_ref = _naive_alignments(lp[0].tolist(), path, 0)
    fl = torch.tensor([t])
    assert ctc_set_log_likelihood(lp, allowed, fl, pl).item() == pytest.approx(ll_ref, abs=1e-10)
    fit = frame_fit(lp, allowed, fl, pl)[0].tolist()
    assert fit == pytest.approx(fit_ref, abs=1e-10)


# ----------------------------------------------------------------------------- batch consistency


def test_batch_matches_items_one_by_one_with_different_padding():
    b, v, s_max, t = 6, 9, 6, 30
    paths = _random_set_paths(b, s_max, v, 0, seed=13, max_set=3)
    allowed, pl = paths_from_token_sets(paths, v)
    fl = torch.tensor([30, 8, 21, 1, 17, 25])
    lp = _random_log_probs(b, t, v, torch.float32, seed=13)
    # garbage in padding (frames and positions) must not matter
    lp_pad = lp.clone()
    for i in range(b):
        lp_pad[i, fl[i]:] = float("nan")
    allowed_pad = allowed.clone()
    for i in range(b):
        allowed_pad[i, pl[i]:, 1::2] = True
    ll_b, gamma_b = ctc_set_occupancy(lp_pad, allowed_pad, fl, pl)
    fit_b = frame_fit(lp_pad, allowed_pad, fl, pl)
    assert torch.isfinite(ll_b).all() and torch.isfinite(gamma_b).all() and torch.isfinite(fit_b).all()
    for i in range(b):
        # one by one, trimmed to its own length, then with extra (different) padding
        n_i, s_i = int(fl[i]), len(paths[i])
        a_i, l_i = paths_from_token_sets([paths[i]], v)
        ll_1, gamma_1 = ctc_set_occupancy(lp[i : i + 1, :n_i], a_i, fl[i : i + 1], l_i)
        torch.testing.assert_close(ll_b[i], ll_1[0], rtol=1e-6, atol=1e-5)
        torch.testing.assert_close(gamma_b[i, :n_i, : 2 * s_i + 1], gamma_1[0], rtol=1e-5, atol=1e-6)
        fit_1 = frame_fit(lp[i : i + 1, :n_i], a_i, fl[i : i + 1], l_i)
        torch.testing.assert_close(fit_b[i, :n_i], fit_1[0], rtol=1e-5, atol=1e-5)
        assert (fit_b[i, n_i:] == 0).all()
        lp_more = torch.cat([lp[i : i + 1, :n_i], torch.full((1, 7, v), -3.0)], dim=1)
        ll_2 = ctc_set_log_likelihood(lp_more, a_i, fl[i : i + 1], l_i)
        torch.testing.assert_close(ll_b[i], ll_2[0], rtol=1e-6, atol=1e-5)


def test_padding_garbage_gets_no_gradient_and_no_nan():
    lp, allowed, fl, pl = _gradcheck_inputs()
    lp = lp.detach().clone()
    lp[0, 5:] = float("nan")
    lp[2, 3:] = -math.inf
    lp[2, 4:] = math.inf  # +inf would turn 0 * inf into NaN gradients if it reached a log op
    lp.requires_grad_(True)
    out = ctc_set_log_likelihood(lp, allowed, fl, pl).sum() + frame_fit(lp, allowed, fl, pl).sum()
    out.backward()
    assert torch.isfinite(out)
    assert torch.isfinite(lp.grad).all()
    assert (lp.grad[0, 5:] == 0).all() and (lp.grad[2, 3:] == 0).all()


# ----------------------------------------------------------------------------- impossible paths


def test_impossible_paths_give_the_floor_with_finite_gradients():
    v = 5
    paths = [
        [[1], [2], [3]],  # 3 positions, 2 frames: too many positions
        [[1], [], [2]],  # empty set
        [[1, 2], [2, 3]],  # overlapping: needs 3 frames, has 2
        [[1, 2], [3]],  # disjoint: 2 frames suffice (control, possible)
        [[1], [1]],  # "a a" at exactly 3 frames (control, possible)
    ]
    allowed, pl = paths_from_token_sets(paths, v)
    fl = torch.tensor([2, 8, 2, 2, 3])
    lp = _random_log_probs(5, 8, v, torch.float64, seed=3).requires_grad_(True)
    ll = ctc_set_log_likelihood(lp, allowed, fl, pl)
    assert ll[:3].tolist() == [NEG_INF_FINITE] * 3
    assert (ll[3:] > NEG_INF_FINITE).all()
    ll.sum().backward()
    assert torch.isfinite(lp.grad).all()
    assert (lp.grad[:3] == 0).all()
    assert (lp.grad[3:] != 0).any()

    lp.grad = None
    fit = frame_fit(lp, allowed, fl, pl)
    ll_o, gamma = ctc_set_occupancy(lp, allowed, fl, pl)
    torch.testing.assert_close(ll_o, ll)
    assert (gamma[:3] == 0).all()
    for i in range(3):
        assert (fit[i, : fl[i]] == NEG_INF_FINITE).all() and (fit[i, fl[i]:] == 0).all()
    fit.sum().backward()
    assert torch.isfinite(lp.grad).all()


def test_everything_impossible_or_minus_inf_is_still_finite():
    v, t = 4, 6
    lp = torch.full((2, t, v), -math.inf, dtype=torch.float32)
    lp[1] = torch.log_softmax(torch.randn(t, v), -1)
    lp[1, :, 1] = -math.inf  # token 1 never emitted
    lp.requires_grad_(True)
    allowed, pl = paths_from_token_sets([[[1], [2]], [[1], [2]]], v)
    fl = torch.tensor([t, t])
    ll = ctc_set_log_likelihood(lp, allowed, fl, pl)
    fit = frame_fit(lp, allowed, fl, pl)
    assert ll.tolist() == [NEG_INF_FINITE, NEG_INF_FINITE]
    (ll.sum() + fit.sum()).backward()
    assert torch.isfinite(fit).all() and torch.isfinite(lp.grad).all()


def test_zero_frames():
    v = 3
    allowed, pl = paths_from_token_sets([[], [[1]]], v)
    lp = torch.zeros(2, 0, v)
    ll = ctc_set_log_likelihood(lp, allowed, torch.tensor([0, 0]), pl)
    assert ll.tolist() == [0.0, NEG_INF_FINITE]


# ----------------------------------------------------------------------------- path_margin


def test_path_margin_sign_and_definition():
    # audio built so frames 2-4 say token 3 (the "Hindi" vowel), not token 2 (Nepali)
    v, t = 5, 8
    probs = torch.full((2, t, v), 0.02, dtype=torch.float64)
    probs[:, :, 0] = 0.9
    probs[:, 0:2, 1] = 0.9
    probs[:, 2:5, 3] = 0.9
    probs[:, 6:8, 4] = 0.9
    lp = (probs / probs.sum(-1, keepdim=True)).log()
    nep, ln = paths_from_token_sets([[[1], [2], [4]], [[1], [2], [4]]], v)
    hin, lh = paths_from_token_sets([[[1], [3], [4]], [[1], [4]]], v)  # swap / delete
    fl = torch.tensor([8, 7])
    m = path_margin(lp, nep, hin, fl, ln, lh)
    assert isinstance(m, PathMargin)
    assert (m.total > 0).all()
    torch.testing.assert_close(m.ll_nepali, ctc_set_log_likelihood(lp, nep, fl, ln))
    torch.testing.assert_close(m.ll_hindi, ctc_set_log_likelihood(lp, hin, fl, lh))
    torch.testing.assert_close(m.total, (m.ll_hindi - m.ll_nepali) / fl)
    torch.testing.assert_close(m.per_frame, frame_fit(lp, hin, fl, lh) - frame_fit(lp, nep, fl, ln))
    assert m.per_frame[0, 2:5].min() > 0  # the swapped vowel's frames favour Hindi
    assert m.per_frame[1, 7] == 0  # padding
    # swapping the roles flips the sign
    r = path_margin(lp, hin, nep, fl, lh, ln)
    torch.testing.assert_close(r.total, -m.total)


# ----------------------------------------------------------------------------- packing and dtypes


def test_paths_from_token_sets():
    allowed, lengths = paths_from_token_sets([[[5], [7, 8, 9]], [], [[1]]], 10)
    assert allowed.shape == (3, 2, 10) and allowed.dtype == torch.bool
    assert lengths.tolist() == [2, 0, 1] and lengths.dtype == torch.long
    assert allowed[0, 1].nonzero().flatten().tolist() == [7, 8, 9]
    assert not allowed[1].any() and not allowed[2, 1].any()
    empty, el = paths_from_token_sets([[], []], 4)
    assert empty.shape == (2, 0, 4) and el.tolist() == [0, 0]
    with pytest.raises(ValueError, match="outside"):
        paths_from_token_sets([[[10]]], 10)


def test_all_empty_paths_batch():
    allowed, pl = paths_from_token_sets([[], []], 4)
    lp = _random_log_probs(2, 5, 4, torch.float64, seed=1)
    fl = torch.tensor([5, 3])
    ll, gamma = ctc_set_occupancy(lp, allowed, fl, pl)
    torch.testing.assert_close(ll, torch.stack([lp[0, :, 0].sum(), lp[1, :3, 0].sum()]))
    assert gamma.shape == (2, 5, 1)
    assert gamma[1, :, 0].tolist() == pytest.approx([1.0, 1.0, 1.0, 0.0, 0.0], abs=1e-12)
    assert (gamma[1, 3:] == 0).all()


def test_half_input_returns_float32_close_to_float32_input():
    lp, allowed, fl, pl = _gradcheck_inputs()
    lp32 = lp.detach().float()
    ll_ref = ctc_set_log_likelihood(lp32, allowed, fl, pl)
    ll_bf = ctc_set_log_likelihood(lp32.bfloat16(), allowed, fl, pl)
    assert ll_bf.dtype == torch.float32
    torch.testing.assert_close(ll_bf, ctc_set_log_likelihood(lp32.bfloat16().float(), allowed, fl, pl))
    assert (ll_bf - ll_ref).abs().max() < 0.2


def test_shape_errors():
    lp = torch.zeros(2, 4, 5)
    allowed, pl = paths_from_token_sets([[[1]], [[2]]], 5)
    with pytest.raises(ValueError):
        ctc_set_log_likelihood(lp, allowed[:1], torch.tensor([4, 4]), pl)
    with pytest.raises(ValueError):
        ctc_set_log_likelihood(lp, allowed, torch.tensor([4]), pl)
    with pytest.raises(TypeError):
        ctc_set_log_likelihood(lp, allowed.float(), torch.tensor([4, 4]), pl)
    with pytest.raises(ValueError):
        ctc_set_log_likelihood(lp, allowed, torch.tensor([4, 4]), pl, blank=5)



@pytest.mark.parametrize("frames, positions, name", [([5, 4], [1, 1], "frame_lengths"), ([-1, 4], [1, 1], "frame_lengths"),
                                                     ([4, 4], [2, 1], "path_lengths"), ([4, 4], [1, -1], "path_lengths")])
def test_lengths_outside_the_tensors_are_value_errors(frames, positions, name):
    lp = torch.zeros(2, 4, 5).log_softmax(-1)
    allowed, _ = paths_from_token_sets([[[1]], [[2]]], 5)
    for fn in (ctc_set_log_likelihood, ctc_set_occupancy):
        with pytest.raises(ValueError, match=name):
            fn(lp, allowed, torch.tensor(frames), torch.tensor(positions))


def test_lengths_must_be_whole_numbers_and_may_be_lists():
    lp = torch.zeros(2, 4, 5).log_softmax(-1)
    allowed, _ = paths_from_token_sets([[[1]], [[2]]], 5)
    for frames in (torch.tensor([3.5, 4.0]), torch.tensor([True, True])):  # 3.5 was cut to 3, True read as 1
        with pytest.raises(ValueError, match="whole numbers"):
            ctc_set_log_likelihood(lp, allowed, frames, torch.tensor([1, 1]))
    as_lists = ctc_set_log_likelihood(lp, allowed, [4, 3], [1, 1])
    assert torch.equal(as_lists, ctc_set_log_likelihood(lp, allowed, torch.tensor([4, 3]), torch.tensor([1, 1])))


def test_an_empty_batch_gives_empty_results():
    lp, allowed, none = torch.zeros(0, 4, 5), torch.zeros(0, 2, 5, dtype=torch.bool), torch.zeros(0, dtype=torch.long)
    assert ctc_set_log_likelihood(lp, allowed, none, none).shape == (0,)
    ll, gamma = ctc_set_occupancy(lp, allowed, none, none)
    assert ll.shape == (0,) and gamma.shape == (0, 4, 5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    lp, allowed, fl, pl = _gradcheck_inputs()
    lp = lp.detach().float()
    cpu = frame_fit(lp, allowed, fl, pl)
    gpu = frame_fit(lp.cuda(), allowed.cuda(), fl.cuda(), pl.cuda())
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("token", [1.7, True, "1", None])
def test_token_ids_that_are_not_whole_numbers_are_refused(token):
    with pytest.raises(TypeError, match="is not a whole token id"):  # 1.7 was token 1, True token 1
        paths_from_token_sets([[[token]]], 5)


def test_numpy_and_tensor_token_ids_are_accepted():
    import numpy as np

    allowed, lengths = paths_from_token_sets([[[np.int64(2), torch.tensor(3)], [1]]], 5)
    assert allowed[0, 0].nonzero().flatten().tolist() == [2, 3] and lengths.tolist() == [2]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_log_probability_in_a_valid_frame_keeps_score_and_gradient_finite(bad):
    torch.manual_seed(0)
    log_probs = torch.randn(2, 12, 6).log_softmax(-1)
    log_probs[0, 4, 2] = bad  # a caller's bug: NaN gave a NaN gradient, +inf a NaN score
    log_probs.requires_grad_(True)
    allowed, path_lengths = paths_from_token_sets([[[2], [3, 4]], [[2], [3, 4]]], 6)
    ll = ctc_set_log_likelihood(log_probs, allowed, torch.tensor([12, 12]), path_lengths)
    ll.sum().backward()
    assert torch.isfinite(ll).all() and torch.isfinite(log_probs.grad).all()
    assert log_probs.grad[0, 4, 2] == 0  # read as the floor: an impossible token
    torch.manual_seed(0)
    ref = torch.randn(2, 12, 6).log_softmax(-1)[1:]
    torch.testing.assert_close(ll[1:], ctc_set_log_likelihood(ref, allowed[1:], torch.tensor([12]),
                                                              path_lengths[1:]))  # the other item is untouched


def test_a_blank_or_vocab_size_that_is_not_a_token_id_is_a_value_error():
    """blank=True gave a RuntimeError deep in the lattice; vocab_size=-1 one from torch.zeros."""
    lp = torch.randn(1, 4, 5).log_softmax(-1)
    allowed, lengths = paths_from_token_sets([[[1], [2]]], 5)
    for blank in (True, 1.5, 5, -1, "0"):
        with pytest.raises(ValueError, match="is not a token id"):
            ctc_set_log_likelihood(lp, allowed, torch.tensor([4]), lengths, blank=blank)
    assert torch.isfinite(ctc_set_log_likelihood(lp, allowed, torch.tensor([4]), lengths, blank=np.int64(0))).all()
    for size in (-1, 0, True, 2.0):
        with pytest.raises(ValueError, match="vocab_size must be a whole number"):
            paths_from_token_sets([], size)
