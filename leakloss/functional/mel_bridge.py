"""Grid, level and floor arithmetic of the mel bridge: F5 / Vocos log mels to Whisper's log-mel without a vocoder.

F5-TTS / IndicF5 mels are Vocos features (24 kHz, n_fft 1024, hop 256 = 10.67 ms, 100 htk bins, natural log of
the magnitude); Whisper's encoder reads 16 kHz log10 mel power (n_fft 400, hop 160 = 10 ms, 80 slaney bins to
8 kHz), floored at its maximum - 8 and scaled ``(x + 4) / 4``. The bridge module
(:class:`leakloss.mel_bridge.MelBridge`) learns the spectral part between the two; these functions do the
rest exactly: which Vocos bins carry what Whisper hears, the frame grid, the level (the leak penalty hears every
item at unit RMS; here the mel's own energy stands in for it) and Whisper's floor.
"""

from __future__ import annotations

import torch
from torch import Tensor

from leakloss.constants import (
    MEL_BINS,
    MEL_HOP,
    MEL_N_FFT,
    MEL_SAMPLE_RATE,
    SAMPLE_RATE,
    WHISPER_FLOOR_BELOW_MAX,
    WHISPER_HOP,
)
from leakloss.functional.leak import at_least_fp32

#: Whisper's log-mel frame step in seconds, and the highest frequency it hears.
WHISPER_MEL_HOP_S = WHISPER_HOP / SAMPLE_RATE
WHISPER_TOP_HZ = SAMPLE_RATE / 2


def vocos_bins_below(top_hz: float = WHISPER_TOP_HZ) -> int:
    """How many of the Vocos mel bins (lowest first) have no filter weight above ``top_hz``: the bins that carry
    only what a 16 kHz recognizer hears (86 of 100 for 8 kHz). The bins above vary with a 24 kHz TTS's treble,
    which Whisper never hears, so the bridge does not read them."""
    import torchaudio

    fb = torchaudio.functional.melscale_fbanks(MEL_N_FFT // 2 + 1, 0.0, MEL_SAMPLE_RATE / 2, MEL_BINS,
                                               MEL_SAMPLE_RATE, norm=None, mel_scale="htk")
    freqs = torch.linspace(0, MEL_SAMPLE_RATE / 2, MEL_N_FFT // 2 + 1)
    reaches_above = (fb * (freqs[:, None] > top_hz)).sum(0) > 0
    return int((~reaches_above).sum())


def valid_frames(lengths: Tensor, n: int) -> Tensor:
    """``[b, n]`` bool: frame j of item i is valid when ``j < lengths[i]``."""
    return torch.arange(n, device=lengths.device)[None, :] < lengths[:, None]


def level_normalize(log_mel: Tensor, lengths: Tensor) -> Tensor:
    """``[b, n, d]`` natural-log magnitudes -> the same minus half the log of each item's mean frame energy
    (``sum_d exp(2 x)``, over its ``lengths [b]`` valid frames): the mel of the item scaled to unit mean frame
    energy, as the penalty hears every wave at unit RMS. Differentiable; an item with no valid frame is
    returned unchanged. Computed in log space (logsumexp), so silence or loud input neither under- nor
    overflows."""
    n = log_mel.shape[1]
    x = at_least_fp32(log_mel)
    frame_energy = torch.logsumexp(2 * x, dim=-1)  # [b, n], log of each frame's energy
    valid = valid_frames(lengths.to(x.device), n)
    masked = frame_energy.masked_fill(~valid, float("-inf"))
    count = lengths.to(x.device).clamp(min=1).to(x.dtype)
    log_mean = torch.logsumexp(masked, dim=-1) - count.log()
    log_mean = torch.where(lengths.to(x.device) > 0, log_mean, torch.zeros_like(log_mean))
    return x - 0.5 * log_mean[:, None, None]


def whisper_grid_positions(n_out: int, device: torch.device | None = None) -> Tensor:
    """Fractional Vocos frame index of each of ``n_out`` Whisper mel frames (both are centred STFTs: Vocos frame j
    is at ``j * 256 / 24000`` s, Whisper's frame i at ``i * 160 / 16000`` s)."""
    return torch.arange(n_out, dtype=torch.float32, device=device) * (WHISPER_MEL_HOP_S * MEL_SAMPLE_RATE / MEL_HOP)


def to_whisper_grid(x: Tensor, n_out: int) -> Tensor:
    """``[b, n, d]`` on the Vocos frame grid -> ``[b, n_out, d]`` on Whisper's 10 ms grid, linear interpolation
    between the two nearest frames (the last frame repeats past the end). Differentiable."""
    n = x.shape[1]
    if n == 0:
        return x.new_zeros(x.shape[0], n_out, x.shape[2])
    pos = whisper_grid_positions(n_out, x.device)
    lo = pos.floor().long().clamp(max=n - 1)
    hi = (lo + 1).clamp(max=n - 1)
    frac = (pos - pos.floor()).clamp(max=1.0).to(x.dtype)
    frac = torch.where(lo == n - 1, torch.zeros_like(frac), frac)[None, :, None]
    return x[:, lo] * (1 - frac) + x[:, hi] * frac


def whisper_frames_for(n_mel_frames: int) -> int:
    """Vocos frames needed to interpolate ``n_mel_frames`` Whisper frames: up to the frame after the last position's
    (``floor + 2``; one spare frame when that position is whole)."""
    if n_mel_frames <= 0:
        return 0
    return int(whisper_grid_positions(n_mel_frames)[-1].floor()) + 2


def bridge_frames(encoder_frames: int, receptive_frames: int) -> tuple[int, int, int]:
    """For a group whose longest item the encoder reads on ``encoder_frames`` 20 ms frames: (the Whisper mel frames
    the encoder reads, ``2 * encoder_frames``; the frames the bridge computes, ``receptive_frames`` more, so that an
    item's last frames see the silence after it and not the convs' zero padding; the Vocos frames that needs)."""
    n_out = 2 * encoder_frames
    grid = n_out + receptive_frames
    return n_out, grid, whisper_frames_for(grid)


def whisper_floor_scale(log10_power: Tensor, lengths: Tensor) -> Tensor:
    """``[b, m, 80]`` log10 mel power -> ``[b, 80, m]`` as Whisper's encoder reads it: floored at each item's
    maximum over its ``lengths [b]`` valid frames minus 8, then ``(x + 4) / 4`` (:func:`leakloss.acoustic.
    whisper_encoder.log_mel`'s last steps; frames past an item's length are left to the encoder's mask)."""
    y = at_least_fp32(log10_power)
    valid = valid_frames(lengths.to(y.device), y.shape[1])[..., None]
    peak = y.masked_fill(~valid, float("-inf")).amax(dim=(1, 2))
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))  # no valid frame: any floor
    y = torch.maximum(y, (peak - WHISPER_FLOOR_BELOW_MAX)[:, None, None])
    return ((y + 4.0) / 4.0).transpose(1, 2)
