"""leakloss.paired_penalty: the reference-paired term on a frozen recognizer (tiny wav2vec2 here; recognizer w in
the slow real-speech test)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leakloss.paired_penalty import PairedParts, PairedPosteriorPenalty
from leakloss.penalty import PenaltyInputError
from leakloss.timing import TimedSite
from tests.tiny_models import speechlike

SITES = [TimedSite(0.2, 0.3, "deletion", "ʌ->∅"), TimedSite(0.5, 0.62, "quality", "ʌi̯->ɛː")]


@pytest.fixture(scope="module")
def paired(tiny_rec) -> PairedPosteriorPenalty:
    return PairedPosteriorPenalty(tiny_rec)


def _pair(seconds: float = 1.0, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A speech-like reference and a 'generated' copy with its 0.45-0.65 s region replaced by another clip."""
    ref = torch.from_numpy(speechlike(seconds, seed=seed))
    gen = ref.clone()
    other = torch.from_numpy(speechlike(seconds, seed=seed + 100, amp=0.5))
    gen[int(0.45 * 16000): int(0.65 * 16000)] = other[int(0.45 * 16000): int(0.65 * 16000)]
    return gen, ref


def _frozen(penalty: PairedPosteriorPenalty) -> bool:
    return all(p.grad is None and not p.requires_grad for p in penalty.parameters())


def test_differs_where_the_audio_differs_and_the_gradient_reaches_only_the_generated_wave(paired):
    gen, ref = _pair()
    gen = gen[None].clone().requires_grad_(True)
    ref = ref[None].clone().requires_grad_(True)
    loss, parts = paired(gen, None, ref, [SITES])
    assert isinstance(parts, PairedParts) and not parts.penalty.requires_grad
    assert int(parts.active_sites) == 2 and parts.site_active.tolist() == [True, True]
    d_unchanged, d_changed = parts.site_divergences.tolist()
    assert d_changed > 10 * max(d_unchanged, 1e-6)  # the quality site lies in the replaced region
    assert loss.item() == pytest.approx((d_unchanged + d_changed) / 2, rel=1e-5)
    assert set(parts.per_kind) == {"deletion", "quality"} and parts.per_kind["quality"].item() == pytest.approx(d_changed)
    assert parts.per_contrast["ʌi̯->ɛː"].item() == pytest.approx(d_changed)
    loss.backward()
    assert torch.isfinite(gen.grad).all() and gen.grad.abs().sum() > 0
    assert ref.grad is None  # the ground truth is a target
    assert _frozen(paired)


def test_identical_generated_and_reference_audio_give_zero(paired):
    _, ref = _pair()
    loss, parts = paired(ref[None].clone().requires_grad_(True), None, ref[None], [SITES])
    assert abs(loss.item()) < 1e-6 and int(parts.active_sites) == 2


def test_an_item_alone_scores_as_in_a_padded_batch(paired):
    gen0, ref0 = _pair(1.0, seed=1)
    gen1, ref1 = _pair(0.7, seed=2)
    sites1 = [TimedSite(0.5, 0.6, "quality", "ʌi̯->ɛː")]
    n0, n1 = gen0.numel(), gen1.numel()
    gens = torch.stack([gen0, torch.nn.functional.pad(gen1, (0, n0 - n1), value=0.7)])  # junk padding
    refs = torch.stack([ref0, torch.nn.functional.pad(ref1, (0, n0 - n1), value=-0.3)])
    _, batch = paired(gens, torch.tensor([n0, n1]), refs, [SITES, sites1])
    _, alone = paired(gen1[None], None, ref1[None], [sites1])
    _, first = paired(gen0[None], None, ref0[None], [SITES])
    torch.testing.assert_close(batch.site_divergences, torch.cat([first.site_divergences, alone.site_divergences]),
                               rtol=1e-4, atol=1e-6)
    assert batch.frame_counts.tolist() == [int(first.frame_counts), int(alone.frame_counts)]


