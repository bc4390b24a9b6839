"""The cropped penalty (site windows + receptive-field context) against the full computation on real speech."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("f5_tts")
pytest.importorskip("vocos")

import torch  # noqa: E402

from integrations.f5_tts import cropped_penalty, penalty_crop_context, tiny_f5  # noqa: E402
from leakloss.constants import MEL_HOP, MEL_SAMPLE_RATE  # noqa: E402
from leakloss.functional.crop import cropped_share, plan_crops  # noqa: E402
from leakloss.vocoder import MelToWave, mel_lengths_to_samples, silence_past_lengths  # noqa: E402
from tests.conftest import espeak_mel_batch, needs_embedded  # noqa: E402

pytestmark = needs_embedded
FR = MEL_SAMPLE_RATE / MEL_HOP


def _batch(head: str, sentences: int = 12):
    from leakloss.penalty import LeakPenalty

    penalty, vocoder = LeakPenalty.load(head=head), MelToWave.embedded()
    return (penalty, vocoder, *espeak_mel_batch(penalty.recognizer, sentences))


@pytest.fixture(scope="module")
def batch():
    """Twelve espeak teacher readings of built-in sentences as F5 mels, their sites placed by recognizer A, under
    A's raw-conv head: a finite receptive field, so the crop is exact given the item's mean and RMS (espeak
    readings differ slightly from run to run, so the measured gap varies between runs)."""
    return _batch("rawconv_a")


@pytest.fixture(scope="module")
def whisper_batch():
    """The same readings under the shipped head on recognizer wb (Whisper base states: global attention, so a
    crop sees a margin of context, not all of it)."""
    return _batch("rawconv")


def _whisper_full_and_cropped(whisper_batch):
    penalty, vocoder, x, lengths, sites = whisper_batch
    assert penalty.recognizer.frame_source == "whisper-states"
    ctx = penalty_crop_context(penalty, vocoder)
    full_in = x.clone().requires_grad_(True)
    waves = vocoder(silence_past_lengths(full_in, lengths))
    full, _ = penalty(waves=waves, wave_lengths=mel_lengths_to_samples(lengths).clamp(max=waves.shape[-1]),
                      sites=sites)
    full.backward()
    crop_in = x.clone().requires_grad_(True)
    crop, _ = cropped_penalty(penalty, vocoder, crop_in, lengths, sites, FR, ctx)
    crop.backward()
    rel = abs(float(crop) / float(full) - 1)
    cosine = float(torch.nn.functional.cosine_similarity(full_in.grad.flatten(), crop_in.grad.flatten(), dim=0))
    print(f"full {float(full):.4f} cropped {float(crop):.4f} rel diff {rel:.5f} gradient cosine {cosine:.4f}")
    return rel, cosine


@pytest.fixture(scope="module")
def whisper_crop_gap(whisper_batch):
    return _whisper_full_and_cropped(whisper_batch)


def test_the_cropped_whisper_penalty_tracks_the_full_loss(whisper_crop_gap):
    # measured 2026-12-04: 1.6-1.9% on the output states; on state 4 (2026-12-07) 3.8-4.2% over 6 draws: the 1 s
    # margin each side (WHISPER_CROP_MARGIN_S) stands in for the whole utterance that Whisper's attention sees
    rel, _ = whisper_crop_gap
    assert rel < 0.06  # 0.05 until 2026-12-07, when draws came within a point of it


def test_the_cropped_whisper_penalty_gradient_points_roughly_as_the_full_one(whisper_crop_gap):
    # A known gap, bounded rather than hoped away (it was a non-strict xfail, which could not fail): on Whisper
    # states the crop is another function of the audio (global attention), so its gradient is not the full one's.
    # On the output states cosines were -0.38 and -0.78 in two runs; on state 4, the shipped head's, 0.67, 0.84,
    # 0.90, 0.91, 0.93, 0.96, 0.97 over seven espeak draws (2026-12-06/07). Below 0.5 would be a regression.
    _, cosine = whisper_crop_gap
    assert cosine > 0.5


def test_context_comes_from_the_modules(batch):
    penalty, vocoder, *_ = batch
    ctx = penalty_crop_context(penalty, vocoder)
    layers = len(vocoder.backbone.convnext)
    assert ctx.vocoder_frames >= 3 * (1 + layers) + 3 and ctx.vocoder_frames % 3 == 0
    assert ctx.grid == 15 and ctx.wave_s == pytest.approx(0.02 + 14 * 0.005 + 0.01 + 0.005)


def test_cropped_loss_and_gradient_track_the_full_computation(batch):
    penalty, vocoder, x, lengths, sites = batch
    ctx = penalty_crop_context(penalty, vocoder)
    full_in = x.clone().requires_grad_(True)
    waves = vocoder(silence_past_lengths(full_in, lengths))  # as LeakAwareCFM's whole-item path
    full, full_parts = penalty(waves=waves, wave_lengths=mel_lengths_to_samples(lengths).clamp(max=waves.shape[-1]),
                               sites=sites)
    full.backward()
    crop_in = x.clone().requires_grad_(True)
    crop, crop_parts = cropped_penalty(penalty, vocoder, crop_in, lengths, sites, FR, ctx)
    crop.backward()
    rel = abs(float(crop) / float(full) - 1)
    print(f"full {float(full):.4f} cropped {float(crop):.4f} rel diff {rel:.5f}")
    # Measured 0.02% (2026-12-01, learned frontend's sites; 1.8-1.9% while the longest item of a batch saw zero
    # padding past its end); with the penalty centring its input on the crops' pooled mean (2026-12-02): see
    # the README's penalty row. Only the pooled mean and RMS differ from the full computation: 0.02-0.6% over
    # 5 runs (2026-12-03, CI's run 0.595%); espeak's readings vary between runs, so the bound leaves room.
    assert rel < 0.015
    assert int(crop_parts.active_sites) == int(full_parts.active_sites)
    cosine = torch.nn.functional.cosine_similarity(full_in.grad.flatten(), crop_in.grad.flatten(), dim=0)
    # the gradient points the same way: 0.971-0.9999 over 11 runs, CI's the lowest (1.0000 before the pooled mean,
    # which a crop cannot know exactly; the mean is removed since a DC offset gamed the penalty); a crop
    # without its receptive-field context gives 0.25 (and a 6% loss gap)
    assert cosine > 0.95
    crops, _ = plan_crops(sites, lengths.tolist(), FR, ctx, padded_frames=x.shape[1])
    assert cropped_share(crops, lengths.tolist()) < 0.8  # and it vocodes less


def test_crop_exact_with_the_whole_items_mean_and_rms(batch):
    """Given the whole item's mean and RMS, the crop is the full computation, end sites included."""
    from leakloss.functional.crop import gather_mel_crops, trim_waves

    penalty, vocoder, x, lengths, sites = batch
    ctx = penalty_crop_context(penalty, vocoder)
    x = silence_past_lengths(x, lengths)  # both paths vocode the items' silent tails, not the batch padding
    with torch.no_grad():
        waves = vocoder(x)
        wl = mel_lengths_to_samples(lengths).clamp(max=waves.shape[-1])
        full, fp = penalty(waves=waves, wave_lengths=wl, sites=sites)
        mask = torch.arange(waves.shape[-1])[None] < wl[:, None]
        mean = (waves * mask).sum(-1).div(wl)
        rms = (((waves - mean[:, None]) * mask) ** 2).sum(-1).div(wl).sqrt()
        crops, shifted = plan_crops(sites, lengths.tolist(), FR, ctx, padded_frames=x.shape[1])
        batch_mels, pads = gather_mel_crops(x, crops, ctx.phase)
        regions, region_lengths = trim_waves(vocoder(batch_mels), crops, lambda k: int(mel_lengths_to_samples(k)), pads)
        crop, cp = penalty(waves=regions, wave_lengths=region_lengths, sites=shifted,
                           wave_rms=rms[[c.item for c in crops]], wave_mean=mean[[c.item for c in crops]])
    assert float(crop) == pytest.approx(float(full), rel=1e-4)
    assert cp.site_probs.tolist() == pytest.approx(fp.site_probs.tolist(), abs=1e-4)


