"""leakloss.functional.paired: the site-windowed KL(ref || gen) of frame posteriors."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.functional.paired import LOG_PROB_FLOOR, paired_site_divergence, window_masks


def _log_probs(b: int, f: int, v: int, seed: int, dtype=torch.float32, scale: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(scale * torch.randn(b, f, v, generator=g, dtype=dtype), -1)


def _naive(gen: torch.Tensor, ref: torch.Tensor, windows: torch.Tensor, active: torch.Tensor) -> tuple[float, list]:
    """Per-site python loop: mean over the window's frames of sum_v p_ref (log p_ref - log p_gen)."""
    per_site, scored = [], []
    for i in range(windows.shape[0]):
        row = []
        for j in range(windows.shape[1]):
            frames = [t for t in range(windows.shape[2]) if bool(windows[i, j, t])]
            if not bool(active[i, j]) or not frames:
                row.append(0.0)
                continue
            total = 0.0
            for t in frames:
                total += max(0.0, sum(math.exp(float(ref[i, t, v])) * (float(ref[i, t, v]) - float(gen[i, t, v]))
                                      for v in range(gen.shape[2])))
            row.append(total / len(frames))
            scored.append(row[-1])
        per_site.append(row)
    return (sum(scored) / len(scored) if scored else 0.0), per_site