@pytest.mark.parametrize("side", ["generated", "reference"])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_nonfinite_item_is_masked_with_zero_gradient_and_counted(paired, side, bad):
    gen, ref = _pair()
    gens, refs = torch.stack([gen, gen]), torch.stack([ref, ref])
    (gens if side == "generated" else refs)[0, 1000] = bad
    gens.requires_grad_(True)
    loss, parts = paired(gens, None, refs, [SITES, SITES])
    assert torch.isfinite(loss) and int(parts.nonfinite_items) == 1
    assert parts.site_active.tolist() == [False, False, True, True]
    assert parts.site_divergences[:2].eq(0).all()
    _, clean = paired(gen[None], None, ref[None], [SITES])
    assert loss.item() == pytest.approx(clean.penalty.item(), rel=1e-4)
    loss.backward()
    assert torch.isfinite(gens.grad).all() and gens.grad[0].eq(0).all() and gens.grad[1].abs().sum() > 0


def test_nan_in_the_padding_is_not_an_item_fault(paired):
    gen, ref = _pair()
    gens = torch.nn.functional.pad(gen, (0, 500), value=math.nan)[None]
    loss, parts = paired(gens, torch.tensor([gen.numel()]), torch.nn.functional.pad(ref, (0, 500))[None], [SITES])
    assert torch.isfinite(loss) and int(parts.nonfinite_items) == 0 and int(parts.active_sites) == 2


@pytest.mark.parametrize("samples,sites", [(0, SITES), (100, SITES), (16000, []), (4000, [TimedSite(2.0, 2.1, "deletion", "ʌ->∅")])])
def test_zero_length_short_input_and_no_site_give_zero_with_zero_gradient(paired, samples, sites):
    gen = (torch.randn(1, samples) * 0.1).requires_grad_(True)
    loss, parts = paired(gen, None, torch.randn(1, samples) * 0.1, [sites])
    assert loss.item() == 0.0 and int(parts.active_sites) == 0
    loss.backward()
    assert gen.grad is not None and gen.grad.eq(0).all()


def test_an_empty_batch_is_zero(paired):
    gen = torch.zeros(0, 16000, requires_grad=True)
    loss, parts = paired(gen, None, torch.zeros(0, 16000), [])
    assert loss.item() == 0.0 and int(parts.active_sites) == 0 and parts.site_divergences.numel() == 0
    loss.backward()


def test_a_quiet_item_is_counted_and_its_gradient_scaled_to_what_it_would_be_at_quiet_rms(paired, tiny_rec):
    from leakloss.functional.leak import item_rms

    gen, ref = _pair()
    gen, ref = gen * 0.02, ref * 0.02  # below -40 dBFS
    rms = float(item_rms(gen[None])[0])
    assert rms < paired.quiet_rms

    def grad(penalty):
        wave = gen[None].clone().requires_grad_(True)
        loss, parts = penalty(wave, None, ref[None], [SITES])
        loss.backward()
        return loss, parts, wave.grad

    loss, parts, scaled = grad(paired)
    true_loss, true_parts, true_grad = grad(PairedPosteriorPenalty(tiny_rec, quiet_rms=1e-9))
    assert int(parts.quiet_items) == 1 and int(true_parts.quiet_items) == 0
    assert loss.item() == true_loss.item()  # the forward is unchanged
    torch.testing.assert_close(scaled, true_grad * rms / paired.quiet_rms, rtol=1e-4, atol=1e-12)


def test_audio_louder_than_full_scale_is_brought_to_full_scale(paired):
    gen, ref = _pair()
    loss, _ = paired(gen[None] * 1e4, None, ref[None] * 1e4, [SITES])
    assert torch.isfinite(loss)


@pytest.mark.parametrize("call,message", [
    (lambda p, w: p(w, None, None, [SITES]), "ref_waves must be a tensor.*ground-truth audio"),
    (lambda p, w: p(w, None, w[:, :-1], [SITES]), "frame-aligned"),
    (lambda p, w: p(w[0], None, w[0], [SITES]), r"waves must be \[batch, samples\]"),
    (lambda p, w: p((w * 100).long(), None, (w * 100).long(), [SITES]), "real float samples"),
    (lambda p, w: p(w, torch.tensor([20000]), w, [SITES]), r"wave_lengths must lie in \[0, 16000\]"),
    (lambda p, w: p(w, None, w, SITES), "one list of TimedSite per item"),
])
def test_bad_input_is_a_typed_error(paired, call, message):
    with pytest.raises(PenaltyInputError, match=message):
        call(paired, torch.randn(1, 16000) * 0.1)


