"""Checks of numeric settings, shared by every layer (the functional math, the penalty, the result schema, the
entry points): a NaN weight or limit passes ``<``/``>`` tests silently, so each is checked once, here."""

from __future__ import annotations

import math


def is_finite_number(x: object) -> bool:
    """True for a finite int or float: ``bool`` (an int subclass) is never a time, score or setting, NaN/Inf
    neither, nor an int too large for a float (JSON allows 10**400)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def check_number(value: object, message: str, *, low: float = float("-inf"), low_inclusive: bool = True,
                 high: float = float("inf")) -> float:
    """``value`` as a float, or ``ValueError(f"{message}, got {value!r}")`` unless it is a finite number in
    ``[low, high]`` (``(low, high]`` with ``low_inclusive=False``)."""
    if not is_finite_number(value) or value > high or (value < low if low_inclusive else value <= low):
        raise ValueError(f"{message}, got {value!r}")
    return float(value)
