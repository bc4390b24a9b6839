"""Physical splices: cut a vowel nucleus out, or swap it for another vowel's, with short fades.

Pure functions on ``[t]`` waveforms; times in seconds at ``sample_rate``. The sham is the same
operation with the original nucleus put back, so it carries the same joins as the altered clip and
a detector cannot win by hearing the splice.
"""

from __future__ import annotations

import torch
from torch import Tensor

from leakloss.constants import SAMPLE_RATE

FADE_S = 0.002


def _fade(n: int, like: Tensor) -> Tensor:
    return torch.linspace(0.0, 1.0, n + 2, dtype=like.dtype, device=like.device)[1:-1]


def _faded(piece: Tensor, fade: int, fade_in: bool, fade_out: bool) -> Tensor:
    piece = piece.clone()
    n = min(fade, piece.numel() // 2)
    if n > 0 and fade_in:
        piece[:n] *= _fade(n, piece)
    if n > 0 and fade_out:
        piece[-n:] *= _fade(n, piece).flip(0)
    return piece


def replace_span(wave: Tensor, start: float, end: float, insert: Tensor, sample_rate: int = SAMPLE_RATE,
                 fade_s: float = FADE_S) -> Tensor:
    """``wave`` with ``[start, end)`` replaced by ``insert`` (empty = deletion), joined with fades."""
    a, b = int(round(start * sample_rate)), int(round(end * sample_rate))
    if not 0 <= a < b <= wave.numel():
        raise ValueError(f"span {start:.3f}-{end:.3f}s is outside the clip of {wave.numel() / sample_rate:.3f}s")
    fade = max(int(round(fade_s * sample_rate)), 1)
    parts = [_faded(wave[:a], fade, False, True)]
    if insert.numel():
        parts.append(_faded(insert.to(wave), fade, True, True))
    parts.append(_faded(wave[b:], fade, True, False))
    return torch.cat(parts)


def delete_span(wave: Tensor, start: float, end: float, sample_rate: int = SAMPLE_RATE) -> Tensor:
    return replace_span(wave, start, end, wave.new_zeros(0), sample_rate)


def sham_span(wave: Tensor, start: float, end: float, sample_rate: int = SAMPLE_RATE) -> Tensor:
    """The control: the same cut, original nucleus put back."""
    a, b = int(round(start * sample_rate)), int(round(end * sample_rate))
    return replace_span(wave, start, end, wave[a:b], sample_rate)
