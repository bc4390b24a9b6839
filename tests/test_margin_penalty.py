"""The text-paired path-margin term (leakloss.margin_penalty) on the embedded recognizer A and espeak readings: it
ranks a Hindi reading above the Nepali one, its gradient reaches the audio, plans are reusable, and bad input is a
reason or a typed error, never a NaN."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leakloss.margin_penalty import MarginPlan, PathMarginPenalty
from leakloss.penalty import PenaltyInputError
from leakloss.speech.corpus import builtin_sentences, split_sentences
from leakloss.speech.synth import HELDOUT_HINDI_VOICE, HELDOUT_TEACHER_VOICE, speak_text
from tests.conftest import needs_embedded

pytestmark = needs_embedded

#: a held-out sentence whose one testable site is a schwa deletion (पसलमा)
TEXT = next(t for t in split_sentences(builtin_sentences())[1] if t.startswith("यो पसलमा"))


@pytest.fixture(scope="module")
def term():
    return PathMarginPenalty.load("a")


@pytest.fixture(scope="module")
def readings():
    return {"hindi": speak_text(TEXT, HELDOUT_HINDI_VOICE).waveform,
            "nepali": speak_text(TEXT, HELDOUT_TEACHER_VOICE).waveform}


def run(term, waves, texts, **kwargs):
    x = waves.clone().requires_grad_(True)
    loss, parts = term(x, texts, **kwargs)
    loss.backward()
    return loss.detach(), parts, x.grad


def test_the_hindi_reading_costs_more_and_the_gradient_reaches_the_audio(term, readings):
    loss_h, parts_h, grad_h = run(term, readings["hindi"][None], [TEXT])
    loss_n, parts_n, _ = run(term, readings["nepali"][None], [TEXT])
    assert parts_h.item_status == ("ok",) and parts_h.site_kinds == ("deletion",)
    assert float(parts_h.site_margins[0]) > 0 > float(parts_n.site_margins[0])  # Hindi path fits the Hindi reading
    assert float(loss_h) > 5 * float(loss_n) > 0
    assert torch.isfinite(grad_h).all() and float(grad_h.abs().max()) > 0
    assert set(parts_h.per_kind) == {"deletion"}


def test_batch_items_are_scored_as_alone_and_padding_is_ignored(term, readings):
    h, n = readings["hindi"], readings["nepali"]
    t = max(h.numel(), n.numel()) + 800
    waves = torch.zeros(2, t)
    waves[0, : h.numel()], waves[1, : n.numel()] = h, n
    waves[0, h.numel():] = 5.0  # garbage past the length
    loss, parts, grad = run(term, waves, [TEXT, TEXT], wave_lengths=torch.tensor([h.numel(), n.numel()]))
    alone_h, parts_h, _ = run(term, h[None], [TEXT])
    alone_n, parts_n, _ = run(term, n[None], [TEXT])
    torch.testing.assert_close(parts.site_margins, torch.cat([parts_h.site_margins, parts_n.site_margins]))
    assert math.isclose(float(loss), (float(alone_h) + float(alone_n)) / 2, rel_tol=1e-5)
    assert float(grad[0, h.numel():].abs().max()) == 0.0


def test_a_quiet_half_precision_item_has_a_finite_gradient(term, readings):
    # the quiet scale was applied in fp16: the recognizer's gradient (~1/rms) overflowed to inf on the way back
    h = readings["hindi"]
    quiet = h * 3e-6 / h.abs().max()
    quiet[100] = 2e-4  # one click above the silence peak: the item is scored, and quiet
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        loss, parts, grad = run(term, quiet.to(dtype)[None], [TEXT])
        assert parts.item_status == ("ok",) and torch.isfinite(loss)
        assert torch.isfinite(grad).all() and float(grad.abs().max()) > 0, dtype


def test_a_plan_made_once_is_reused_while_the_audio_changes(term, readings):
    plan = term.plan(readings["hindi"], TEXT)
    assert plan.status == "ok" and len(plan.specs) == 1
    loss_text, _, _ = run(term, readings["hindi"][None], [TEXT])
    loss_plan, _, _ = run(term, readings["hindi"][None], None, plans=[plan])
    assert math.isclose(float(loss_text), float(loss_plan), rel_tol=1e-6)
    quieter, _, _ = run(term, 0.5 * readings["hindi"][None], None, plans=[plan])
    louder, parts, grad = run(term, 3.0 * readings["hindi"][None], None, plans=[plan])  # above full scale
    assert torch.isfinite(quieter) and torch.isfinite(louder) and torch.isfinite(grad).all()
    assert parts.item_status == ("ok",)


def test_bad_items_are_reasons_not_nans(term, readings):
    h = readings["hindi"]
    waves = torch.stack([h, h.clone(), torch.zeros_like(h), h.clone()])
    waves[1, 100] = float("nan")
    texts = [TEXT, TEXT, TEXT, "काकाको घरमा आज साँझ खाना छ"]  # the last: no testable site
    loss, parts, grad = run(term, waves, texts)
    assert parts.item_status[0] == "ok" and parts.item_status[1] == "not_finite"
    assert parts.item_status[2] == "silent" and parts.item_status[3] == "no_testable_site"
    alone, _, _ = run(term, h[None], [TEXT])
    assert math.isclose(float(loss), float(alone), rel_tol=1e-5)
    assert torch.isfinite(grad).all() and float(grad[1:].abs().max()) == 0.0


def test_nothing_scored_is_zero_with_a_zero_gradient(term):
    loss, parts, grad = run(term, torch.zeros(2, 8000), ["काकाको घर", "काकाको घर"])
    assert float(loss) == 0.0 and torch.equal(grad, torch.zeros(2, 8000)) and parts.active_sites == 0
    loss, parts, grad = run(term, torch.zeros(0, 0), [])
    assert float(loss) == 0.0 and parts.item_status == ()


def test_caller_errors_are_typed(term, readings):
    h = readings["hindi"][None]
    with pytest.raises(PenaltyInputError, match="one text per item"):
        term(h, None)
    with pytest.raises(PenaltyInputError, match="one text per item"):
        term(h, TEXT)  # a bare string, not a list
    with pytest.raises(PenaltyInputError, match="plans"):
        term(h, None, plans=["not a plan"])
    with pytest.raises(PenaltyInputError, match="texts or plans, not both"):
        term(h, [TEXT], plans=[term.plan(h[0], TEXT)])
    with pytest.raises(PenaltyInputError, match="waves"):
        term(h[0], [TEXT])
    with pytest.raises(PenaltyInputError, match="wave_lengths"):
        term(h, [TEXT], wave_lengths=torch.tensor([h.shape[1] + 1]))
    with pytest.raises(ValueError, match="tau"):
        PathMarginPenalty(term.recognizer, tau=0.0)
    with pytest.raises(PenaltyInputError, match="texts must be one per item"):
        term(h, 5)  # len() of a number was a raw TypeError


def test_texts_and_plans_may_be_any_iterable(term, readings):
    # a generator had no len(): a raw TypeError
    h = readings["hindi"][None]
    listed, _ = term(h, [TEXT])
    generated, _ = term(h, (text for text in [TEXT]))
    assert torch.equal(listed, generated)
    plan = term.plan(readings["hindi"], TEXT)
    assert torch.equal(term(h, plans=[plan])[0], term(h, plans=iter([plan]))[0])


def test_a_plan_for_other_audio_is_refused_per_item(term, readings):
    plan = term.plan(readings["hindi"], TEXT)
    loss, parts, _ = run(term, readings["hindi"][None, :-1600], None, plans=[plan])  # shorter: other frames
    assert parts.item_status == ("plan_mismatch",) and float(loss) == 0.0
    other = plan._replace(recognizer="w@00000000")
    assert run(term, readings["hindi"][None], None, plans=[other])[1].item_status == ("plan_mismatch",)
    loss, parts, _ = run(term, readings["hindi"][None, :100], None, plans=[plan])  # under one frame: no crash
    assert parts.item_status == ("too_short",) and float(loss) == 0.0


def test_a_text_the_frontend_rejects_is_a_status(term, readings):
    loss, parts, _ = run(term, readings["hindi"][None], [123])
    assert parts.item_status == ("bad_text",) and float(loss) == 0.0


def test_every_status_is_in_the_schema(term, readings):
    from leakloss.schema import MARGIN_STATUSES

    h = readings["hindi"]
    waves = torch.stack([h, h.clone(), torch.zeros_like(h), h.clone(), h.clone()])
    waves[1, 100] = float("nan")
    _, parts, _ = run(term, waves, [TEXT, TEXT, TEXT, "काकाको घर", 5])
    assert set(parts.item_status) <= set(MARGIN_STATUSES) and len(set(parts.item_status)) == 5


def test_nothing_scored_never_overflows_to_nan(term):
    for waves in (torch.full((1, 80000), 0.9, dtype=torch.float16), torch.full((1, 8000), 3e38)):
        loss, _, grad = run(term, waves, ["काकाको घर"])
        assert float(loss) == 0.0 and torch.isfinite(grad).all()


@given(length=st.integers(0, 24000), amplitude=st.floats(0.0, 3.0), seed=st.integers(0, 2**16))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_length_and_amplitude_gives_a_finite_loss_and_gradient(term, length, amplitude, seed):
    g = torch.Generator().manual_seed(seed)
    waves = torch.randn(1, length, generator=g) * amplitude
    loss, parts, grad = run(term, waves, [TEXT])
    assert torch.isfinite(loss) and float(loss) >= 0 and torch.isfinite(grad).all()
    assert len(parts.item_status) == 1 and isinstance(parts.item_status[0], str)


def test_plan_type_is_a_named_tuple():
    assert MarginPlan((), "silent", "why")._fields == ("specs", "status", "reason", "frames", "recognizer")


def test_plans_that_cannot_score_never_reach_the_recognizer_and_nonfinite_is_counted_once(term, readings,
                                                                                           monkeypatch):
    """An item whose plan says why it cannot be scored is not heard (no recognizer pass); an item NaN in its own
    samples whose plan was also made on non-finite audio counts once in nonfinite_items."""
    good = term.plan(readings["hindi"], TEXT)
    waves = torch.stack([readings["hindi"], readings["hindi"], readings["hindi"]])
    waves[1, 100] = float("nan")
    plans = [good, MarginPlan((), "not_finite", "x"), MarginPlan((), "alignment_failed", "y")]
    calls = []
    original = term.recognizer.forward
    monkeypatch.setattr(term.recognizer, "forward", lambda *a, **k: calls.append(1) or original(*a, **k))
    loss, parts, grad = run(term, waves, None, plans=plans)
    assert len(calls) == 1 and parts.item_status == ("ok", "not_finite", "alignment_failed")
    assert parts.nonfinite_items == 1 and parts.active_sites == 1 and math.isfinite(float(loss))
    assert torch.isfinite(grad).all() and bool((grad[1:] == 0).all())


def test_a_plan_made_on_speech_does_not_score_silence_or_near_silence(term, readings):
    # the plans path skipped the silence check: a silent x1_hat under its ground truth's plan was "ok", with a
    # margin 15x a real item's that diluted the real items' gradient
    h = readings["hindi"]
    plan = term.plan(h, TEXT)
    alone, _, grad_alone = run(term, h[None], None, plans=[plan])
    for quiet in (torch.zeros_like(h), torch.randn(h.shape, generator=torch.Generator().manual_seed(0)) * 1e-5):
        loss, parts, grad = run(term, torch.stack([h, quiet]), None, plans=[plan, plan])
        assert parts.item_status == ("ok", "silent") and parts.active_sites == len(plan.specs)
        assert math.isclose(float(loss), float(alone), rel_tol=1e-5)
        assert float(grad[1].abs().max()) == 0.0
        torch.testing.assert_close(grad[0], grad_alone[0], rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("kwargs", [{"tau": float("inf")}, {"tau": float("nan")}, {"tau": -1.0},
                                    {"quiet_rms": 0.0}, {"quiet_rms": float("nan")}, {"quiet_rms": -0.01}])
def test_settings_that_would_give_a_nan_or_reversed_gradient_are_refused(term, kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        PathMarginPenalty(term.recognizer, **kwargs)


def test_a_masked_item_counts_as_non_finite_not_as_quiet(term, readings):
    h = readings["hindi"]
    waves = torch.stack([h, h.clone()])
    waves[1, 5] = float("nan")
    _, parts, _ = run(term, waves, [TEXT, TEXT])
    assert parts.nonfinite_items == 1 and parts.quiet_items == 0


@pytest.mark.parametrize("wave,match", [
    (lambda h: h[None], r"one wave \[samples\], got shape \(1, "),
    (lambda h: h.numpy(), "must be a tensor"),
    (lambda h: (h * 32767).short(), "real float samples"),
])
def test_plan_refuses_what_is_not_one_float_wave(term, readings, wave, match):
    with pytest.raises(PenaltyInputError, match=match):
        term.plan(wave(readings["hindi"]), TEXT)


def test_a_crop_where_a_path_cannot_align_is_left_out_not_scored_as_hindi(term, readings):
    # a crop shorter than the Nepali path floors its fit at LOG_FLOOR: its margin (~ +20-30 a frame) was averaged
    # in as a confident Hindi reading, a cost the audio cannot lower that swamped the term
    from dataclasses import replace

    plan = term.plan(readings["hindi"], TEXT)
    (spec,) = plan.specs
    first = spec.crops[0][0]
    one_frame = (first, first + 1)
    mixed = plan._replace(specs=(replace(spec, crops=(spec.crops[0], one_frame, spec.crops[2])),))
    kept = plan._replace(specs=(replace(spec, crops=(spec.crops[0], spec.crops[2])),))
    none = plan._replace(specs=(replace(spec, crops=(one_frame,) * 3),))
    loss_mixed, parts_mixed, grad = run(term, readings["hindi"][None], None, plans=[mixed])
    loss_kept, parts_kept, _ = run(term, readings["hindi"][None], None, plans=[kept])
    assert parts_mixed.active_sites == 1 and parts_mixed.infeasible_sites == 0
    assert math.isclose(float(loss_mixed), float(loss_kept), rel_tol=1e-5)  # the one-frame crop counts nothing
    torch.testing.assert_close(parts_mixed.site_margins, parts_kept.site_margins)
    assert float(parts_mixed.site_margins[0]) < 10 and torch.isfinite(grad).all()
    loss_none, parts_none, grad_none = run(term, readings["hindi"][None], None, plans=[none])
    assert parts_none.item_status == ("ok",) and parts_none.active_sites == 0 and parts_none.infeasible_sites == 1
    assert float(loss_none) == 0.0 and float(grad_none.abs().max()) == 0.0
