import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.speech import augment as A

SR = 16_000
pytest.importorskip("audiomentations")


def _bursts(times, total=2.0, freq=440.0):
    x = torch.zeros(int(total * SR))
    n = 800
    for t in times:
        i = int(t * SR)
        x[i:i + n] = torch.sin(torch.arange(n) * 2 * math.pi * freq / SR)
    return x


def _onsets(y, thr=0.3, gap=400):
    idx = torch.nonzero(y.abs() > thr).flatten().tolist()
    return [idx[0]] + [b for a, b in zip(idx, idx[1:]) if b - a > gap]


@pytest.mark.parametrize("rate", [0.8, 1.25])
def test_time_stretch_moves_events_to_t_over_rate(rate):
    times = [0.5, 1.0, 1.5]
    y = A.time_stretch(_bursts(times), rate)
    assert abs(y.numel() / SR - 2.0 / rate) < 0.02
    got = [o / SR for o in _onsets(y)]
    assert len(got) == 3 and all(abs(g - t / rate) < 0.015 for g, t in zip(got, times))


def _peak_freq(y):
    spec = torch.fft.rfft(y * torch.hann_window(y.numel()))
    return float(spec.abs().argmax()) * SR / y.numel()


def test_pitch_shift_an_octave_doubles_the_frequency_keeps_length():
    x = torch.sin(torch.arange(SR) * 2 * math.pi * 200 / SR) * 0.5
    y = A.pitch_shift(x, 12.0)
    assert y.numel() == x.numel()
    assert abs(_peak_freq(y[2000:-2000]) - 400) < 10


def _vowel(f0=120.0, formant=800.0, seconds=1.0):
    """A pulse train at f0 through one resonance at ``formant``: harmonics under one envelope peak."""
    n = int(seconds * SR)
    src = torch.zeros(n)
    src[:: int(SR / f0)] = 1.0
    r, theta = 0.97, 2 * math.pi * formant / SR
    a1, a2 = -2 * r * math.cos(theta), r * r
    y = np.zeros(n)
    s = src.numpy()
    for i in range(n):  # naive resonator (the reference filter)
        y[i] = s[i] - a1 * (y[i - 1] if i else 0) - a2 * (y[i - 2] if i > 1 else 0)
    y = torch.tensor(y, dtype=torch.float32)
    return y / y.abs().max()


def _envelope_peak_and_f0(y):
    seg = y[2000:-2000]
    spec = torch.fft.rfft(seg * torch.hann_window(seg.numel())).abs()
    freqs = torch.arange(spec.numel()) * SR / seg.numel()
    smooth = torch.nn.functional.avg_pool1d(spec[None, None], 201, 1, 100)[0, 0]  # ~ 300 Hz wide: the envelope
    band = (freqs > 200) & (freqs < 3000)
    peak = float(freqs[band][smooth[band].argmax()])
    ac = torch.fft.irfft(torch.fft.rfft(seg, 2 * seg.numel()).abs() ** 2)[: seg.numel()]
    lag = int(ac[int(SR / 400):int(SR / 60)].argmax()) + int(SR / 400)
    return peak, SR / lag


def test_formant_warp_moves_the_envelope_not_the_pitch():
    x = _vowel()
    peak0, f00 = _envelope_peak_and_f0(x)
    y = A.formant_warp(x, 1.25)
    assert y.shape == x.shape and torch.isfinite(y).all()
    peak1, f01 = _envelope_peak_and_f0(y)
    assert abs(peak0 - 800) < 80
    assert 1.12 < peak1 / peak0 < 1.4
    assert abs(f01 - f00) / f00 < 0.03
    assert torch.equal(A.formant_warp(x, 1.0), x)


