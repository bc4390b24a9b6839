"""The conv-frame hop comes from the recognizer's strides, so site masks follow a change of layer."""

import math

import pytest
import torch

from leakloss.constants import SAMPLE_RATE


@pytest.mark.parametrize("layer", [0, 2, 3, 4, 6])
def test_hop_is_the_product_of_the_strides_and_matches_the_frames(tiny_rec, layer):
    hop = tiny_rec.conv_hop_s(layer)
    assert hop == math.prod(tiny_rec.conv_strides[: layer + 1]) / SAMPLE_RATE
    seconds = 2.0
    feats, frames = tiny_rec.conv_features(torch.zeros(1, int(seconds * SAMPLE_RATE)), layer)
    assert feats.shape[-1] == int(frames[0])
    assert abs(int(frames[0]) * hop - seconds) <= hop + 0.005  # frames x hop span the input, to the kernels' edges


def test_hop_of_a_missing_layer_is_an_error(tiny_rec):
    with pytest.raises(ValueError, match="out of range"):
        tiny_rec.conv_hop_s(len(tiny_rec.conv_strides))


def test_penalty_masks_follow_the_chosen_layer(tiny_rec):
    from leakloss.functional.leak import pooled_site_logits
    from leakloss.heads import RawConvHead
    from leakloss.penalty import LeakPenalty
    from leakloss.timing import TimedSite

    site = TimedSite(0.40, 0.50, "deletion", "ʌ->∅")
    wave = torch.randn(1, SAMPLE_RATE)
    for layer in (3, 4):
        channels = tiny_rec.conv_features(wave, layer)[0].shape[1]
        penalty = LeakPenalty(tiny_rec, RawConvHead(in_channels=channels), conv_layer=layer, pad_s=0.0)
        _, parts = penalty(waves=wave, sites=[[site]])
        hop = tiny_rec.conv_hop_s(layer)
        logits, _ = penalty.frame_logits(wave)
        centers = (torch.arange(logits.shape[-1]) + 0.5) * hop
        mask = ((centers >= site.start) & (centers <= site.end))[None]  # the site's frames at this layer's hop
        expected = torch.sigmoid(pooled_site_logits(logits, mask, torch.zeros(1, dtype=torch.long)))
        torch.testing.assert_close(parts.site_probs, expected)
        assert int(parts.active_sites) == 1
