"""Edits of a reading that descend a training signal on the *input*: what a generator could do to satisfy it.

``benchmarks/direction.py`` descends the leak penalty through them and asks another instrument whether the
reading changed; the frame head's adversarial positives (``train_heads.adversarial``) are Hindi-ward readings
edited by :class:`BandGain` until the head stops flagging them. Each edit is an ``nn.Module`` whose ``forward()``
returns the edited wave ``[t]`` (16 kHz) and whose parameters are the edit; the initial parameters give the
reading back (:class:`VoicedInsert`: with near silence added, ``sigmoid(-4)`` of its level).

- :class:`BandGain`: log-gains on mel bands per 5 ms frame inside the site windows, on the reading's own STFT
  (phase kept). It re-weights frames that are there, so it cannot put back a vowel the reading dropped.
- :class:`VoicedInsert`: the same gains plus a voiced source added in the windows, so that it can.
- :class:`SampleDelta`: a free delta per sample (adversarially easy).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torchaudio
from torch import Tensor, nn

from leakloss.constants import SAMPLE_RATE

HOP = 80  # STFT hop in samples of the edits (5 ms)
WIN = 400
N_FFT = 512


class BandGain(nn.Module):
    """``forward() -> [t]``: the reading with learned mel-band log-gains inside the site windows."""

    def __init__(self, wave: Tensor, sites, pad_s: float = 0.03, bands: int = 32, limit: float = 3.0) -> None:
        super().__init__()
        self.limit, self.length = limit, wave.numel()
        self.register_buffer("window", torch.hann_window(WIN, dtype=wave.dtype))
        self.register_buffer("spec", torch.stft(wave, N_FFT, HOP, WIN, self.window, return_complex=True))  # [f, m]
        fb = torchaudio.functional.melscale_fbanks(N_FFT // 2 + 1, 0.0, SAMPLE_RATE / 2, bands, SAMPLE_RATE)
        fb[0, 0] = 1.0  # the DC bin belongs to the lowest band
        self.register_buffer("fb", fb / fb.sum(1, keepdim=True).clamp(min=1e-6))  # [f, j], rows sum to 1
        frames = torch.zeros(self.spec.shape[-1], dtype=torch.bool)
        for s in sites:
            a, b = int((s.start - pad_s) * SAMPLE_RATE / HOP), math.ceil((s.end + pad_s) * SAMPLE_RATE / HOP)
            frames[max(a, 0): b + 1] = True
        self.register_buffer("frames", frames.nonzero().flatten())
        self.log_gain = nn.Parameter(torch.zeros(bands, self.frames.numel(), dtype=wave.dtype))

    def in_windows(self, per_band: Tensor) -> Tensor:
        """``[j, m']`` values at the site frames -> ``[f, m]`` per STFT bin and frame (zero outside the windows)."""
        full = per_band.new_zeros(self.fb.shape[1], self.spec.shape[-1]).index_copy(1, self.frames, per_band)
        return self.fb @ full

    def edited_spectrum(self) -> Tensor:
        """``[f, m]``: the reading's STFT with the learned gains (within ±limit nepers) applied."""
        return self.spec * torch.exp(self.in_windows(self.limit * torch.tanh(self.log_gain / self.limit)))

    def forward(self) -> Tensor:
        return torch.istft(self.edited_spectrum(), N_FFT, HOP, WIN, self.window, length=self.length)


class VoicedInsert(BandGain):
    """``forward() -> [t]``: :class:`BandGain` plus a voiced source added inside the site windows, so that an edit
    can put back a vowel the reading dropped (band gains only re-weight frames that are there).

    The source is a pulse train at the reading's median f0 (70-300 Hz), its STFT normalised to a mean magnitude of
    1 per frame, shaped by learned non-negative amplitudes per mel band and frame of at most ``amplitude_limit``
    times the reading's own mean magnitude in that band over its louder half of frames (a voiced-frame proxy):
    at most the voice's average loud spectrum. The amplitudes start at ``sigmoid(-4)`` of that, near silence."""

    def __init__(self, wave: Tensor, sites, pad_s: float = 0.03, bands: int = 32, limit: float = 3.0,
                 amplitude_limit: float = 1.0) -> None:
        super().__init__(wave, sites, pad_s, bands, limit)
        magnitude = self.spec.abs()
        energy = magnitude.pow(2).sum(0)
        loud = magnitude[:, energy >= energy.median()]  # [f, m'']
        band_mean = (self.fb.T @ loud).mean(1) / self.fb.sum(0).clamp(min=1e-6)  # [j]
        self.register_buffer("level", amplitude_limit * band_mean)
        f0 = torchaudio.functional.detect_pitch_frequency(wave[None].float(), SAMPLE_RATE)
        self.f0 = float(f0.median().clamp(70.0, 300.0))
        period = SAMPLE_RATE / self.f0
        pulses = torch.zeros_like(wave)
        pulses[torch.arange(0, wave.numel(), period).long()] = 1.0
        source = torch.stft(pulses, N_FFT, HOP, WIN, self.window, return_complex=True)
        self.register_buffer("source", source / source.abs().mean(0, keepdim=True).clamp(min=1e-8))
        self.amplitude = nn.Parameter(torch.full((bands, self.frames.numel()), -4.0, dtype=wave.dtype))

    def amplitudes(self) -> Tensor:
        """``[bands, site frames]`` in [0, 1]: the share of :attr:`level` each band adds at each frame."""
        return torch.sigmoid(self.amplitude)

    def edited_spectrum(self) -> Tensor:
        return super().edited_spectrum() + self.source * self.in_windows(self.level[:, None] * self.amplitudes())


class SampleDelta(nn.Module):
    """``forward() -> [t]``: the reading plus a free per-sample delta (clamped to [-1, 1])."""

    def __init__(self, wave: Tensor) -> None:
        super().__init__()
        self.register_buffer("wave", wave)
        self.delta = nn.Parameter(torch.zeros_like(wave))

    def forward(self) -> Tensor:
        return (self.wave + self.delta).clamp(-1, 1)


def random_copies(x: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """``[t] -> [k, t]``: noise at 15-40 dB SNR, ±3 dB gain, a 0-2.5 ms delay (expectation over transformations)."""
    rms = x.detach().pow(2).mean().sqrt()
    out = []
    for _ in range(k):
        gain = 10 ** (torch.empty(1).uniform_(-3, 3, generator=generator) / 20)
        snr = torch.empty(1).uniform_(15, 40, generator=generator)
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype) * rms / 10 ** (snr / 20)
        shift = int(torch.randint(0, 40, (1,), generator=generator))
        out.append((nn.functional.pad(x, (shift, 0))[: x.numel()] + noise) * gain)
    return torch.stack(out)


def random_control(edit: nn.Module, make: Callable[[], nn.Module], generator: torch.Generator) -> nn.Module:
    """A fresh edit from ``make()`` whose parameters point in random directions with the learned ones' sizes: the
    same size of change, no gradient behind it. Gains (and free samples) get a normal draw scaled to the learned
    norm. A :class:`VoicedInsert`'s amplitudes get a random non-negative map (one normal draw, made absolute)
    scaled so that the magnitude it inserts, ``level x amplitude`` per band and frame, has the learned map's norm:
    the same inserted energy in a random spectral shape."""
    control = make()
    with torch.no_grad():
        for (name, learned), mine in zip(edit.named_parameters(), control.parameters(), strict=True):
            if name == "amplitude":
                draw = torch.randn(learned.shape, generator=generator, dtype=learned.dtype).abs()
                mine.copy_(torch.logit(matched_amplitudes(draw, edit.amplitudes(), edit.level)))
            else:
                noise = torch.randn(learned.shape, generator=generator, dtype=learned.dtype)
                mine.copy_(noise / noise.norm() * learned.norm())
    return control


def matched_amplitudes(shape: Tensor, learned: Tensor, level: Tensor, eps: float = 1e-6) -> Tensor:
    """``shape [j, m] >= 0`` scaled by ``s`` and clipped to ``[eps, 1 - eps]`` with ``s`` found by bisection so that
    ``||level[:, None] * result||`` equals ``||level[:, None] * learned||`` (reachable since ``learned <= 1``, up to the
    ``1 - eps`` cap: a saturated map is matched within ~``eps``, relative)."""
    weight = level[:, None]
    target = float((weight * learned).norm())

    def inserted(s: float) -> float:
        return float((weight * (s * shape).clamp(eps, 1 - eps)).norm())

    low, high = 0.0, 1.0
    while inserted(high) < target and high < 1e12:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if inserted(mid) < target else (low, mid)
    return (high * shape).clamp(eps, 1 - eps)


def descend(penalty: Callable[..., tuple], edit: nn.Module, sites, steps: int, lr: float, copies: int,
            generator: torch.Generator) -> list[float]:
    """Adam on ``edit``'s parameters for ``steps`` steps against ``penalty(waves=[k, t], sites=[...] * k)`` (a
    :class:`leakloss.penalty.LeakPenalty` or anything called the same), averaged over ``copies`` random copies of
    the edited reading (:func:`random_copies`; 1: the reading itself). Returns the loss per step."""
    opt = torch.optim.Adam(edit.parameters(), lr=lr)
    curve = []
    for _ in range(steps):
        x = edit()
        batch = random_copies(x, copies, generator) if copies > 1 else x[None]
        loss, _ = penalty(waves=batch, sites=[sites] * batch.shape[0])
        opt.zero_grad()
        loss.backward()
        opt.step()
        curve.append(float(loss.detach()))
    return curve


