from __future__ import annotations

from leakloss.acoustic.crops import CROP_PADS_S, crop_frames, word_crops


def test_pads_are_tight_30_60_ms():
    assert CROP_PADS_S == (0.0, 0.03, 0.06)


def test_word_crops_pad_and_clamp():
    crops = word_crops(0.02, 0.50, 0.53)
    assert crops[0] == (0.02, 0.50)
    assert crops[1][0] == 0.0 and abs(crops[1][1] - 0.53) < 1e-12  # both sides clamped
    assert crops[2] == (0.0, 0.53)
    mid = word_crops(1.0, 1.2, 3.0)
    assert [round(a, 6) for a, _ in mid] == [1.0, 0.97, 0.94]
    assert [round(b, 6) for _, b in mid] == [1.2, 1.23, 1.26]


def test_word_crops_swapped_bounds_are_ordered():
    (a, b), *_ = word_crops(0.5, 0.4, 1.0)
    assert a == 0.4 and b == 0.5


def test_crop_frames_round_outward():
    assert crop_frames((0.30, 0.50), 50.0, 100) == (15, 25)  # exact frame edges, float noise ignored
    assert crop_frames((0.305, 0.501), 50.0, 100) == (15, 26)
    assert crop_frames((0.0, 10.0), 50.0, 40) == (0, 40)  # clamped to the utterance


def test_crop_frames_zero_width_keeps_one_frame():
    assert crop_frames((0.2, 0.2), 50.0, 100) == (10, 11)
    assert crop_frames((5.0, 5.0), 50.0, 20) == (19, 20)
    assert crop_frames((0.1, 0.2), 50.0, 0) == (0, 0)