def test_crops_do_not_see_the_batch_padding(batch):
    """What pads an item (zeros here, a model's x1_hat in training) never reaches its crops' loss or sites."""
    penalty, vocoder, x, lengths, sites = batch
    ctx = penalty_crop_context(penalty, vocoder)
    padding = torch.arange(x.shape[1])[None, :, None] >= lengths[:, None, None]
    assert padding.any()
    noisy = torch.where(padding, torch.randn_like(x) * 3.0, x)
    with torch.no_grad():
        clean, clean_parts = cropped_penalty(penalty, vocoder, x, lengths, sites, FR, ctx)
        dirty, dirty_parts = cropped_penalty(penalty, vocoder, noisy, lengths, sites, FR, ctx)
    assert float(dirty) == pytest.approx(float(clean), rel=1e-5)
    assert dirty_parts.site_probs.tolist() == pytest.approx(clean_parts.site_probs.tolist(), abs=1e-5)


def test_an_items_cropped_loss_does_not_depend_on_its_batch(batch):
    """The pooled mean and RMS took samples next to crop edges that the group's zero padding reaches, so an item's
    loss moved with the lengths of the other items' crops (an outside review: RMS 0.0187194 -> 0.0186832)."""
    penalty, vocoder, x, lengths, sites = batch
    ctx = penalty_crop_context(penalty, vocoder)
    with torch.no_grad():
        _, together = cropped_penalty(penalty, vocoder, x, lengths, sites, FR, ctx)
        alone = []
        for i in range(x.shape[0]):
            n = int(lengths[i])
            _, parts = cropped_penalty(penalty, vocoder, x[i: i + 1, :n], lengths[i: i + 1], sites[i: i + 1], FR, ctx)
            if parts is not None:
                alone += parts.site_probs.tolist()
    assert len(alone) == len(together.site_probs) > 0
    assert together.site_probs.tolist() == pytest.approx(alone, abs=1e-5)
    # frame_counts per item, as LeakParts documents (it was one per crop, logged as a mean over items)
    assert together.frame_counts.shape == (x.shape[0],) and int(together.frame_counts.sum()) > 0


