"""Waveform augmentations: noise at a given SNR, synthetic reverberation, speed and gain changes, and
(from libraries) tempo and pitch (audiomentations' Signalsmith stretch), room impulse responses
(pyroomacoustics' image-source shoebox rooms), plus formant warps, 8 kHz band-limiting, codec-like
mu-law quantisation and resynthesis through the embedded vocoder.

Pure functions on ``[t]`` float tensors (16 kHz); randomness only through the ``generator`` passed in:
every random parameter is drawn from it, the libraries only do the signal processing (deterministic),
so a seed fixes the output. :func:`augment_reading` keeps a reading's phone times true to the audio
(a tempo change by ``rate`` moves every time ``t`` to ``t / rate``; nothing else moves them).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import torch
import torchaudio.functional as AF
from torch import Tensor

from leakloss.constants import RECOGNIZER_TRAINING_PEAKS, SAMPLE_RATE
from leakloss.functional.leak import peak_limited


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
    return wave * u(*RECOGNIZER_TRAINING_PEAKS) / wave.abs().max().clamp(min=1e-6)


# --- library-backed augmentations ------------------------------------------------------------------

def time_stretch(wave: Tensor, rate: float, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """Tempo change without pitch change (``rate`` > 1 faster): ``[t]`` -> ``[~t / rate]``.
    audiomentations' Signalsmith stretch, whose latency it compensates: an event at ``s`` seconds
    lands at ``s / rate``."""
    if abs(rate - 1.0) < 1e-3:
        return wave
    from audiomentations import TimeStretch

    tr = TimeStretch(min_rate=rate, max_rate=rate, leave_length_unchanged=False, p=1.0)
    out = tr(wave.detach().cpu().numpy().astype(np.float32), sample_rate)
    return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)).to(wave.device)


def pitch_shift(wave: Tensor, semitones: float, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """Pitch (and formants with it) moved by ``semitones``, tempo and length unchanged."""
    if abs(semitones) < 1e-3:
        return wave
    from audiomentations import PitchShift

    tr = PitchShift(min_semitones=semitones, max_semitones=semitones, p=1.0)
    out = tr(wave.detach().cpu().numpy().astype(np.float32), sample_rate)
    out = torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32)).to(wave.device)
    return _fit(out, wave.shape[-1])


def _fit(x: Tensor, n: int) -> Tensor:
    return x[:n] if x.shape[-1] >= n else torch.nn.functional.pad(x, (0, n - x.shape[-1]))


def formant_warp(wave: Tensor, alpha: float, n_fft: int = 512, hop: int = 128, lifter: int = 24) -> Tensor:
    """Vocal-tract length warp: the spectral envelope moved by ``alpha`` along frequency (``alpha`` > 1:
    a shorter tract, formants up), the harmonics (pitch) left where they are.

    Per STFT frame, the envelope is the low-quefrency part (``lifter`` coefficients) of the real
    cepstrum; the magnitude is divided by it and multiplied by the envelope read at ``f / alpha``;
    the phase is kept. ``[t]`` -> ``[t]``.
    """
    if abs(alpha - 1.0) < 1e-4:
        return wave
    x = wave.float()
    window = torch.hann_window(n_fft, device=x.device)
    spec = torch.stft(x, n_fft, hop, window=window, return_complex=True)  # [f, n]
    log_mag = torch.log(spec.abs().clamp(min=1e-8))
    ceps = torch.fft.irfft(log_mag, n=n_fft, dim=0)  # real cepstrum per frame [n_fft, n]
    keep = torch.zeros(n_fft, 1, device=x.device)
    keep[:lifter] = 1.0
    keep[n_fft - lifter + 1:] = 1.0
    env = torch.fft.rfft(ceps * keep, dim=0).real  # smooth log envelope [f, n]
    bins = env.shape[0]
    src = torch.arange(bins, dtype=torch.float32, device=x.device) / alpha  # read the envelope at f / alpha
    lo = src.floor().long().clamp(0, bins - 1)
    hi = (lo + 1).clamp(max=bins - 1)
    frac = (src - lo.float()).clamp(0, 1)[:, None]
    warped = env[lo] * (1 - frac) + env[hi] * frac
    warped = torch.where((src <= bins - 1)[:, None], warped, env[-1:].expand_as(warped))
    out_spec = torch.polar(torch.exp(log_mag - env + warped), torch.angle(spec))
    out = torch.istft(out_spec, n_fft, hop, window=window, length=x.shape[-1])
    return (out * (x.abs().max() / out.abs().max().clamp(min=1e-8))).to(wave.dtype)


def room_impulse_response(rt60: float, room_dim: tuple[float, float, float], source: tuple[float, float, float],
                          mic: tuple[float, float, float], sample_rate: int = SAMPLE_RATE) -> Tensor:
    """A shoebox room's impulse response (pyroomacoustics image-source method, absorption from
    Sabine's formula for ``rt60`` s), cut to start at its direct path (so times do not move), peak 1."""
    import pyroomacoustics as pra

    absorption, max_order = pra.inverse_sabine(rt60, list(room_dim))
    room = pra.ShoeBox(list(room_dim), fs=sample_rate, materials=pra.Material(absorption),
                       max_order=min(max_order, 40))
    room.add_source(list(source))
    room.add_microphone(list(mic))
    room.compute_rir()
    rir = torch.tensor(np.asarray(room.rir[0][0]), dtype=torch.float32)
    onset = int(rir.abs().argmax())
    rir = rir[onset:]
    return rir / rir.abs().max().clamp(min=1e-8)