@pytest.mark.slow
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(0, 12000), min_size=1, max_size=3),
       amps=st.lists(st.sampled_from([0.0, 1e-7, 1e-3, 0.1, 1.0, 50.0]), min_size=3, max_size=3),
       site_spans=st.lists(st.tuples(st.floats(-0.1, 0.9), st.floats(0.01, 0.3)), max_size=3),
       seed=st.integers(0, 1000))
def test_random_lengths_sites_and_amplitudes_give_a_finite_nonnegative_loss(paired, lengths, amps, site_spans, seed):
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(lengths)
    scale = torch.tensor(amps[:b])[:, None]
    gen = (torch.randn(b, t, generator=g) * scale).requires_grad_(True)
    ref = torch.randn(b, t, generator=g) * scale
    sites = [[TimedSite(max(s, 0.0), max(s, 0.0) + d, "deletion", "ʌ->∅") for s, d in site_spans] for _ in range(b)]
    loss, parts = paired(gen, torch.tensor(lengths), ref, sites)
    assert torch.isfinite(loss) and loss.item() >= 0
    assert torch.isfinite(parts.site_divergences).all() and parts.site_divergences.ge(0).all()
    loss.backward()
    assert torch.isfinite(gen.grad).all()


def _paired_on(name: str):
    from leakloss.acoustic.recognizer import RecognizerLoadError

    try:
        return PairedPosteriorPenalty.load(name)
    except (RecognizerLoadError, FileNotFoundError, OSError) as err:
        pytest.skip(f"recognizer {name} cannot be loaded: {err}")


def test_the_default_recognizer_is_the_signal_one():
    from leakloss.paired_penalty import DEFAULT_PAIRED_RECOGNIZER

    assert DEFAULT_PAIRED_RECOGNIZER == "wb"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["wb", "w"])
def test_on_a_whisper_recognizer_a_cut_vowel_costs_and_the_sham_cut_does_not(name):
    """A real espeak reading through recognizer wb or w (Whisper log-mel, encoder, CTC head): the site's vowel cut
    out (the end padded to keep the frames aligned) against the same splice with the vowel put back."""
    from leakloss.pairs.splice import delete_span, sham_span
    from leakloss.site_placement import place_sites
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES, speak_text

    paired = _paired_on(name)
    text = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"
    try:
        wave = speak_text(text, TRAIN_TEACHER_VOICES[0]).waveform
    except Exception as err:  # noqa: BLE001 - espeak-ng missing
        pytest.skip(f"espeak cannot speak: {err}")
    sites = place_sites(wave, text, paired.recognizer)
    assert sites, "no site placed on the teacher reading"
    cuts, shams = [], []
    for site in sites:
        cut = delete_span(wave, site.start, site.end)
        cut = torch.nn.functional.pad(cut, (0, wave.numel() - cut.numel()))
        sham = sham_span(wave, site.start, site.end)
        batch = torch.stack([cut, sham]).requires_grad_(True)
        loss, parts = paired(batch, None, torch.stack([wave, wave]), [[site], [site]])
        cut_d, sham_d = parts.site_divergences.tolist()
        cuts.append(cut_d)
        shams.append(sham_d)
        loss.backward()  # the whole path wave -> log-mel -> encoder -> head is differentiable
        assert torch.isfinite(batch.grad).all() and batch.grad[0].abs().sum() > 0
    assert all(c > 10 * s for c, s in zip(cuts, shams)), (cuts, shams)
    assert all(c > 0.05 for c in cuts), cuts


def test_an_empty_item_is_not_counted_quiet(paired):
    gen, ref = _pair()
    waves, refs = torch.stack([gen, gen]), torch.stack([ref, ref])
    _, parts = paired(waves, torch.tensor([0, gen.numel()]), refs, [SITES, SITES])
    assert int(parts.quiet_items) == 0