def test_leak_aware_cfm_crop_flag_keeps_the_loss(batch):
    penalty, vocoder, x, lengths, sites = batch
    by_text = {}
    texts = [f"t{i}" for i in range(len(sites))]
    by_text.update(zip(texts, sites))
    losses = {}
    for crop in (False, True):
        model = tiny_f5(seed=0, leak_penalty=penalty, leak_weight=1.0, mel_to_wave=vocoder, leak_crop=crop,
                        site_lookup=lambda t: by_text[t], sites_in_span_only=False, audio_drop_prob=0.0,
                        cond_drop_prob=0.0)
        torch.manual_seed(1)
        model.train()
        model(x, texts, lens=lengths)
        losses[crop] = float(model.last_leak_penalty)
    assert losses[True] == pytest.approx(losses[False], rel=0.02)


@pytest.fixture(scope="module")
def few(embedded_penalty):
    """Three short random mel items (1.3, 1.1, 0.9 s) with sites in each: a penalty call takes a second."""
    from leakloss.timing import TimedSite

    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([120, 100, 80])
    x = torch.randn(3, 120, 100, generator=g) - 4.0
    site = lambda a: TimedSite(a, a + 0.08, "deletion", "ʌ->∅", "w")  # noqa: E731
    return embedded_penalty, MelToWave.embedded(), x, lengths, [[site(0.3)], [site(0.5), site(0.9)], [site(0.4)]]


def test_a_nonfinite_item_is_masked_as_the_whole_item_penalty_masks_it(few):
    # mels[i, 50, 3] = nan: "PenaltyInputError: wave_rms must be [batch] finite" (a traceback mid-run), where
    # LeakPenalty(mels=...) masks the item: zero contribution, zero gradient, counted in nonfinite_items
    penalty, vocoder, x, lengths, sites = few
    ctx = penalty_crop_context(penalty, vocoder)
    bad = 1
    poisoned = x.clone()
    poisoned[bad, 50, 3] = float("nan")
    inp = poisoned.requires_grad_(True)
    loss, parts = cropped_penalty(penalty, vocoder, inp, lengths, sites, FR, ctx)
    loss.backward()
    assert torch.isfinite(loss) and int(parts.nonfinite_items) == 1
    assert torch.isfinite(inp.grad).all() and not inp.grad[bad].any() and inp.grad.any()
    # the same loss as without the item's sites: it contributes nothing
    without = [[] if i == bad else s for i, s in enumerate(sites)]
    with torch.no_grad():
        ref, ref_parts = cropped_penalty(penalty, vocoder, x, lengths, without, FR, ctx)
    assert float(loss) == pytest.approx(float(ref), rel=1e-4)
    assert int(parts.active_sites) == int(ref_parts.active_sites)


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0, 1), st.integers(0, 99),
                          st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e30])), min_size=1, max_size=4))