def convolve_rir(wave: Tensor, rir: Tensor) -> Tensor:
    """``wave`` heard in the room: convolved with ``rir`` (starting at its direct path), same length and peak."""
    out = AF.fftconvolve(wave, rir.to(wave))[: wave.shape[-1]]
    return out * (wave.abs().max() / out.abs().max().clamp(min=1e-8))


def band_limit(wave: Tensor, narrow_rate: int = 8_000, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """Telephone bandwidth: down to ``narrow_rate`` (8 kHz: nothing above 4 kHz survives) and back up."""
    g = math.gcd(sample_rate, narrow_rate)
    low = AF.resample(wave, sample_rate // g, narrow_rate // g)
    return _fit(AF.resample(low, narrow_rate // g, sample_rate // g), wave.shape[-1])


def mu_law_quantize(wave: Tensor, bits: int = 8) -> Tensor:
    """Codec-like quantisation: G.711-style mu-law companding to ``2**bits`` levels and back."""
    peak = wave.abs().max().clamp(min=1e-8)
    q = AF.mu_law_encoding((wave / peak).clamp(-1, 1), 2 ** bits)
    return AF.mu_law_decoding(q, 2 ** bits).to(wave.dtype) * peak


def vocoder_resynthesis(wave: Tensor, vocoder=None, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """``wave`` through mel analysis and the embedded vocoder (``MelToWave.embedded()``) and back to
    16 kHz, trimmed or padded to the input length: the vocoder's own colouring of any voice."""
    from leakloss.constants import MEL_SAMPLE_RATE
    from leakloss.vocoder import log_mel

    if vocoder is None:
        vocoder = _embedded_vocoder()
    with torch.no_grad():
        w24 = AF.resample(wave.float(), sample_rate, MEL_SAMPLE_RATE)
        mel = log_mel(w24[None])
        out = vocoder(mel)[0]
    if vocoder.sample_rate_out != sample_rate:
        out = AF.resample(out, vocoder.sample_rate_out, sample_rate)
    return _fit(out, wave.shape[-1]).to(wave.dtype)


_VOCODER = None


def _embedded_vocoder():
    global _VOCODER
    if _VOCODER is None:
        from leakloss.vocoder import MelToWave

        _VOCODER = MelToWave.embedded()
    return _VOCODER


# --- seeded chains, with phone times kept true ------------------------------------------------------

@dataclass(frozen=True)
class AugmentConfig:
    """Probabilities and ranges of :func:`augment_chain` (each step independent)."""

    p_tempo: float = 0.4
    tempo: tuple[float, float] = (0.8, 1.25)
    p_pitch: float = 0.4
    semitones: tuple[float, float] = (-4.0, 4.0)
    p_formant: float = 0.4
    formant: tuple[float, float] = (0.85, 1.18)
    p_room: float = 0.3
    rt60: tuple[float, float] = (0.15, 0.8)
    p_band: float = 0.2
    p_mulaw: float = 0.2
    p_vocoder: float = 0.0  # off unless asked: it needs the embedded vocoder's weights
    p_noise: float = 0.6
    snr_db: tuple[float, float] = (5.0, 30.0)


def _uniform(g: torch.Generator, lo: float, hi: float) -> float:
    return lo + (hi - lo) * float(torch.rand((), generator=g))


#: Bump when :func:`augment_chain` makes other audio for the same seed (caches of augmented copies are keyed by
#: it). 2: a copy beyond full scale is scaled into [-1, 1], no longer clipped by its users.
AUGMENT_VERSION = 2


def augment_chain(wave: Tensor, generator: torch.Generator, config: AugmentConfig = AugmentConfig(),
                  sample_rate: int = SAMPLE_RATE, vocoder=None) -> tuple[Tensor, float, list[str]]:
    """One random chain: (augmented wave, tempo rate applied, names of the steps applied).
    The wave stays within [-1, 1]: scaled down by its peak only when a step took it beyond.
    Every draw is made (in a fixed order) whether or not its step runs, so one step's probability does
    not shift the others' parameters."""
    c, g, applied = config, generator, []
    draws = {name: (_uniform(g, 0, 1), _uniform(g, *rng)) for name, rng in (
        ("tempo", c.tempo), ("pitch", c.semitones), ("formant", c.formant), ("room", c.rt60), ("band", (0, 1)),
        ("mulaw", (0, 1)), ("vocoder", (0, 1)), ("noise", c.snr_db))}
    room_geometry = [_uniform(g, 0, 1) for _ in range(9)]
    rate = 1.0
    if draws["formant"][0] < c.p_formant:
        wave = formant_warp(wave, draws["formant"][1])
        applied.append(f"formant={draws['formant'][1]:.3f}")
    if draws["pitch"][0] < c.p_pitch:
        wave = pitch_shift(wave, draws["pitch"][1], sample_rate)
        applied.append(f"pitch={draws['pitch'][1]:.2f}st")
    if draws["tempo"][0] < c.p_tempo:
        rate = draws["tempo"][1]
        wave = time_stretch(wave, rate, sample_rate)
        applied.append(f"tempo={rate:.3f}")
    if draws["vocoder"][0] < c.p_vocoder:
        wave = vocoder_resynthesis(wave, vocoder, sample_rate)
        applied.append("vocoder")
    if draws["room"][0] < c.p_room:
        u = room_geometry
        dim = (3.0 + 5.0 * u[0], 3.0 + 4.0 * u[1], 2.5 + 1.0 * u[2])
        src = tuple(0.5 + (d - 1.0) * x for d, x in zip(dim, u[3:6]))
        mic = tuple(0.5 + (d - 1.0) * x for d, x in zip(dim, u[6:9]))
        wave = convolve_rir(wave, room_impulse_response(draws["room"][1], dim, src, mic, sample_rate))
        applied.append(f"room_rt60={draws['room'][1]:.2f}")
    if draws["band"][0] < c.p_band:
        wave = band_limit(wave, 8_000, sample_rate)
        applied.append("8kHz")
    if draws["mulaw"][0] < c.p_mulaw:
        wave = mu_law_quantize(wave, 8)
        applied.append("mulaw8")
    if draws["noise"][0] < c.p_noise:
        wave = add_noise(wave, draws["noise"][1], g, color="pink" if _uniform(g, 0, 1) < 0.5 else "white")
        applied.append(f"snr={draws['noise'][1]:.1f}dB")
    # noise, pitch and tempo add to the input's peak (a full-scale reading came out at up to 1.9, which its users
    # clipped, squaring off the loudest vowels): scaled into full scale only when over, else bit for bit as it was
    return peak_limited(wave), rate, applied



def scale_times(reading, rate: float):
    """The reading's times after a tempo change by ``rate`` (every time ``t`` -> ``t / rate``); the
    same type back (a Festival/Piper reading keeps its segments, moved too)."""
    changes = {"phone_starts": [t / rate for t in reading.phone_starts],
               "phone_ends": [t / rate for t in getattr(reading, "phone_ends", [])],
               "word_spans": [(a / rate, b / rate) for a, b in reading.word_spans]}
    if hasattr(reading, "segments"):
        changes["segments"] = [dataclasses.replace(s, start=s.start / rate, end=s.end / rate) for s in reading.segments]
    return dataclasses.replace(reading, **changes)


def augment_reading(reading, generator: torch.Generator, config: AugmentConfig = AugmentConfig(),
                    sample_rate: int = SAMPLE_RATE, vocoder=None):
    """A reading through :func:`augment_chain`: (new reading with the augmented waveform and its phone
    times moved by the tempo change, names of the steps applied)."""
    wave, rate, applied = augment_chain(reading.waveform, generator, config, sample_rate, vocoder)
    out = scale_times(reading, rate) if rate != 1.0 else reading
    return dataclasses.replace(out, waveform=wave), applied