def test_room_impulse_response_starts_at_the_direct_path_and_decays_at_rt60():
    pytest.importorskip("pyroomacoustics")
    rt60 = 0.5
    rir = A.room_impulse_response(rt60, (6.0, 5.0, 3.0), (2.0, 2.0, 1.5), (4.0, 3.0, 1.6))
    assert float(rir[0].abs()) == pytest.approx(1.0)
    energy = torch.flip(torch.cumsum(torch.flip(rir.double() ** 2, [0]), 0), [0])  # Schroeder integral
    db = 10 * torch.log10(energy / energy[0])
    t5, t25 = int((db > -5).sum()), int((db > -25).sum())
    t60 = (t25 - t5) / SR * 3.0  # T20 extrapolated to 60 dB
    assert 0.6 * rt60 < t60 < 1.5 * rt60
    x = _bursts([0.5])
    y = A.convolve_rir(x, rir)
    # the direct path is at lag 0: the sound starts in the room exactly when it starts dry
    assert y.shape == x.shape and _onsets(y, thr=1e-3)[0] == _onsets(x, thr=1e-3)[0]


def _band_energy(y, lo, hi):
    spec = torch.fft.rfft(y).abs() ** 2
    f = torch.arange(spec.numel()) * SR / y.numel()
    return float(spec[(f >= lo) & (f < hi)].sum())


def test_band_limit_removes_everything_above_4k():
    x = torch.randn(SR, generator=torch.Generator().manual_seed(0)) * 0.1
    y = A.band_limit(x)
    assert y.shape == x.shape
    assert _band_energy(y, 4300, 8000) < 1e-2 * _band_energy(x, 4300, 8000)
    assert _band_energy(y, 4600, 8000) < 1e-3 * _band_energy(x, 4600, 8000)
    assert _band_energy(y, 5000, 8000) < 1e-4 * _band_energy(x, 5000, 8000)
    assert 0.8 < _band_energy(y, 100, 3000) / _band_energy(x, 100, 3000) < 1.2


def test_mu_law_quantises_to_256_levels():
    x = torch.sin(torch.linspace(0, 60, SR)) * 0.7
    y = A.mu_law_quantize(x, 8)
    assert len(torch.unique(y)) <= 256 and not torch.equal(x, y)
    assert float((x - y).abs().max()) < 0.05


@pytest.mark.parametrize("snr", [5.0, 30.0])
def test_noise_at_the_asked_snr(snr):
    x = torch.sin(torch.arange(SR) * 2 * math.pi * 300 / SR)
    y = A.add_noise(x, snr, torch.Generator().manual_seed(1))
    measured = 10 * math.log10(float(x.pow(2).mean()) / float((y - x).pow(2).mean()))
    assert abs(measured - snr) < 0.2


def test_vocoder_resynthesis_keeps_length():
    from leakloss.vocoder import EMBEDDED_VOCODER

    if not EMBEDDED_VOCODER.with_suffix(".safetensors").exists():
        pytest.skip("embedded vocoder not built")
    x = _vowel(seconds=0.5)
    y = A.vocoder_resynthesis(x)
    assert y.shape == x.shape and torch.isfinite(y).all() and float(y.abs().max()) > 0.01
    assert not torch.allclose(x, y)


def test_chain_is_deterministic_given_the_seed():
    pytest.importorskip("pyroomacoustics")
    x = _vowel(seconds=0.6)
    cfg = A.AugmentConfig(p_tempo=1, p_pitch=1, p_formant=1, p_room=1, p_band=1, p_mulaw=1, p_noise=1)
    a, ra, sa = A.augment_chain(x, torch.Generator().manual_seed(3), cfg)
    b, rb, sb = A.augment_chain(x, torch.Generator().manual_seed(3), cfg)
    c, rc, sc = A.augment_chain(x, torch.Generator().manual_seed(4), cfg)
    assert torch.equal(a, b) and ra == rb and sa == sb and len(sa) == 7
    assert ra != rc and not (a.shape == c.shape and torch.equal(a, c))


