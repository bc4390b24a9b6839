"""Crop math of the leak penalty: score only windows around the sites instead of the whole batch.

The penalty pools frame logits inside each site's window; a frame's logit depends on a bounded stretch of
input (receptive fields of the head, the recognizer's conv stack, the resampler, the vocoder). So vocoding
and scoring ``site window + context`` gives the same per-site numbers as the whole utterance, except for the
penalty's input scale (mean and RMS over the crops instead of the utterance: :func:`pooled_moments`; the conv stack's
LayerNorms make the loss nearly scale-free, measured in the tests). Units: mel frames (24 kHz, hop 256) for the
vocoder, seconds for the sites.

Two grids must line up for the cropped computation to reproduce the full one sample for sample: the
24k -> 16k resampler's phase (a crop starts on a mel frame whose 24 kHz sample index is a multiple of 3) and the
recognizer's conv frames (5 ms): :func:`grid_frames` gives the mel-frame step on which both hold (15 frames).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from leakloss.functional.leak import at_least_fp32
from leakloss.timing import TimedSite


def conv_receptive_field(kernels: Sequence[int], strides: Sequence[int]) -> int:
    """Input samples one output frame of a stack of unpadded strided convs sees (wav2vec2 stack to a layer):
    also the fewest samples the stack accepts (160 = 10 ms for layer 4 of the wav2vec 2.0 stack)."""
    field, jump = 1, 1
    for k, s in zip(kernels, strides, strict=True):
        field += (k - 1) * jump
        jump *= s
    return field


def conv_output_frames(samples, kernels: Sequence[int], strides: Sequence[int]):
    """Output frames of a stack of unpadded strided convs on ``samples`` input samples (an int or a long
    tensor ``[b]``); 0 below the receptive field."""
    out = samples
    for k, s in zip(kernels, strides, strict=True):
        out = (out - k) // s + 1
    return out.clamp(min=0) if isinstance(out, Tensor) else max(out, 0)


def same_padded_context(kernels: Sequence[int], dilations: Sequence[int] | None = None) -> int:
    """Frames each side that a chain of 'same'-padded stride-1 convs reaches: ``sum(d * (k - 1) / 2)`` (ceil)."""
    dilations = dilations or [1] * len(kernels)
    return sum(math.ceil(d * (k - 1) / 2) for k, d in zip(kernels, dilations))


def grid_frames(mel_hop: int, mel_rate: int, wave_rate: int, conv_hop: int) -> int:
    """Smallest mel-frame step ``m`` such that a crop starting at a multiple of ``m`` keeps the resampler phase
    (``m * mel_hop`` a multiple of ``mel_rate / gcd``) and the conv-frame grid (``m * mel_hop * wave_rate /
    mel_rate`` a multiple of ``conv_hop``). F5 + wav2vec2 layer 4: hop 256 @ 24 kHz, 80 samples @ 16 kHz -> 15."""
    g = math.gcd(mel_rate, wave_rate)
    phase = mel_rate // g  # input samples per resampler period (3 for 24k -> 16k)
    m = 1
    while True:
        samples_in = m * mel_hop
        if samples_in % phase == 0 and (samples_in * wave_rate // mel_rate) % conv_hop == 0:
            return m
        m += 1


@dataclass(frozen=True)
class CropContext:
    """How far the penalty's numbers reach, for :func:`plan_crops`.

    ``wave_s``: seconds each side of a site that its pooled logit depends on, at the recognizer's input (site
    padding + head + conv stack). ``vocoder_frames``: mel frames each side that one output sample of the
    vocoder + resampler depends on. ``grid``: crop starts (of the scored region) on multiples of this many
    frames (:func:`grid_frames`); ``phase``: the vocoder crop's offset to it is a multiple of this (3).
    """

    wave_s: float
    vocoder_frames: int
    grid: int = 15
    phase: int = 3


@dataclass(frozen=True)
class Crop:
    """One crop of item ``item``: vocode mel frames ``[mel_start, mel_end)``, score ``[start, end)`` of them
    (``start - mel_start`` is a multiple of the context's ``phase``)."""

    item: int
    mel_start: int
    mel_end: int
    start: int
    end: int

    @property
    def mel_frames(self) -> int:
        return self.mel_end - self.mel_start


def plan_crops(sites: Sequence[Sequence[TimedSite]], n_frames: Sequence[int], frame_rate: float,
               ctx: CropContext, padded_frames: int | None = None) -> tuple[list[Crop], list[list[TimedSite]]]:
    """Crops covering every site with its context, and each crop's sites shifted to the scored region's start.

    ``sites[b]`` in seconds on item ``b`` (``n_frames[b]`` valid mel frames). Windows of one item are merged when
    their vocoder crops would overlap (vocoding the gap costs less than vocoding the overlap twice). A site that
    starts beyond the item is dropped here exactly as the full computation gives it no frames.

    ``padded_frames``: the batch's padded length. A vocoder crop near an item's end then extends into the item's
    padding as far as the full batch would (the vocoder sees the same padding frames before its boundary), not
    just to the item's last valid frame; without it, crops stop at ``n_frames[b]``.
    """
    crops: list[Crop] = []
    shifted: list[list[TimedSite]] = []
    for b, item_sites in enumerate(sites):
        n = int(n_frames[b])
        limit = n if padded_frames is None else max(n, int(padded_frames))
        windows = []
        for s in sorted(item_sites, key=lambda s: s.start):
            lo = max(0, math.floor((s.start - ctx.wave_s) * frame_rate))
            hi = min(n, math.ceil((s.end + ctx.wave_s) * frame_rate) + 1)
            if lo >= n or hi <= 0:
                continue
            lo -= lo % ctx.grid  # on the shared resampler / conv grid
            if windows and lo - windows[-1][1] < 2 * ctx.vocoder_frames:
                windows[-1][1] = max(windows[-1][1], hi)
                windows[-1][2].append(s)
            else:
                windows.append([lo, hi, [s]])
        for lo, hi, members in windows:
            # at least the vocoder's context, rounded up to the phase (lo is on the grid, a multiple of phase, so
            # lo - back is too); rounding down left a frame or two of context out
            back = min(lo, ctx.vocoder_frames + (-ctx.vocoder_frames) % ctx.phase)
            crops.append(Crop(b, lo - back, min(limit, hi + ctx.vocoder_frames), lo, hi))
            offset = lo / frame_rate
            shifted.append([replace(s, start=s.start - offset, end=s.end - offset) for s in members])
    return crops, shifted


def gather_mel_crops(mels: Tensor, crops: Sequence[Crop], phase: int = 3) -> tuple[Tensor, list[int]]:
    """``mels [b, n, d]`` -> ``([c, L, d], left pads)``: each crop's vocoder frames in one zero-padded batch.

    The padding must not put zeros where the full batch had its tensor boundary (a conv's zero padding is not
    the same as zero frames fed through the stack): crops ending at ``n`` are right-aligned so that they end at
    ``L`` too (their left pad is a multiple of ``phase``: all of them have ``n - mel_start = n (mod phase)``, and
    ``L = n (mod phase)``); crops starting at 0 start at 0; a crop touching both ends makes ``L = n``. Other
    zeros lie at least the vocoder context away from the scored region. ``ValueError`` for no crops."""
    if not crops:
        raise ValueError("gather_mel_crops needs at least one crop (plan_crops found none: nothing to vocode)")
    n = mels.shape[1]
    longest = max(c.mel_frames for c in crops)
    if any(c.mel_start == 0 and c.mel_end == n for c in crops):
        longest = n
    elif any(c.mel_end == n for c in crops):
        longest += (n - longest) % phase
    pads = [longest - c.mel_frames if c.mel_end == n else 0 for c in crops]
    batch = torch.stack([F.pad(mels[c.item, c.mel_start:c.mel_end], (0, 0, p, longest - c.mel_frames - p))
                         for c, p in zip(crops, pads)])
    return batch, pads


def trim_waves(waves: Tensor, crops: Sequence[Crop], samples: Callable[[int], int],
               pads: Sequence[int] | None = None) -> tuple[Tensor, Tensor]:
    """Vocoded crops ``[c, t]`` -> the scored regions ``[c, t']`` and their lengths ``[c]``.

    ``samples(k)``: output samples of ``k`` mel frames (``leakloss.vocoder.mel_lengths_to_samples``); exact at
    the region start because ``pad + start - mel_start`` is a multiple of the resampler phase. ``pads``: the left
    pads of :func:`gather_mel_crops`. ``ValueError`` for no crops."""
    if not crops:
        raise ValueError("trim_waves needs at least one crop")
    pads = pads or [0] * len(crops)
    bounds = [(samples(p + c.start - c.mel_start), min(samples(p + c.end - c.mel_start), waves.shape[-1]))
              for c, p in zip(crops, pads)]
    longest = max(b - a for a, b in bounds)
    out = torch.stack([F.pad(waves[i, a:b], (0, longest - (b - a))) for i, (a, b) in enumerate(bounds)])
    return out, torch.tensor([b - a for a, b in bounds], dtype=torch.long, device=waves.device)


def pooled_moments(waves: Tensor, lengths: Tensor, item: Tensor, n_items: int) -> tuple[Tensor, Tensor]:
    """Mean and std per item over the valid samples of all its crops: ``waves [c, t]``, ``lengths [c]``,
    ``item [c]`` (the item of each crop) -> ``(mean [n_items], std [n_items])`` (mean 0 and std 1e-6 for an
    item without crops: the std's floor), with gradient. The cropped penalty's stand-in for the whole item's mean and RMS
    (:func:`leakloss.functional.leak.rms_normalize`); fp32, or fp64 for fp64 waves."""
    x = at_least_fp32(waves)
    mask = (torch.arange(x.shape[-1], device=x.device)[None] < lengths[:, None]).to(x.dtype)
    count = x.new_zeros(n_items).index_add(0, item, lengths.to(x.dtype)).clamp(min=1)
    mean = x.new_zeros(n_items).index_add(0, item, (x * mask).sum(-1)) / count
    square = x.new_zeros(n_items).index_add(0, item, (((x - mean[item][:, None]) * mask) ** 2).sum(-1)) / count
    return mean, (square + 1e-12).sqrt()  # + 1e-12: a finite gradient for silent crops


def length_groups(lengths: Sequence[int], ratio: float = 1.1) -> list[list[int]]:
    """Indices grouped by similar length (sorted; a group's longest is at most ``ratio`` x its shortest), so
    that padding each group to its longest wastes at most ``ratio - 1`` of the work. Every index once."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and lengths[i] <= ratio * max(lengths[groups[-1][0]], 1):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def cropped_share(crops: Sequence[Crop], n_frames: Sequence[int]) -> float:
    """Share of the batch's valid mel frames that the crops vocode (overlap between items never happens)."""
    total = sum(int(n) for n in n_frames)
    return sum(c.mel_frames for c in crops) / total if total else 0.0


__all__ = ["Crop", "CropContext", "conv_output_frames", "conv_receptive_field", "cropped_share", "gather_mel_crops",
           "grid_frames", "length_groups", "plan_crops", "pooled_moments", "same_padded_context", "trim_waves"]
