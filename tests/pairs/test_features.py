"""leakloss.pairs.features: the site frames a frame-head row marks."""

import torch

from leakloss.acoustic.align import AlignmentResult, WordAlignment
from leakloss.pairs.features import site_frame_mask


def test_site_frame_mask_marks_the_spike_or_the_segment_with_20_ms_each_side():
    # a word of three one-frame spikes 100 ms apart: the middle phone's segment is 0.56-0.66 s
    word = WordAlignment(0, "w", 0.50, 0.72, [(0.50, 0.52), (0.60, 0.62), (0.70, 0.72)], 1.0)
    alignment = AlignmentResult(ok=True, words=[word])
    hop = 0.02
    centres = 0.40 + (torch.arange(20) + 0.5) * hop
    spike = site_frame_mask(alignment, 0, 1, 0.40, 20, hop)
    segment = site_frame_mask(alignment, 0, 1, 0.40, 20, hop, segments=True)
    assert torch.equal(spike, (centres >= 0.58) & (centres <= 0.64))
    assert torch.equal(segment, (centres >= 0.54) & (centres <= 0.68))
    assert bool((segment | ~spike).all()) and int(segment.sum()) > int(spike.sum())


def test_feature_table_keys_change_with_the_level(tmp_path, monkeypatch):
    # a table is built on evidence: cached under another level it served the old features
    from leakloss.pairs import features

    manifest = tmp_path / "pairs.jsonl"
    manifest.write_text("{}\n", encoding="utf-8")
    key = features._key(manifest, "wb", "sites")
    assert features._key(manifest, "wb", "sites") == key
    monkeypatch.setattr(features, "RECOGNIZER_HEARING_PEAK", 0.5)
    assert features._key(manifest, "wb", "sites") != key


def test_site_frame_mask_keeps_a_frame_whose_centre_is_on_the_padded_edge():
    # the penalty's rule (leakloss.functional.leak.site_masks): edges included; in float32 a centre exactly on
    # an edge +- 20 ms (10 ms grid, 20 ms frames) rounded out for about a quarter of positions
    from leakloss.functional.leak import site_masks
    from leakloss.timing import TimedSite

    hop, n = 0.02, 40
    for k in range(200):
        a = 0.01 * k + 0.05  # segment start on the 10 ms grid; its first frame centre is a - 20 ms or a - 10 ms
        word = WordAlignment(0, "w", a, a + 0.08, [(a, a + 0.02)], 1.0)
        alignment = AlignmentResult(ok=True, words=[word])
        start = hop * int(max(a - 0.06, 0.0) / hop)
        mask = site_frame_mask(alignment, 0, 0, start, n, hop)
        centres = [start + (i + 0.5) * hop for i in range(n)]
        expected = torch.tensor([a - 0.02 - 1e-9 <= c <= a + 0.04 + 1e-9 for c in centres])
        assert torch.equal(mask, expected), k
        # the same frames as the penalty marks on the whole item, shifted by the crop's start
        whole, _ = site_masks([[TimedSite(a, a + 0.02, "deletion", "ʌ->∅")]], n + int(round(start / hop)), hop_s=hop)
        assert torch.equal(mask, whole[0, int(round(start / hop)):]), k
