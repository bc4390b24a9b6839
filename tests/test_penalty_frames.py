"""LeakPenalty on a Whisper recognizer's encoder states (issue 40, step 2): the same rules as on recognizer A's conv
stack — finite, NaN items masked with zero gradient, zero-length items zero, an item scores the same alone and in
any batch — and a head/recognizer pair that does not fit is refused at load with a typed error."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leakloss.acoustic.recognizer import RecognizerLoadError
from leakloss.heads import HeadCard, HeadLoadError, RawConvHead, load_head, save_head
from leakloss.penalty import LeakPenalty, check_frame_recognizer
from leakloss.timing import TimedSite

SR = 16_000
SITES = [TimedSite(0.2, 0.3, "deletion", "ʌ->∅"), TimedSite(0.5, 0.62, "quality", "ʌi̯->ɛː")]


@pytest.fixture(scope="module")
def penalty(fake_w):
    torch.manual_seed(0)
    return LeakPenalty(fake_w, RawConvHead(in_channels=8, width=8, kernel=3, members=2))


def _wave(n: int, seed: int, amp: float = 0.1) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)) * amp


def test_frames_are_20ms_and_finite_with_gradient_to_the_wave_only(penalty):
    wave = _wave(SR, 0)[None].requires_grad_(True)
    loss, parts = penalty(waves=wave, sites=[SITES])
    loss.backward()
    assert torch.isfinite(loss) and float(loss.detach()) > 0 and torch.isfinite(wave.grad).all()
    assert wave.grad.abs().sum() > 0 and not any(p.requires_grad for p in penalty.parameters())
    assert penalty.frame_hop_s == pytest.approx(0.02) and parts.frame_probs.shape == (1, 50)
    assert int(parts.frame_counts[0]) == 50 and int(parts.active_sites) == 2
    assert penalty.tail_samples == penalty.head.context_frames * 320 + 1


def test_a_nan_item_is_masked_with_zero_gradient_and_does_not_touch_the_other(penalty):
    clean = torch.stack([_wave(SR, 1), _wave(SR, 2)])
    bad = clean.clone()
    bad[0, 100] = float("nan")
    bad.requires_grad_(True)
    loss, parts = penalty(waves=bad, sites=[SITES, SITES])
    loss.backward()
    assert torch.isfinite(loss) and int(parts.nonfinite_items) == 1
    assert torch.equal(bad.grad[0], torch.zeros(SR)) and bad.grad[1].abs().sum() > 0
    _, alone = penalty(waves=clean[1:], sites=[SITES])
    assert parts.site_active.tolist() == [False, False, True, True]
    torch.testing.assert_close(parts.site_probs[2:], alone.site_probs, atol=1e-5, rtol=1e-4)


def test_a_zero_length_item_contributes_exactly_zero(penalty):
    waves = torch.stack([_wave(SR, 3), _wave(SR, 4)]).requires_grad_(True)
    loss, parts = penalty(waves=waves, wave_lengths=torch.tensor([0, SR]), sites=[SITES, []])
    loss.backward()
    assert float(loss.detach()) == 0.0 and int(parts.active_sites) == 0 and int(parts.frame_counts[0]) == 0
    assert torch.equal(waves.grad, torch.zeros_like(waves))
    empty, _ = penalty(waves=torch.zeros(1, 0), sites=[SITES])
    assert float(empty) == 0.0


def test_an_item_scores_the_same_alone_and_in_any_batch(penalty):
    a, b = _wave(int(0.7 * SR), 5), _wave(int(1.6 * SR), 6, amp=0.3)
    waves = torch.zeros(2, b.numel())
    waves[0, : a.numel()], waves[1] = a, b
    waves[0, a.numel():] = 0.5  # what a batch pads with must not reach the item
    _, both = penalty(waves=waves, wave_lengths=torch.tensor([a.numel(), b.numel()]), sites=[SITES, SITES])
    _, alone = penalty(waves=a[None], sites=[SITES])
    torch.testing.assert_close(both.site_probs[:2], alone.site_probs, atol=1e-5, rtol=1e-4)
    n = int(alone.frame_counts[0])
    torch.testing.assert_close(both.frame_probs[0, :n], alone.frame_probs[0, :n], atol=1e-5, rtol=1e-4)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 2 * SR), st.floats(0.0, 3.0), st.integers(0, 3)), min_size=1, max_size=3),
       st.lists(st.tuples(st.floats(0.0, 2.2), st.floats(0.005, 0.3), st.booleans()), max_size=4),
       st.integers(0, 2**16))
def test_property_random_lengths_sites_and_amplitudes(penalty, items, raw_sites, seed):
    """Any lengths (0 to 2 s), amplitudes (silence to loud), sites (inside, across and past the end): a finite loss
    in [0, inf), finite gradient only on valid samples, probabilities in [0, 1], sites past an item inactive."""
    t = max(n for n, _, _ in items)
    waves = torch.zeros(len(items), t)
    for i, (n, amp, _) in enumerate(items):
        waves[i, :n] = _wave(n, seed + i, amp) if n else waves[i, :0]
    waves.requires_grad_(True)
    lengths = torch.tensor([n for n, _, _ in items])
    sites = [[TimedSite(s, s + d, "deletion" if q else "quality", "ʌ->∅" if q else "ʌi̯->ɛː")
              for s, d, q in raw_sites[: k]] for _, _, k in items]
    loss, parts = penalty(waves=waves, wave_lengths=lengths, sites=sites)
    loss.backward()
    assert math.isfinite(float(loss)) and float(loss) >= 0
    assert torch.isfinite(waves.grad).all()
    for i, n in enumerate(lengths.tolist()):
        assert torch.equal(waves.grad[i, n:], torch.zeros(t - n))  # the padding gets no gradient
    probs = parts.site_probs
    assert bool(((probs >= 0) & (probs <= 1)).all())
    flat = [(i, s) for i, item in enumerate(sites) for s in item]
    for active, (i, s) in zip(parts.site_active.tolist(), flat):
        if s.start >= lengths[i].item() / SR + penalty.pad_s + penalty.frame_hop_s:
            assert not active  # no frame of the item lies there
    if not any(parts.site_active.tolist()):
        assert float(loss) == 0.0


def test_bf16_autocast_stays_finite(penalty):
    wave = _wave(SR, 7)[None].requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = penalty(waves=wave, sites=[SITES])
    loss.backward()
    assert torch.isfinite(loss) and loss.dtype == torch.float32 and torch.isfinite(wave.grad).all()


def test_the_cropped_penalty_keeps_whisper_s_margin_and_runs(penalty):
    from integrations.f5_tts import cropped_penalty, penalty_crop_context
    from leakloss.vocoder import MelToWave

    vocoder = MelToWave.tiny(0)
    ctx = penalty_crop_context(penalty, vocoder)
    assert ctx.wave_s >= penalty.recognizer.crop_margin_s  # attention is global: a configured margin, not a field
    mels = torch.randn(2, 200, 100, requires_grad=True)
    loss, parts = cropped_penalty(penalty, vocoder, mels, torch.tensor([200, 150]), [SITES, SITES], 24000 / 256, ctx)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(mels.grad).all() and int(parts.active_sites) == 4


def test_a_head_that_does_not_fit_the_recognizer_is_refused_when_built(fake_w, tiny_rec):
    with pytest.raises(RecognizerLoadError, match="8 channels, the head reads 16"):
        LeakPenalty(fake_w, RawConvHead(in_channels=16))
    with pytest.raises(RecognizerLoadError, match="frames: wav2vec2-conv.*whisper-states|whisper-states"):
        check_frame_recognizer(tiny_rec, RawConvHead(in_channels=16), None, "whisper-states", "w@1")
    with pytest.raises(RecognizerLoadError, match="no frame features"):
        LeakPenalty(torch.nn.Linear(2, 2), RawConvHead(in_channels=16))


def test_load_reads_the_card_s_frames_and_refuses_another_recognizer_kind(tmp_path, tiny_rec):
    """A head card naming Whisper states, loaded on a wav2vec2 recognizer folder: a typed error at load, naming
    both; the card's features survive save/load; a card without them reads as recognizer A's conv layer 4."""
    import json

    folder = tmp_path / "a"
    tiny_rec.model.save_pretrained(folder)
    (folder / "vocab.json").write_text(json.dumps(tiny_rec.vocab), encoding="utf-8")
    features = {"source": "whisper-states", "layer": 4, "hop_s": 0.02, "channels": 16}
    save_head(tmp_path / "h" / "rawconv", RawConvHead(in_channels=16), HeadCard("rawconv", {}, "w@1", "1",
                                                                             features=features))
    assert load_head(tmp_path / "h" / "rawconv")[1].features == features
    with pytest.raises(RecognizerLoadError, match="its frame features are wav2vec2-conv, the head was trained on "
                                                  "whisper-states"):
        LeakPenalty.load(recognizer=str(folder), head_path=tmp_path / "h" / "rawconv.safetensors")
    save_head(tmp_path / "g" / "rawconv", RawConvHead(in_channels=16), HeadCard("rawconv", {}, "a@1", "1"))
    penalty = LeakPenalty.load(recognizer=str(folder), head_path=tmp_path / "g" / "rawconv.safetensors")
    assert penalty.frame_layer == 4 and penalty.frame_hop_s == pytest.approx(0.005)
    card = json.loads((tmp_path / "g" / "rawconv.json").read_text())
    card["features"] = ["whisper-states"]
    (tmp_path / "g" / "rawconv.json").write_text(json.dumps(card))
    with pytest.raises(HeadLoadError, match="features"):
        load_head(tmp_path / "g" / "rawconv")
    card["features"] = {"layer": 4}  # no source: the penalty cannot tell which recognizer it needs
    (tmp_path / "g" / "rawconv.json").write_text(json.dumps(card))
    with pytest.raises(HeadLoadError, match="'source'"):
        load_head(tmp_path / "g" / "rawconv")


def test_heads_load_by_name():
    from leakloss.penalty import SHIPPED_HEADS, named_head_path

    with pytest.raises(HeadLoadError, match="unknown head 'nope'"):
        LeakPenalty.load(head="nope")
    with pytest.raises(HeadLoadError, match="not both"):
        LeakPenalty.load(head="rawconv", head_path="x.safetensors")
    if not (SHIPPED_HEADS / "rawconv.safetensors").exists():
        pytest.skip("shipped heads not built")
    path = named_head_path("rawconv_a")  # recognizer A's head, by name, wherever it lives
    assert load_head(path)[1].recognizer.startswith("a@")


def test_the_reward_runs_on_the_penalty_s_whisper_recognizer(penalty):
    from leakloss.reward import leak_reward_details

    results = leak_reward_details([_wave(SR, 8)], ["घर"], penalty)
    assert len(results) == 1 and results[0].status and 0.0 <= results[0].reward <= 1.0
