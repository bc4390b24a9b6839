"""The mel bridge's exact arithmetic (leakloss.functional.mel_bridge) against naive references: which Vocos bins
Whisper hears, the frame grid, the level and Whisper's floor."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.acoustic.whisper_encoder import log_mel as whisper_log_mel
from leakloss.acoustic.whisper_encoder import mel_filters
from leakloss.functional.mel_bridge import (
    level_normalize,
    to_whisper_grid,
    vocos_bins_below,
    whisper_floor_scale,
    whisper_frames_for,
    whisper_grid_positions,
)


def test_the_bins_under_8khz_are_the_86_lowest_and_all_bins_reach_12khz():
    assert vocos_bins_below(8000.0) == 86
    assert vocos_bins_below(12000.0) == 100
    assert vocos_bins_below(4000.0) < vocos_bins_below(6000.0) < 86


def test_the_grid_is_whisper_s_10ms_on_vocos_frames():
    pos = whisper_grid_positions(4)
    torch.testing.assert_close(pos, torch.tensor([0.0, 0.9375, 1.875, 2.8125]))
    assert whisper_frames_for(0) == 0 and whisper_frames_for(1) == 2 and whisper_frames_for(4) == 4


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 50), st.integers(0, 2**16))
def test_to_whisper_grid_matches_numpy_interp(n, n_out, seed):
    x = torch.randn(2, n, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    got = to_whisper_grid(x, n_out)
    pos = whisper_grid_positions(n_out).double().numpy()
    for b in range(2):
        for d in range(3):
            want = np.interp(pos, np.arange(n), x[b, :, d].numpy())  # holds the last value past the end
            np.testing.assert_allclose(got[b, :, d].numpy(), want, atol=1e-12)


def test_to_whisper_grid_of_no_frame_is_zeros_and_its_gradient_checks():
    assert to_whisper_grid(torch.zeros(1, 0, 5), 3).shape == (1, 3, 5)
    x = torch.randn(1, 6, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: to_whisper_grid(v, 7), (x,))


def test_level_normalize_is_the_naive_mean_energy_and_ignores_gain_and_padding():
    x = torch.randn(2, 9, 4, dtype=torch.float64)
    lengths = torch.tensor([9, 5])
    got = level_normalize(x, lengths)
    for i, n in enumerate(lengths.tolist()):
        energy = np.exp(2 * x[i, :n].numpy()).sum(-1).mean()
        np.testing.assert_allclose(got[i].numpy(), x[i].numpy() - 0.5 * math.log(energy), atol=1e-10)
    louder = x.clone()
    louder[:, :] += 3.0  # a gain of e^3 on the magnitudes
    louder[1, 5:] = 40.0  # padding never counts
    torch.testing.assert_close(level_normalize(louder, lengths)[:, :5], got[:, :5].clone() + 0, atol=1e-9, rtol=0)


def test_level_normalize_never_overflows_and_leaves_an_empty_item_alone():
    x = torch.tensor([[[500.0, 499.0]], [[-500.0, -501.0]]])
    out = level_normalize(x, torch.tensor([1, 1]))
    assert torch.isfinite(out).all() and abs(float(out.exp().pow(2).sum(-1)[0, 0]) - 1) < 1e-4
    y = torch.randn(1, 3, 2)
    torch.testing.assert_close(level_normalize(y, torch.tensor([0])), y)
    v = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: level_normalize(t, torch.tensor([5, 3])), (v,))


def test_whisper_floor_scale_is_whisper_s_own_last_steps():
    """The floor and scale of Whisper's log-mel, on its own log10 mel power of a clip: equal to log_mel's output."""
    wave = torch.randn(1, 8000, generator=torch.Generator().manual_seed(0)) * 0.05
    wave[:, 4000:] *= 1e-4  # a quiet half, so that the floor is active
    frames = 25
    x = torch.nn.functional.pad(wave, (0, frames * 320 + 200 - 8000))
    spec = torch.stft(x, 400, 160, window=torch.hann_window(400), return_complex=True, center=True,
                      pad_mode="reflect")
    log10_power = torch.log10((mel_filters() @ spec.abs() ** 2).clamp(min=1e-10))[..., : 2 * frames]
    got = whisper_floor_scale(log10_power.transpose(1, 2), torch.tensor([2 * frames]))
    want = whisper_log_mel(wave, mel_filters(), frames)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert bool((got == got.min()).sum() > 10)  # the floor was active


def test_whisper_floor_scale_takes_each_item_s_peak_over_its_own_frames():
    y = torch.zeros(2, 6, 3)
    y[0, 5] = 20.0  # past item 0's 4 frames: had it counted, the floor (12) would lift its frames to 4.0
    y[1, :, 0] = -30.0  # item 1: 0 is its peak, so -30 is floored at -8
    out = whisper_floor_scale(y, torch.tensor([4, 6]))
    assert torch.equal(out[0, :, :4], torch.ones(3, 4))
    assert float(out[1, 0].max()) == pytest.approx((-8.0 + 4) / 4) and float(out[1, 1:].min()) == pytest.approx(1.0)
