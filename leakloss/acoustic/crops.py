"""Word crops: each word is cut three times (tight, ±30 ms, ±60 ms) so that one boundary error
cannot decide a result, and seconds are turned into recognizer frames by rounding outward.
"""

from __future__ import annotations

import math

#: Padding (seconds) added on both sides of a word: tight, ±30 ms, ±60 ms.
CROP_PADS_S: tuple[float, ...] = (0.0, 0.03, 0.06)

# float noise such as 0.3 * 50 = 15.000000000000002 must not add a frame
_EPS = 1e-6


def word_crops(start: float, end: float, duration: float,
               pads: tuple[float, ...] = CROP_PADS_S) -> list[tuple[float, float]]:
    """The word span widened by each pad, clamped to ``[0, duration]`` (seconds)."""
    if end < start:
        start, end = end, start
    return [(max(0.0, start - p), min(duration, end + p)) for p in pads]


def crop_frames(span_s: tuple[float, float], frame_rate: float, n_frames: int) -> tuple[int, int]:
    """Seconds -> ``(first, last_exclusive)`` frame indices, rounding outward, clamped to ``[0, n_frames]``.

    A non-empty span always keeps at least one frame when the utterance has one.
    """
    start, end = span_s
    first = math.floor(start * frame_rate + _EPS)
    last = math.ceil(end * frame_rate - _EPS)
    first = min(max(first, 0), n_frames)
    last = min(max(last, first), n_frames)
    if last == first and n_frames > 0:  # a zero-width span still covers the frame it touches
        if first < n_frames:
            last = first + 1
        else:
            first = n_frames - 1
    return first, last
