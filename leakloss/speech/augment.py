"""Waveform augmentations: noise at a given SNR, synthetic reverberation, speed and gain changes.

Pure functions on ``[t]`` float tensors; randomness only through the ``generator`` passed in.
"""

from __future__ import annotations

import math

import torch
import torchaudio.functional as AF
from torch import Tensor

from leakloss.constants import SAMPLE_RATE


def add_noise(wave: Tensor, snr_db: float, generator: torch.Generator | None = None, *, color: str = "white") -> Tensor:
    """Add Gaussian noise (white or pink) at ``snr_db`` relative to the signal's power."""
    noise = torch.randn(wave.shape, generator=generator, dtype=torch.float32).to(wave)
    if color == "pink":  # 1/f spectrum by shaping in the frequency domain
        spec = torch.fft.rfft(noise.float())
        f = torch.arange(spec.shape[-1], dtype=torch.float32, device=wave.device).clamp(min=1.0)
        noise = torch.fft.irfft(spec / f.sqrt(), n=wave.shape[-1]).to(wave)
    signal_power = wave.float().pow(2).mean().clamp(min=1e-10)
    noise_power = noise.float().pow(2).mean().clamp(min=1e-10)
    scale = torch.sqrt(signal_power / (noise_power * 10 ** (snr_db / 10)))
    return wave + noise * scale.to(wave.dtype)


def reverberate(wave: Tensor, rt60: float, sample_rate: int = SAMPLE_RATE, generator: torch.Generator | None = None) -> Tensor:
    """Convolve with an exponentially decaying noise impulse response of reverberation time ``rt60`` s."""
    n = max(int(rt60 * sample_rate), 1)
    t = torch.arange(n, dtype=torch.float32) / sample_rate
    ir = torch.randn(n, generator=generator) * torch.exp(-6.9 * t / max(rt60, 1e-3))
    ir[0] = 1.0
    ir = (ir / ir.norm()).to(wave)
    out = AF.fftconvolve(wave, ir)[: wave.shape[-1]]
    return out * (wave.abs().max() / out.abs().max().clamp(min=1e-8))


def change_speed(wave: Tensor, factor: float, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """Play ``factor`` times faster (tempo and pitch together), by resampling."""
    if abs(factor - 1.0) < 1e-3:
        return wave
    # rates on a 400 Hz grid keep the resampling ratio small (a 16 kHz:14953 Hz ratio costs seconds)
    new_rate = max(int(round(sample_rate / factor / 400)) * 400, 400)
    g = math.gcd(sample_rate, new_rate)
    return AF.resample(wave, sample_rate // g, new_rate // g)


def random_augment(wave: Tensor, generator: torch.Generator, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """The recognizers' training augmentation: speed 0.85-1.15 (p=.4), reverb (p=.3), noise 5-40 dB (p=.6), gain."""
    def u(lo: float, hi: float) -> float:
        return lo + (hi - lo) * float(torch.rand((), generator=generator))

    if u(0, 1) < 0.4:
        wave = change_speed(wave, u(0.85, 1.15), sample_rate)
    if u(0, 1) < 0.3:
        wave = reverberate(wave, u(0.1, 0.6), sample_rate, generator)
    if u(0, 1) < 0.6:
        wave = add_noise(wave, u(5.0, 40.0), generator, color="pink" if u(0, 1) < 0.5 else "white")
    return wave * u(0.3, 1.0) / wave.abs().max().clamp(min=1e-6)