def _windows(b: int, k: int, f: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(-2, f, (b, k), generator=g)
    ends = starts + torch.randint(-1, 6, (b, k), generator=g)
    active = torch.rand(b, k, generator=g) < 0.8
    return starts, ends, window_masks(starts, ends, f), active


def test_matches_a_naive_per_site_loop():
    gen, ref = _log_probs(3, 20, 7, 0), _log_probs(3, 20, 7, 1)
    starts, ends, windows, active = _windows(3, 4, 20, 2)
    loss, per_site, scored = paired_site_divergence(gen, ref, windows, active)
    want_loss, want_sites = _naive(gen, ref, windows, active)
    assert loss.item() == pytest.approx(want_loss, rel=1e-5)
    torch.testing.assert_close(per_site, torch.tensor(want_sites), rtol=1e-5, atol=1e-6)
    assert scored.tolist() == (active & windows.any(-1)).tolist()
    # the (starts, ends) form is the same windows
    again = paired_site_divergence(gen, ref, (starts, ends), active)
    assert torch.equal(again[0], loss) and torch.equal(again[1], per_site)


def test_gradcheck_float64_and_the_reference_gets_no_gradient():
    logits = torch.randn(2, 6, 5, dtype=torch.float64, requires_grad=True)
    ref_logits = torch.randn(2, 6, 5, dtype=torch.float64, requires_grad=True)
    windows = window_masks(torch.tensor([[0, 3], [1, 2]]), torch.tensor([[2, 6], [4, 2]]), 6)  # one empty window
    active = torch.tensor([[True, True], [True, False]])

    def loss_of(x):
        return paired_site_divergence(torch.log_softmax(x, -1), torch.log_softmax(ref_logits, -1), windows, active)[0]

    assert torch.autograd.gradcheck(loss_of, (logits,))
    loss_of(logits).backward()
    assert ref_logits.grad is None
    assert logits.grad.abs().sum() > 0
    # frames outside every scored window get exactly zero gradient
    scored_frames = (windows & active[..., None]).any(1)
    assert logits.grad[~scored_frames].eq(0).all()


def test_an_item_alone_scores_as_in_a_padded_batch():
    gen, ref = _log_probs(2, 15, 6, 3), _log_probs(2, 15, 6, 4)
    starts, ends = torch.tensor([[1, 5], [0, 9]]), torch.tensor([[4, 8], [3, 12]])
    _, batch_sites, _ = paired_site_divergence(gen, ref, (starts, ends))
    alone_gen = gen[1:, :12]  # item 1 alone, cut to its own length
    _, alone_sites, _ = paired_site_divergence(alone_gen, ref[1:, :12], (starts[1:], ends[1:]))
    torch.testing.assert_close(alone_sites[0], batch_sites[1])
    # padding an item with extra sites that are inactive leaves its scores and the loss as they were
    pad_starts, pad_ends = torch.cat([starts, torch.zeros(2, 1, dtype=torch.long)], 1), torch.cat(
        [ends, torch.full((2, 1), 10)], 1)
    loss, padded, _ = paired_site_divergence(gen, ref, (pad_starts, pad_ends),
                                            torch.tensor([[True, True, False], [True, True, False]]))
    torch.testing.assert_close(padded[:, :2], batch_sites)
    assert loss.item() == pytest.approx(batch_sites.mean().item(), rel=1e-6)


def test_identical_posteriors_give_exactly_zero():
    gen = _log_probs(2, 10, 5, 5)
    loss, per_site, scored = paired_site_divergence(gen, gen.clone(), (torch.tensor([[0, 4]] * 2),
                                                                       torch.tensor([[3, 9]] * 2)))
    assert loss.item() == 0.0 and per_site.eq(0).all() and scored.all()


def test_no_site_empty_window_and_zero_frames_give_zero_with_zero_gradient():
    for gen, windows in ((torch.zeros(2, 0, 4), torch.zeros(2, 1, 0, dtype=torch.bool)),  # zero-length audio
                         (torch.zeros(2, 5, 4), torch.zeros(2, 0, 5, dtype=torch.bool)),  # no site
                         (torch.zeros(2, 5, 4), torch.zeros(2, 2, 5, dtype=torch.bool))):  # empty windows
        gen = torch.log_softmax(gen + torch.randn(gen.shape), -1).detach().requires_grad_(True)
        loss, per_site, scored = paired_site_divergence(gen, gen.detach().flip(-1), windows)
        assert loss.item() == 0.0 and not scored.any() and per_site.eq(0).all()
        loss.backward()
        assert gen.grad is not None and gen.grad.eq(0).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("side", ["gen", "ref"])
def test_a_nonfinite_frame_masks_its_sites_with_zero_gradient(bad, side):
    gen = _log_probs(2, 12, 5, 6).requires_grad_(True)
    ref = _log_probs(2, 12, 5, 7)
    g, r = gen, ref.clone()
    if side == "gen":
        g = gen.clone()
        g = torch.where(torch.zeros_like(g, dtype=torch.bool).index_put_((torch.tensor([0]), torch.tensor([3]),
                                                                         torch.tensor([2])), torch.tensor(True)),
                        torch.full_like(g, bad), g)
    else:
        r[0, 3, 2] = bad
    windows = window_masks(torch.tensor([[2, 8], [2, 8]]), torch.tensor([[5, 11], [5, 11]]), 12)
    loss, per_site, scored = paired_site_divergence(g, r, windows)
    assert torch.isfinite(loss) and torch.isfinite(per_site).all()
    assert scored.tolist() == [[False, True], [True, True]]  # only the site whose window holds frame 3 of item 0
    assert per_site[0, 0] == 0
    _, clean_sites, _ = paired_site_divergence(gen.detach(), ref, windows)
    assert loss.item() == pytest.approx(clean_sites.flatten()[1:].mean().item(), rel=1e-6)
    loss.backward()
    assert torch.isfinite(gen.grad).all()
    assert gen.grad[0, 2:5].eq(0).all()  # the masked site's frames: no gradient


def test_minus_infinity_log_probabilities_are_floored_not_nan():
    gen = _log_probs(1, 4, 3, 8).clone()
    gen[0, 1, 0] = float("-inf")
    ref = _log_probs(1, 4, 3, 9)
    loss, _, scored = paired_site_divergence(gen, ref, window_masks(torch.tensor([[0]]), torch.tensor([[4]]), 4))
    assert scored.all() and torch.isfinite(loss)
    assert loss.item() >= math.exp(float(ref[0, 1, 0])) * (float(ref[0, 1, 0]) - LOG_PROB_FLOOR) / 4 - 1e-4


def test_a_finite_log_probability_under_the_floor_keeps_its_gradient():
    # the floor clamped: a generated posterior that put the reference's token under e^-100 had no gradient back
    ref = torch.log_softmax(torch.tensor([[[0.0, 0.0]]], dtype=torch.float64), -1)
    windows = torch.ones(1, 1, 1, dtype=torch.bool)
    for gap in (99.0, 101.0, 150.0, 1e30):
        gen = torch.tensor([[[-gap, 0.0]]], dtype=torch.float64, requires_grad=True)
        loss, _, _ = paired_site_divergence(gen, ref, windows)
        loss.backward()
        assert torch.isfinite(loss) and float(gen.grad[0, 0, 0]) == pytest.approx(-0.5)
        if gap > -LOG_PROB_FLOOR:  # the value is still the floor's
            assert float(loss) == pytest.approx(0.5 * (math.log(0.5) - LOG_PROB_FLOOR) + 0.5 * math.log(0.5))
    gen = torch.tensor([[[float("-inf"), 0.0]]], dtype=torch.float64, requires_grad=True)
    loss, _, _ = paired_site_divergence(gen, ref, windows)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(gen.grad).all()


def test_bad_shapes_and_types_are_refused():
    gen = _log_probs(1, 4, 3, 0)
    with pytest.raises(TypeError, match="site_windows must be a bool tensor"):  # was an AttributeError
        paired_site_divergence(gen, gen, [[[True] * 4]])
    with pytest.raises(ValueError, match="frame-aligned"):
        paired_site_divergence(gen, gen[:, :3], torch.zeros(1, 1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="site_windows must be bool"):
        paired_site_divergence(gen, gen, torch.zeros(1, 1, 4))
    with pytest.raises(ValueError, match="active must be bool"):
        paired_site_divergence(gen, gen, torch.zeros(1, 2, 4, dtype=torch.bool), torch.ones(1, 1, dtype=torch.bool))
    with pytest.raises(TypeError, match="integer tensor"):
        window_masks(torch.tensor([[0.5]]), torch.tensor([[1.0]]), 4)


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 3), f=st.integers(0, 12), v=st.integers(1, 6), k=st.integers(0, 3),
       scale=st.floats(1e-3, 1e3), seed=st.integers(0, 10_000))
def test_random_shapes_sites_and_scales_give_a_finite_nonnegative_loss(b, f, v, k, scale, seed):
    gen = _log_probs(b, f, v, seed, scale=scale).requires_grad_(True)
    ref = _log_probs(b, f, v, seed + 1, scale=scale)
    starts, ends, _, active = _windows(b, k, f, seed)
    loss, per_site, _ = paired_site_divergence(gen, ref, (starts, ends), active)
    assert torch.isfinite(loss) and loss.item() >= 0
    assert torch.isfinite(per_site).all() and per_site.ge(0).all()
    loss.backward()
    assert torch.isfinite(gen.grad).all()
