import math

import pytest
import torch

from leakloss.functional.crop import conv_receptive_field
from leakloss.functional.leak import (
    item_rms,
    mask_nonfinite_items,
    quiet_gradient_scale,
    rms_normalize,
    scale_gradient,
)


def test_mask_nonfinite_items_zeroes_bad_items_and_padding_with_zero_gradient():
    x = torch.tensor([[1.0, 2.0, 3.0, float("nan")], [1.0, float("inf"), 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]],
                     requires_grad=True)
    clean, bad = mask_nonfinite_items(x, torch.tensor([3, 4, 4]))
    assert bad.tolist() == [False, True, False]  # item 0's NaN is padding
    assert clean.tolist() == [[1.0, 2.0, 3.0, 0.0], [0.0] * 4, [1.0, 2.0, 3.0, 4.0]]
    (clean.exp() * 2).sum().backward()  # math downstream sees only finite values
    assert torch.isfinite(x.grad).all()
    assert x.grad[1].eq(0).all() and x.grad[0, 3] == 0 and x.grad[2].gt(0).all()
    _, bad = mask_nonfinite_items(x)  # without lengths every step counts
    assert bad.tolist() == [True, True, False]


def test_mask_nonfinite_items_on_mels_and_empty_input():
    mels = torch.zeros(2, 5, 3)
    mels[1, 2, 1] = float("-inf")
    clean, bad = mask_nonfinite_items(mels, torch.tensor([5, 5]))
    assert bad.tolist() == [False, True] and torch.isfinite(clean).all()
    clean, bad = mask_nonfinite_items(torch.zeros(2, 0, 3))
    assert bad.tolist() == [False, False] and clean.shape == (2, 0, 3)


def _offset_batch(t: int) -> torch.Tensor:
    """Three fp64 items of very different scales, all with a DC offset of 0.3."""
    torch.manual_seed(0)
    return torch.randn(3, t, dtype=torch.float64) * torch.tensor([[1.0], [1e-3], [5.0]], dtype=torch.float64) + 0.3


def test_item_rms_matches_naive_reference():
    x, lengths = _offset_batch(50), torch.tensor([50, 20, 1])
    got = item_rms(x, lengths)
    for b, n in enumerate(lengths.tolist()):
        v = x[b, :n].tolist()
        mean = sum(v) / n
        assert got[b].item() == pytest.approx(math.sqrt(sum((a - mean) ** 2 for a in v) / n), rel=1e-9, abs=1e-12)
    assert item_rms(torch.zeros(1, 0)).tolist() == [0.0]


def test_rms_normalize_matches_naive_reference_and_removes_the_offset():
    x, lengths = _offset_batch(40), torch.tensor([40, 12, 0])
    got = rms_normalize(x, lengths)
    for b, n in enumerate(lengths.tolist()):
        v = x[b, :n].tolist()
        mean = sum(v) / max(n, 1)
        std = math.sqrt(sum((a - mean) ** 2 for a in v) / max(n, 1))
        assert got[b, :n].tolist() == pytest.approx([(a - mean) / math.sqrt(std**2 + 1e-7) for a in v], rel=1e-9)
        assert not got[b, n:].any()  # zero past the length
    assert got.dtype == torch.float64 and abs(float(got[0].mean())) < 1e-9  # centred
    given = rms_normalize(x, lengths, rms=torch.full((3,), 2.0, dtype=torch.float64),
                          mean=torch.full((3,), 0.5, dtype=torch.float64))
    assert given[0, :5].tolist() == pytest.approx(((x[0, :5] - 0.5) / math.sqrt(4 + 1e-7)).tolist())
    assert rms_normalize(x.float()[:, :0]).shape == (3, 0)


def test_rms_normalize_ignores_a_dc_offset_and_does_not_overflow_on_loud_input():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 800, generator=g) * 0.1
    lengths = torch.tensor([800, 500])
    base = rms_normalize(x, lengths)
    assert torch.allclose(rms_normalize(x + 0.4, lengths), base, atol=1e-5)  # an offset changes nothing
    loud = rms_normalize(x * 1e20, lengths)  # squares past fp32's range (> 3.4e38)
    assert torch.isfinite(loud).all() and torch.allclose(loud, base, atol=1e-5)
    # within full scale the eps stays absolute, as before: near-silence is not blown up to unit RMS
    assert float(rms_normalize(x * 1e-6, lengths)[0].std()) < 1e-3


def test_rms_normalize_gradcheck():
    x = torch.randn(2, 9, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda w: rms_normalize(w, torch.tensor([9, 5])), (x,))


