"""Crop math of the leak penalty: receptive fields, grids, crop plans, pooled normalisation (naive references)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.functional.crop import (
    CropContext,
    conv_output_frames,
    conv_receptive_field,
    cropped_share,
    gather_mel_crops,
    grid_frames,
    plan_crops,
    pooled_moments,
    same_padded_context,
    trim_waves,
)
from leakloss.timing import TimedSite

FR = 24_000 / 256


def _impulse_field(convs: list[torch.nn.Conv1d], length: int = 2000) -> int:
    """Naive: how many input samples reach one output frame (nonzero gradient of that frame)."""
    x = torch.zeros(1, 1, length, requires_grad=True)
    h = x
    for conv in convs:
        h = conv(h)
    h[0, 0, h.shape[-1] // 2].backward()
    return int((x.grad[0, 0] != 0).sum())


def test_receptive_fields_match_an_impulse_through_real_convs():
    torch.manual_seed(0)
    kernels, strides = [10, 3, 3, 3, 3], [5, 2, 2, 2, 2]
    convs = [torch.nn.Conv1d(1, 1, k, s, bias=False) for k, s in zip(kernels, strides)]
    for c in convs:
        c.weight.data.uniform_(0.5, 1.0)  # positive: no accidental cancellation
    assert conv_receptive_field(kernels, strides) == _impulse_field(convs) == 160
    same = [torch.nn.Conv1d(1, 1, k, padding=d * (k // 2), dilation=d, bias=False) for k, d in ((5, 1), (5, 2), (5, 4))]
    for c in same:
        c.weight.data.uniform_(0.5, 1.0)
    assert 2 * same_padded_context([5, 5, 5], [1, 2, 4]) + 1 == _impulse_field(same) == 29


def test_grid_keeps_resampler_phase_and_conv_frames():
    m = grid_frames(256, 24_000, 16_000, 80)
    assert m == 15
    assert (m * 256) % 3 == 0 and (m * 256 * 2 // 3) % 80 == 0
    assert all((k * 256) % 3 or (k * 256 * 2 // 3) % 80 for k in range(1, m))  # the smallest such step


sites_st = st.lists(st.lists(st.tuples(st.floats(0.0, 4.0), st.floats(0.01, 0.3)), max_size=5), min_size=1, max_size=4)


@settings(max_examples=80, deadline=None)
@given(sites_st, st.integers(100, 400), st.integers(0, 40), st.floats(0.0, 0.2))
def test_crops_cover_every_site_window_on_the_grid(raw, n, voc, wave_s):
    ctx = CropContext(wave_s=wave_s, vocoder_frames=voc)
    sites = [[TimedSite(a, a + d, "deletion", "ʌ->∅") for a, d in item] for item in raw]
    lengths = [n - 7 * b for b in range(len(sites))]
    crops, shifted = plan_crops(sites, lengths, FR, ctx, padded_frames=n)
    inside = sum(1 for b, item in enumerate(sites) for s in item if math.floor((s.start - wave_s) * FR) < lengths[b])
    assert sum(len(s) for s in shifted) == inside  # nothing lost but sites beyond their item
    by_item: dict[int, list] = {}
    for crop, members in zip(crops, shifted):
        n_b = lengths[crop.item]
        assert crop.start % ctx.grid == 0 and (crop.start - crop.mel_start) % ctx.phase == 0
        assert 0 <= crop.mel_start <= crop.start < crop.end <= n_b and crop.mel_end <= n
        assert crop.start - crop.mel_start >= min(crop.start, voc)  # the vocoder's whole context (rounded up)
        assert crop.mel_end >= min(n, crop.end + voc)
        for s in members:
            start, end = s.start + crop.start / FR, s.end + crop.start / FR  # back to item time
            assert crop.start <= max(0, math.floor((start - wave_s) * FR))
            assert crop.end >= min(n_b, math.ceil((end + wave_s) * FR))
        by_item.setdefault(crop.item, []).append(crop)
    for item_crops in by_item.values():  # merged: scored regions never overlap
        item_crops.sort(key=lambda c: c.start)
        assert all(a.end <= b.start for a, b in zip(item_crops, item_crops[1:]))
    assert 0.0 <= cropped_share(crops, lengths) <= len(crops) * (n + 1) / max(sum(lengths), 1)


def test_gather_and_trim_reproduce_the_full_frames_and_samples():
    torch.manual_seed(0)
    mels = torch.randn(2, 90, 4)
    ctx = CropContext(wave_s=0.05, vocoder_frames=6)
    sites = [[TimedSite(0.3, 0.35, "quality", "a"), TimedSite(0.9, 0.92, "quality", "a")], [TimedSite(0.85, 0.9, "deletion", "b")]]
    crops, _ = plan_crops(sites, [90, 80], FR, ctx, padded_frames=90)
    batch, pads = gather_mel_crops(mels, crops, ctx.phase)
    for row, (c, p) in enumerate(zip(crops, pads)):
        assert torch.equal(batch[row, p:p + c.mel_frames], mels[c.item, c.mel_start:c.mel_end])
        if c.mel_end == 90:
            assert p + c.mel_frames == batch.shape[1]  # ends where the full batch ends
    waves = torch.arange(batch.shape[1] * 10, dtype=torch.float32).repeat(len(crops), 1)  # "10 samples a frame"
    regions, lengths = trim_waves(waves, crops, lambda k: 10 * k, pads)
    for row, (c, p) in enumerate(zip(crops, pads)):
        a = 10 * (p + c.start - c.mel_start)
        assert int(lengths[row]) == 10 * (c.end - c.start)
        assert torch.equal(regions[row, : int(lengths[row])], waves[row, a:a + int(lengths[row])])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(5, 40)), min_size=1, max_size=6), st.integers(0, 99))
def test_pooled_moments_match_numpy(spec, seed):
    rng = np.random.default_rng(seed)
    t = max(n for _, n in spec)
    waves = rng.normal(0.3, 2.0, size=(len(spec), t)).astype(np.float32)
    item = np.array([b for b, _ in spec])
    lengths = np.array([n for _, n in spec])
    mean, std = (v.numpy() for v in pooled_moments(torch.from_numpy(waves), torch.from_numpy(lengths),
                                                   torch.from_numpy(item), 4))
    for b in range(4):
        rows = np.flatnonzero(item == b)
        if not len(rows):
            assert mean[b] == pytest.approx(0, abs=1e-5) and std[b] == pytest.approx(0, abs=1e-5)
            continue
        pooled = np.concatenate([waves[r, : lengths[r]] for r in rows]).astype(np.float64)
        np.testing.assert_allclose(mean[b], pooled.mean(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(std[b], pooled.std(), rtol=1e-4)


def test_pooled_moments_keep_float64_and_pass_gradcheck():
    waves = torch.randn(3, 10, dtype=torch.float64, requires_grad=True)
    lengths, item = torch.tensor([10, 6, 8]), torch.tensor([0, 0, 1])
    mean, std = pooled_moments(waves, lengths, item, 3)
    assert mean.dtype == std.dtype == torch.float64
    assert float(mean[2]) == 0.0 and float(std[2]) == pytest.approx(1e-6)  # no crop: the std's floor
    torch.autograd.gradcheck(lambda w: torch.cat(pooled_moments(w, lengths, item, 2)), (waves,))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 500), max_size=40), st.floats(1.0, 2.0))
def test_length_groups_bound_the_padding(lengths, ratio):
    from leakloss.functional.crop import length_groups

    groups = length_groups(lengths, ratio)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        sizes = [lengths[i] for i in g]
        assert max(sizes) <= ratio * min(sizes)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 3000))
def test_conv_output_frames_matches_the_convs(samples):
    kernels, strides = (10, 3, 3, 3, 3), (5, 2, 2, 2, 2)
    convs = [torch.nn.Conv1d(1, 1, k, s) for k, s in zip(kernels, strides)]
    h = torch.zeros(1, 1, samples)
    for c in convs:
        h = c(h) if h.shape[-1] >= c.kernel_size[0] else h[..., :0]
    assert conv_output_frames(samples, kernels, strides) == h.shape[-1]
    assert conv_output_frames(torch.tensor([samples]), kernels, strides).tolist() == [h.shape[-1]]


def test_no_crops_is_a_clear_error():
    with pytest.raises(ValueError, match="at least one crop"):  # was "max() arg is an empty sequence"
        gather_mel_crops(torch.zeros(1, 10, 100), [])
    with pytest.raises(ValueError, match="at least one crop"):
        trim_waves(torch.zeros(1, 100), [], lambda k: k)