def test_random_nonfinite_mels_are_masked_never_an_error(few, poison):
    """NaN/Inf (or a finite 1e30 the vocoder overflows on) at random frames of random items: a finite loss and
    gradient, every poisoned item masked and counted, never a PenaltyInputError."""
    penalty, vocoder, x, lengths, sites = few
    ctx = penalty_crop_context(penalty, vocoder)
    poisoned = x.clone()
    masked = set()
    for item, where, mel_bin, value in poison:
        frame = min(int(where * int(lengths[item])), int(lengths[item]) - 1)
        poisoned[item, frame, mel_bin] = value
        if not math.isfinite(value):
            masked.add(item)
    inp = poisoned.requires_grad_(True)
    loss, parts = cropped_penalty(penalty, vocoder, inp, lengths, sites, FR, ctx)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(inp.grad).all()
    assert int(parts.nonfinite_items) >= len(masked)  # a 1e30 frame may blow up in the vocoder: masked too
    for item in masked:
        assert not inp.grad[item].any()


def test_leak_aware_cfm_whole_item_path_masks_mels_the_vocoder_overflows_on(few):
    """The uncropped vocoder path vocoded x1_hat as it was: a finite 1e30 frame blew up inside the vocoder and its
    backward (0 * inf) gave the whole batch a NaN gradient; the paired and margin terms' vocode_items masked it."""
    penalty, vocoder, x, lengths, sites = few
    texts = ["t0", "t1", "t2"]
    model = tiny_f5(leak_penalty=penalty, leak_weight=1.0, mel_to_wave=vocoder, sites_in_span_only=False,
                    site_lookup=dict(zip(texts, sites)).__getitem__, audio_drop_prob=0.0, cond_drop_prob=0.0)
    poisoned = x.clone()
    poisoned[1, 40, 5] = 1e30
    for mels, masked in ((x, 0), (poisoned, 1)):
        inp = mels.clone().requires_grad_(True)
        span = torch.ones(inp.shape[:2], dtype=torch.bool)
        loss, parts = model._leak_penalty(inp, lengths, span, texts, torch.ones(3))
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(inp.grad).all() and inp.grad.any()
        assert int(parts.nonfinite_items) == masked
        if masked:
            assert not inp.grad[1].any()


def test_the_quiet_rule_is_the_items_not_each_crops(embedded_penalty):
    # a quiet item of two crops was counted twice, and a quiet crop of a loud item had its gradient scaled down
    # (by the crop's own RMS), which the whole-item computation never does
    from leakloss.penalty import QUIET_RMS
    from leakloss.timing import TimedSite

    penalty, vocoder = embedded_penalty, MelToWave.embedded()
    ctx = penalty_crop_context(penalty, vocoder)
    g = torch.Generator().manual_seed(0)
    n = int(7.0 * FR)
    site = lambda a: TimedSite(a, a + 0.08, "deletion", "ʌ->∅", "w")  # noqa: E731
    sites = [[site(0.5), site(6.0)], [site(0.5), site(6.0)]]
    x = torch.randn(2, n, 100, generator=g)  # vocoded at RMS ~0.09
    x[0] -= 4.0  # item 0 quiet throughout (RMS ~6e-7)
    assert len(plan_crops(sites, [n, n], FR, ctx, padded_frames=n)[0]) == 4  # two crops an item
    with torch.no_grad():
        _, parts = cropped_penalty(penalty, vocoder, x, torch.tensor([n, n]), sites, FR, ctx)
    assert int(parts.quiet_items) == 1
    # item 1: loud but for a near-silent stretch around its second site; the whole item is not quiet
    y = x[1:].clone()
    y[0, int(4.5 * FR):] -= 4.0
    inp = y.clone().requires_grad_(True)
    loss, parts = cropped_penalty(penalty, vocoder, inp, torch.tensor([n]), sites[1:], FR, ctx)
    assert int(parts.quiet_items) == 0
    loss.backward()
    free = y.clone().requires_grad_(True)  # the same without any quiet rule
    penalty.quiet_rms = 1e-30
    try:
        cropped_penalty(penalty, vocoder, free, torch.tensor([n]), sites[1:], FR, ctx)[0].backward()
    finally:
        penalty.quiet_rms = QUIET_RMS
    assert torch.isfinite(inp.grad).all() and inp.grad[0, int(5.0 * FR):].abs().sum() > 0
    assert torch.allclose(inp.grad, free.grad, rtol=1e-4, atol=1e-12)