def test_augment_reading_moves_phone_times_with_the_tempo():
    from leakloss.speech.synth import Reading

    x = _bursts([0.5, 1.0, 1.5])
    r = Reading(x, ["a", "b", "c"], [0.5, 1.0, 1.5], [0, 0, 1], [(0.5, 1.05), (1.5, 1.55)], phone_ends=[0.55, 1.05, 1.55])
    cfg = A.AugmentConfig(p_tempo=1, tempo=(1.2, 1.2), p_pitch=0, p_formant=0, p_room=0, p_band=0, p_mulaw=0, p_noise=0)
    out, applied = A.augment_reading(r, torch.Generator().manual_seed(0), cfg)
    assert applied == ["tempo=1.200"]
    assert out.phone_starts == pytest.approx([0.5 / 1.2, 1.0 / 1.2, 1.5 / 1.2])
    assert out.phone_ends == pytest.approx([0.55 / 1.2, 1.05 / 1.2, 1.55 / 1.2])
    assert out.word_spans[1] == pytest.approx((1.25, 1.55 / 1.2))
    # and the audio agrees with the moved times
    assert all(abs(o / SR - t) < 0.015 for o, t in zip(_onsets(out.waveform), out.phone_starts))
    assert r.phone_starts == [0.5, 1.0, 1.5]  # the input is not changed


def test_scale_times_moves_festival_segments_too():
    from leakloss.speech.festival import Segment, VoiceReading

    r = VoiceReading(torch.zeros(SR), ["n"], [0.2], [0], [(0.2, 0.4)], phone_ends=[0.4],
                     segments=[Segment("pau", 0.0, 0.2, -1, None), Segment("n", 0.2, 0.4, 0, "n")])
    out = A.scale_times(r, 2.0)
    assert isinstance(out, VoiceReading)
    assert out.segments[1].start == pytest.approx(0.1) and out.segments[1].end == pytest.approx(0.2)
    assert out.phone_starts == [0.1] and out.phone_ends == [0.2]


def test_chain_keeps_a_full_scale_reading_within_full_scale():
    # noise at 5 dB on a full-scale vowel peaked at ~1.5: its users clipped it, squaring off the vowel
    x = _vowel(seconds=0.5)
    cfg = A.AugmentConfig(p_tempo=0, p_pitch=0, p_formant=0, p_room=0, p_band=0, p_mulaw=0, p_noise=1, snr_db=(5.0, 5.0))
    y, _, applied = A.augment_chain(x, torch.Generator().manual_seed(0), cfg)
    assert applied[-1] == "snr=5.0dB"
    assert float(y.abs().max()) == pytest.approx(1.0)  # scaled to full scale, not clipped there
    assert float((y.abs() >= 0.999).float().mean()) < 1e-3


def test_chain_leaves_normal_level_audio_unscaled():
    x = 0.3 * _vowel(seconds=0.5)
    cfg = A.AugmentConfig(p_tempo=0, p_pitch=0, p_formant=0, p_room=0, p_band=0, p_mulaw=0, p_noise=1, snr_db=(20.0, 20.0))
    y, _, _ = A.augment_chain(x, torch.Generator().manual_seed(0), cfg)
    g = torch.Generator().manual_seed(0)
    for _ in range(8 * 2 + 9):  # the chain's draws, made whether or not their step runs
        torch.rand((), generator=g)
    color = "pink" if float(torch.rand((), generator=g)) < 0.5 else "white"
    assert torch.equal(y, A.add_noise(x, 20.0, g, color=color))


_probability = st.sampled_from([0.0, 0.5, 1.0])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), level=st.sampled_from([0.0, 1e-3, 0.3, 1.0]),
       p=st.tuples(*[_probability] * 7), snr=st.floats(-5.0, 40.0))
def test_chain_output_is_finite_and_within_full_scale(seed, level, p, snr):
    pytest.importorskip("pyroomacoustics")
    x = level * _vowel(seconds=0.4)
    cfg = A.AugmentConfig(p_tempo=p[0], p_pitch=p[1], p_formant=p[2], p_room=p[3], p_band=p[4], p_mulaw=p[5],
                          p_noise=p[6], snr_db=(snr, snr))
    y, _, _ = A.augment_chain(x, torch.Generator().manual_seed(seed), cfg)
    assert y.numel() > 0 and bool(torch.isfinite(y).all())
    assert float(y.abs().max()) <= 1.0
