"""TimedSite: a site placed in time checks its own fields."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from leakloss.timing import TimedSite


@pytest.mark.parametrize("start, end", [("0.1", "0.5"), (True, 2), (0.1, math.inf), (math.nan, 0.5), (None, 0.5)])
def test_times_must_be_finite_numbers(start, end):
    """ "0.1".."0.5" passed the end > start check as strings and failed later as a TypeError in site_masks."""
    with pytest.raises(ValueError, match="must be a finite number of seconds"):
        TimedSite(start, end, "deletion", "ʌ->∅")


def test_numpy_times_and_the_order_check():
    assert TimedSite(np.float32(0.1), np.float64(0.2), "quality", "ʌi̯->ɛː").end == pytest.approx(0.2)
    with pytest.raises(ValueError, match="end > start"):
        TimedSite(0.5, 0.5, "deletion", "ʌ->∅")
    with pytest.raises(ValueError, match="kind must be one of"):
        TimedSite(0.1, 0.5, "vowel", "ʌ->∅")


@given(st.floats(allow_nan=True, allow_infinity=True), st.floats(allow_nan=True, allow_infinity=True))
def test_a_site_exists_only_for_finite_ordered_times(start, end):
    ok = math.isfinite(start) and math.isfinite(end) and end > start
    if ok:
        assert TimedSite(start, end, "deletion", "ʌ->∅").start == start
    else:
        with pytest.raises(ValueError):
            TimedSite(start, end, "deletion", "ʌ->∅")


def test_a_time_too_large_for_a_float_is_a_value_error():
    # 10**400 in a damaged site-cache row raised OverflowError, which the cache reader does not skip
    import pytest

    from leakloss.timing import TimedSite

    with pytest.raises(ValueError, match="finite number of seconds"):
        TimedSite(10**400, 10**401, "deletion", "ʌ->∅")
