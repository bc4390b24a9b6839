"""The path-margin term's pure math against naive references: the hinge, its gradient (float64 gradcheck), the
masking of inactive and non-finite sites, and the zero loss with a zero gradient when nothing is scored."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.functional.margin import MARGIN_TAU, margin_hinge, site_margin_loss


def naive_hinge(m: float, tau: float) -> float:
    return tau * math.log1p(math.exp(m / tau)) if m / tau < 30 else m + tau * math.log1p(math.exp(-m / tau))


@given(st.lists(st.floats(-5, 5), min_size=1, max_size=12), st.floats(0.01, 1.0))
@settings(max_examples=60, deadline=None)
def test_hinge_matches_the_naive_formula_and_bounds(values, tau):
    got = margin_hinge(torch.tensor(values, dtype=torch.float64), tau).numpy()
    want = np.array([naive_hinge(v, tau) for v in values])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert (got > 0).all() and (got >= np.array(values) - 1e-12).all()  # above 0 and above the margin itself


def test_hinge_refuses_a_width_that_is_not_positive():
    for tau in (0.0, -1.0, float("nan"), float("inf"), True):  # inf gave an infinite loss
        with pytest.raises(ValueError, match="tau"):
            margin_hinge(torch.zeros(2), tau)
        with pytest.raises(ValueError, match="tau"):
            site_margin_loss(torch.zeros(2, 1), torch.ones(2, dtype=torch.bool), tau)


def test_site_loss_is_the_mean_over_active_sites_of_each_sites_mean_over_crops():
    margins = torch.tensor([[0.3, 0.1, -0.2], [1.0, 0.8, 0.9], [-2.0, -1.0, -3.0]], dtype=torch.float64)
    active = torch.tensor([True, False, True])
    loss, per_site = site_margin_loss(margins, active)
    want = [np.mean([naive_hinge(float(v), MARGIN_TAU) for v in row]) for row in margins]
    assert float(per_site[1]) == 0.0
    np.testing.assert_allclose(per_site[[0, 2]].numpy(), [want[0], want[2]], rtol=1e-10)
    assert math.isclose(float(loss), (want[0] + want[2]) / 2, rel_tol=1e-10)


def test_gradcheck_float64():
    margins = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    active = torch.tensor([True, True, False, True])
    assert torch.autograd.gradcheck(lambda m: site_margin_loss(m, active)[0], (margins,))


def test_a_nan_site_is_inactive_with_a_zero_gradient():
    margins = torch.tensor([[0.2, 0.3, 0.1], [float("nan"), 0.0, 0.0]], requires_grad=True)
    loss, per_site = site_margin_loss(margins, torch.tensor([True, True]))
    loss.backward()
    assert torch.isfinite(loss) and float(per_site[1]) == 0.0
    assert torch.equal(margins.grad[1], torch.zeros(3)) and bool((margins.grad[0] != 0).all())
    alone, _ = site_margin_loss(margins[:1].detach(), torch.tensor([True]))
    assert math.isclose(float(loss), float(alone), rel_tol=1e-6)  # the NaN site does not dilute the mean


def test_nothing_active_is_zero_with_a_zero_gradient():
    margins = torch.randn(3, 3, requires_grad=True)
    loss, per_site = site_margin_loss(margins, torch.zeros(3, dtype=torch.bool))
    loss.backward()
    assert float(loss) == 0.0 and torch.equal(margins.grad, torch.zeros(3, 3)) and torch.equal(per_site, torch.zeros(3))


def test_shapes_are_checked():
    with pytest.raises(TypeError, match="margins must be a tensor, got list"):  # were AttributeErrors
        site_margin_loss([[0.1]], torch.ones(1, dtype=torch.bool))
    with pytest.raises(TypeError, match="active must be a tensor, got list"):
        site_margin_loss(torch.zeros(2, 2), [True, True])
    with pytest.raises(TypeError, match="margins must be a tensor"):
        margin_hinge([0.1])
    with pytest.raises(ValueError, match=r"margins must be \[sites, crops\]"):
        site_margin_loss(torch.zeros(3), torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"active must be bool \[3\]"):
        site_margin_loss(torch.zeros(3, 2), torch.ones(3))
    with pytest.raises(ValueError, match=r"active must be bool \[3\]"):
        site_margin_loss(torch.zeros(3, 2), torch.ones(2, dtype=torch.bool))


def test_crops_left_out_count_nothing_and_get_no_gradient():
    # a crop where a path cannot align has a floored fit (LOG_FLOOR): its margin (~ +20-30 nats a frame for a
    # deletion site) was averaged in, a cost the audio cannot lower that swamped the term
    margins = torch.tensor([[0.3, 25.0, -0.2], [25.0, 25.0, 25.0], [-1.0, -2.0, -3.0]], dtype=torch.float64,
                           requires_grad=True)
    crops = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])
    loss, per_site = site_margin_loss(margins, torch.ones(3, dtype=torch.bool), crops=crops)
    loss.backward()
    want0 = np.mean([naive_hinge(0.3, MARGIN_TAU), naive_hinge(-0.2, MARGIN_TAU)])
    want2 = np.mean([naive_hinge(v, MARGIN_TAU) for v in (-1.0, -2.0, -3.0)])
    np.testing.assert_allclose(per_site.detach().numpy(), [want0, 0.0, want2], rtol=1e-10)
    assert math.isclose(float(loss), (want0 + want2) / 2, rel_tol=1e-10)  # the site with no crop is inactive
    assert torch.equal(margins.grad[~crops], torch.zeros(int((~crops).sum()), dtype=torch.float64))
    assert bool((margins.grad[crops] != 0).all())
    all_in, _ = site_margin_loss(margins.detach(), torch.ones(3, dtype=torch.bool),
                                 crops=torch.ones(3, 3, dtype=torch.bool))
    default, _ = site_margin_loss(margins.detach(), torch.ones(3, dtype=torch.bool))
    assert float(all_in) == float(default)
    active = torch.tensor([True, False, True])
    assert torch.autograd.gradcheck(lambda m: site_margin_loss(m, active, crops=crops)[0],
                                    (torch.randn(3, 3, dtype=torch.float64, requires_grad=True),))
    with pytest.raises(ValueError, match=r"crops must be bool \[3, 3\]"):
        site_margin_loss(margins.detach(), torch.ones(3, dtype=torch.bool), crops=torch.ones(3, 2, dtype=torch.bool))


def test_a_nan_in_a_left_out_crop_does_not_disable_its_site():
    margins = torch.tensor([[0.2, float("nan"), -0.1]], requires_grad=True)
    crops = torch.tensor([[True, False, True]])
    loss, per_site = site_margin_loss(margins, torch.ones(1, dtype=torch.bool), crops=crops)
    loss.backward()
    want = np.mean([naive_hinge(0.2, MARGIN_TAU), naive_hinge(-0.1, MARGIN_TAU)])
    assert math.isclose(float(loss), want, rel_tol=1e-5) and torch.isfinite(margins.grad).all()
    assert float(margins.grad[0, 1]) == 0.0