def test_nonfinite_padding_is_not_the_item_s():
    # x * mask turned a NaN past an item's length into a NaN RMS, a NaN scale and a NaN normalised item
    x = torch.randn(2, 12, dtype=torch.float64)
    lengths = torch.tensor([8, 12])
    dirty = x.clone()
    dirty[0, 9], dirty[0, 11] = float("nan"), float("inf")
    torch.testing.assert_close(item_rms(dirty, lengths), item_rms(x, lengths))
    torch.testing.assert_close(quiet_gradient_scale(dirty, lengths), quiet_gradient_scale(x, lengths))
    w = dirty.clone().requires_grad_(True)
    out = rms_normalize(w, lengths)
    torch.testing.assert_close(out, rms_normalize(x, lengths))
    out.sum().backward()
    assert torch.isfinite(w.grad).all() and float(w.grad[0, 8:].abs().max()) == 0.0


def test_quiet_gradient_scale():
    x = torch.randn(3, 16000)
    x = x / item_rms(x)[:, None] * torch.tensor([[0.1], [0.001], [0.0]])
    assert quiet_gradient_scale(x, rms_floor=0.01).tolist() == pytest.approx([1.0, 0.1, 0.0], rel=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_scale_gradient_is_an_exact_identity_forward(dtype):
    x = (torch.randn(2, 7) * 1e3).to(dtype).requires_grad_(True)
    y = scale_gradient(x, torch.tensor([1.0, 0.25]))
    assert torch.equal(y, x) and y.dtype == dtype
    y.sum().backward()
    assert torch.equal(x.grad, torch.tensor([[1.0] * 7, [0.25] * 7], dtype=dtype))


def test_conv_receptive_field_is_the_fewest_samples_the_stack_accepts():
    kernels, strides = (10, 3, 3, 3, 3), (5, 2, 2, 2, 2)
    n = conv_receptive_field(kernels, strides)
    assert n == 160
    convs = [torch.nn.Conv1d(1, 1, k, s) for k, s in zip(kernels, strides)]

    def run(t):
        h = torch.zeros(1, 1, t)
        for c in convs:
            h = c(h)
        return h.shape[-1]

    assert run(n) == 1
    with pytest.raises(RuntimeError):
        run(n - 1)
    with pytest.raises(ValueError):
        conv_receptive_field((10, 3), (5,))


def test_row_shapes_and_items_are_checked():
    from leakloss.functional.leak import leak_penalty_from_logits, site_masks
    from leakloss.timing import TimedSite

    logits, masks = torch.zeros(2, 10), torch.ones(3, 10, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"masks \(3, 9\) must be"):
        leak_penalty_from_logits(logits, masks[:, :9], torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match=r"must lie in \[0, 2\)"):
        leak_penalty_from_logits(logits, masks, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"item_of_row must be \[3\]"):
        leak_penalty_from_logits(logits, masks, torch.tensor([0, 1]))
    site = TimedSite(0.1, 0.2, "deletion", "ʌ->∅")
    with pytest.raises(ValueError, match="one length per item"):
        site_masks([[site], [site]], 10, hop_s=0.02, frame_lengths=torch.tensor([10]))


def test_row_dtypes_and_settings_are_checked():
    from leakloss.functional.leak import leak_penalty_from_logits, pooled_site_logits, site_masks
    from leakloss.timing import TimedSite

    logits, masks, item = torch.zeros(2, 10), torch.ones(3, 10, dtype=torch.bool), torch.tensor([0, 1, 1])
    with pytest.raises(TypeError, match="masks must be a bool tensor"):
        leak_penalty_from_logits(logits, masks.float(), item)  # was "~ not supported for float"
    with pytest.raises(TypeError, match="item_of_row must be an integer tensor"):
        leak_penalty_from_logits(logits, masks, item.float())
    with pytest.raises(TypeError, match="frame_logits must be a float tensor"):
        leak_penalty_from_logits(logits.long(), masks, item)
    with pytest.raises(TypeError, match="masks must be a tensor, got list"):
        leak_penalty_from_logits(logits, masks.tolist(), item)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0, got 0"):
        pooled_site_logits(logits, masks, item, temperature=0)  # was ZeroDivisionError
    site = TimedSite(0.1, 0.2, "deletion", "ʌ->∅")
    for hop in (0.0, float("nan"), -0.02):  # NaN made every mask empty: the site silently inactive
        with pytest.raises(ValueError, match="hop_s must be a finite number of seconds > 0"):
            site_masks([[site]], 10, hop_s=hop)
    with pytest.raises(ValueError, match="pad_s must be"):
        site_masks([[site]], 10, hop_s=0.02, pad_s=float("nan"))


def test_no_active_site_gives_a_finite_zero_even_for_nan_logits():
    from leakloss.functional.leak import leak_penalty_from_logits

    logits = torch.tensor([[0.0, float("nan"), 1.0]], requires_grad=True)
    loss, probs = leak_penalty_from_logits(logits, torch.zeros(1, 3, dtype=torch.bool), torch.tensor([0]))
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.equal(logits.grad, torch.zeros_like(logits))  # 0 * NaN was NaN


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_one_nonfinite_logit_in_a_site_never_makes_the_loss_or_gradient_nonfinite(bad):
    """One +Inf logit in a site's window gave an Inf loss, one NaN a NaN loss (the forward never feeds them,
    but the function is public)."""
    from leakloss.functional.leak import leak_penalty_from_logits, pooled_site_logits

    logits = torch.tensor([[0.5, bad, 1.0, -2.0]], requires_grad=True)
    masks = torch.tensor([[True, True, True, False]])
    loss, probs = leak_penalty_from_logits(logits, masks, torch.tensor([0]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(probs).all() and torch.isfinite(logits.grad).all()
    pooled = pooled_site_logits(logits.detach(), masks, torch.tensor([0]))
    assert torch.isfinite(pooled).all()
    if math.isnan(bad):  # a NaN frame is no evidence: pooled as if outside the mask
        ref = pooled_site_logits(logits.detach(), torch.tensor([[True, False, True, False]]), torch.tensor([0]))
        assert torch.allclose(pooled, ref)
    # finite logits are untouched by the bound
    clean = torch.tensor([[0.5, 3.0, 1.0, -2.0]])
    x = clean[0, :3] * 4.0
    assert torch.allclose(pooled_site_logits(clean, masks, torch.tensor([0])),
                          (torch.logsumexp(x, -1) - math.log(3)) / 4.0)


@pytest.mark.parametrize("n_frames", [-1, 2.5, True])
def test_site_masks_refuses_a_frame_count_that_is_not_a_count(n_frames):
    from leakloss.functional.leak import site_masks
    from leakloss.timing import TimedSite

    with pytest.raises(ValueError, match="n_frames must be a whole number"):  # was RuntimeError from torch.zeros
        site_masks([[TimedSite(0.1, 0.2, "deletion", "ʌ->∅")]], n_frames, hop_s=0.005)


def test_a_site_of_nan_frames_only_is_inactive_not_a_confident_no_leak():
    from leakloss.functional.leak import active_sites, leak_penalty_from_logits

    logits = torch.tensor([[5.0, 5.0, float("nan"), float("nan")]])
    masks = torch.tensor([[True, True, False, False], [False, False, True, True]])
    item = torch.tensor([0, 0])
    loss, probs = leak_penalty_from_logits(logits, masks, item)
    alone, _ = leak_penalty_from_logits(logits, masks[:1], item[:1])
    assert active_sites(logits, masks, item).tolist() == [True, False]
    torch.testing.assert_close(loss, alone)  # it once halved the penalty, counted as a site with p ~ 0
    assert torch.isfinite(probs).all()


def test_masked_frames_stay_out_of_the_pool_at_any_temperature():
    from leakloss.functional.leak import pooled_site_logits

    logits = torch.tensor([[-30.0, -30.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False, False]])
    for temperature in (1.0, 4.0, 1000.0):  # at 1000 the masked frames once outranked the real ones (-10)
        pooled = pooled_site_logits(logits, mask, torch.tensor([0]), temperature=temperature)
        torch.testing.assert_close(pooled, torch.tensor([-30.0]))


@pytest.mark.parametrize("active", [torch.tensor([1, 1, 0]), torch.tensor([True, True]), [True, True, False]])
def test_active_must_be_one_bool_per_site(active):
    # an integer 0/1 tensor indexed sites 1, 1, 0 instead of selecting 0 and 1: a wrong penalty, silently
    from leakloss.functional.leak import leak_penalty_from_logits

    logits = torch.tensor([[5.0, 5.0, 5.0, -5.0, -5.0, -5.0]])
    masks = torch.tensor([[1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    item = torch.zeros(3, dtype=torch.long)
    right, _ = leak_penalty_from_logits(logits, masks, item, torch.tensor([True, True, False]))
    assert float(right) == pytest.approx(float(torch.nn.functional.softplus(torch.tensor([5.0, -5.0])).mean()),
                                         rel=1e-3)
    with pytest.raises(TypeError, match="active must be a bool tensor"):
        leak_penalty_from_logits(logits, masks, item, active)


def test_an_empty_site_is_improbable_at_any_temperature():
    from leakloss.functional.leak import pooled_site_logits

    logits = torch.full((1, 4), -8.0)
    masks = torch.tensor([[True, True, False, False], [False, False, False, False]])
    for temperature in (1.0, 4.0, 1e4):
        pooled = pooled_site_logits(logits, masks, torch.zeros(2, dtype=torch.long), temperature)
        assert float(torch.sigmoid(pooled[1])) < 1e-6 < float(torch.sigmoid(pooled[0]))
