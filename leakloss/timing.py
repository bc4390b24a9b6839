"""Contrast sites placed in time: what the training penalty and the reward consume."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from leakloss.schema import KINDS, Kind


@dataclass(frozen=True)
class TimedSite:
    """A contrast site of one utterance, placed in time (seconds from the utterance start).

    ``kind`` is ``"deletion"`` or ``"quality"``; ``contrast`` names the pair for per-contrast curves,
    e.g. ``"ʌ->∅"`` (schwa deletion) or ``"ʌi̯->ɛː"``. ``word`` is the word's text, for reports.
    """

    start: float
    end: float
    kind: Kind
    contrast: str
    word: str = ""

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            # numpy floats are Real too; bool and strings are not times ("0.5" > "0.1" would pass below)
            try:  # an int too large for a float (10**400 in a damaged cache row) raised OverflowError
                finite = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            except OverflowError:
                finite = False
            if not finite:
                raise ValueError(f"site {name} must be a finite number of seconds, got {value!r:.40}")
        if not self.end > self.start:
            raise ValueError(f"site must have end > start, got {self.start}..{self.end}")
        if self.kind not in KINDS:
            raise ValueError(f"site kind must be one of {KINDS}, got {self.kind!r}")
        for name in ("contrast", "word"):  # a cache row's null contrast failed deep in the penalty's logging
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"site {name} must be a string, got {getattr(self, name)!r}")
