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
