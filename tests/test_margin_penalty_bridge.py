"""The path-margin term on F5 / Vocos mels through the mel bridge (``PathMarginPenalty(mel_bridge=...)``): it hears
what the wave path hears of the same reading, ranks a Hindi reading above the Nepali one, scores each item as
alone, and bad mels are reasons or typed errors, never a NaN. The shipped wb + bridge where the ranking matters, a
tiny random Whisper recognizer for the rules."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leakloss.constants import MEL_FLOOR
from leakloss.margin_penalty import MarginPlan, PathMarginPenalty
from leakloss.mel_bridge import MelBridge, vocos_mels
from leakloss.penalty import PenaltyInputError
from leakloss.speech.corpus import builtin_sentences, split_sentences
from leakloss.speech.synth import HELDOUT_HINDI_VOICE, HELDOUT_TEACHER_VOICE, speak_text

#: a held-out sentence whose one testable site is a schwa deletion (पसलमा)
TEXT = next(t for t in split_sentences(builtin_sentences())[1] if t.startswith("यो पसलमा"))


@pytest.fixture(scope="module")
def term():
    from leakloss.acoustic.recognizer import RecognizerLoadError

    try:
        return PathMarginPenalty.load("wb", mel_bridge=True)
    except (RecognizerLoadError, FileNotFoundError) as err:
        pytest.skip(f"recognizer wb not loadable here: {err}")


@pytest.fixture(scope="module")
def readings():
    out = {}
    for name, voice in (("hindi", HELDOUT_HINDI_VOICE), ("nepali", HELDOUT_TEACHER_VOICE)):
        wave = speak_text(TEXT, voice).waveform
        mels, _ = vocos_mels(wave[None])
        out[name], out[name + "_wave"] = mels[0], wave
    return out


@pytest.fixture(scope="module")
def tiny(fake_w):
    torch.manual_seed(0)
    return PathMarginPenalty(fake_w, mel_bridge=MelBridge(hidden=8))


def run(term, mels, texts=None, **kwargs):
    x = mels.clone().requires_grad_(True)
    loss, parts = term(texts=texts, mels=x, **kwargs)
    loss.backward()
    return loss.detach(), parts, x.grad


def test_the_hindi_reading_costs_more_and_the_gradient_reaches_the_mels(term, readings):
    loss_h, parts_h, grad_h = run(term, readings["hindi"][None], [TEXT])
    loss_n, parts_n, _ = run(term, readings["nepali"][None], [TEXT])
    assert parts_h.item_status == ("ok",) and parts_h.site_kinds == ("deletion",) and parts_h.quiet_items == 0
    assert float(parts_h.site_margins[0]) > 0 > float(parts_n.site_margins[0])
    assert float(loss_h) > 5 * float(loss_n) > 0
    assert torch.isfinite(grad_h).all() and float(grad_h.abs().max()) > 0


def test_the_bridge_hears_the_reading_as_the_wave_path_does(term, readings):
    # the same plan's crops from the mel as from the wave, and margins within a small part of their spread
    wave_term = PathMarginPenalty(term.recognizer)
    for name in ("hindi", "nepali"):
        on_mel, on_wave = term.plan(text=TEXT, mel=readings[name]), wave_term.plan(readings[name + "_wave"], TEXT)
        assert on_mel.status == on_wave.status == "ok" and len(on_mel.specs) == len(on_wave.specs)
        _, mel_parts = term(mels=readings[name][None], plans=[on_mel])
        _, wave_parts = wave_term(readings[name + "_wave"][None], plans=[on_wave])
        assert abs(float(mel_parts.site_margins[0]) - float(wave_parts.site_margins[0])) < 0.2, name


def test_a_plan_made_once_on_the_mel_is_reused_and_equals_planning_on_the_item(term, readings):
    plan = term.plan(text=TEXT, mel=readings["hindi"])
    assert plan.status == "ok" and plan.recognizer == str(term.recognizer.name)
    with_text, _, _ = run(term, readings["hindi"][None], [TEXT])
    with_plan, _, _ = run(term, readings["hindi"][None], plans=[plan])
    assert math.isclose(float(with_text), float(with_plan), rel_tol=1e-6)
    louder, parts, grad = run(term, readings["hindi"][None] + 2.0, plans=[plan])  # levelled (the floor clamps a little)
    assert parts.item_status == ("ok",) and math.isclose(float(louder), float(with_plan), rel_tol=0.01)


def test_batch_items_are_scored_as_alone_and_padding_is_ignored(term, readings):
    h, n = readings["hindi"], readings["nepali"]
    frames = max(len(h), len(n)) + 40
    mels = torch.full((2, frames, h.shape[1]), 3.0)  # garbage past each length
    mels[0, : len(h)], mels[1, : len(n)] = h, n
    loss, parts, grad = run(term, mels, [TEXT, TEXT], mel_lengths=torch.tensor([len(h), len(n)]))
    alone_h, parts_h, grad_h = run(term, h[None], [TEXT])
    alone_n, parts_n, _ = run(term, n[None], [TEXT])
    torch.testing.assert_close(parts.site_margins, torch.cat([parts_h.site_margins, parts_n.site_margins]))
    assert math.isclose(float(loss), (float(alone_h) + float(alone_n)) / 2, rel_tol=1e-5)
    assert float(grad[0, len(h):].abs().max()) == 0.0 and float(grad[1, len(n):].abs().max()) == 0.0
    torch.testing.assert_close(grad[0, : len(h)], grad_h[0] / 2, rtol=1e-3, atol=1e-9)


def test_bad_items_are_reasons_with_zero_gradient(term, readings):
    h = readings["hindi"]
    mels = torch.stack([h, h.clone(), torch.full_like(h, math.log(MEL_FLOOR)), h.clone()])
    mels[1, 10, 3] = float("nan")
    mels[3] = h - 30.0  # below the floor everywhere: what the vocoder renders silent
    loss, parts, grad = run(term, mels, [TEXT, TEXT, TEXT, TEXT])
    assert parts.item_status == ("ok", "not_finite", "silent", "silent") and parts.nonfinite_items == 1
    alone, _, _ = run(term, h[None], [TEXT])
    assert math.isclose(float(loss), float(alone), rel_tol=1e-5)
    assert torch.isfinite(grad).all() and float(grad[1:].abs().max()) == 0.0
    plan = term.plan(text=TEXT, mel=h)
    loss, parts, grad = run(term, mels[:, :0], plans=[plan] * 4)  # no frame at all
    assert parts.item_status == ("too_short", "too_short", "too_short", "too_short") and float(loss) == 0.0
    assert term.plan(text=TEXT, mel=mels[2]).status == "silent"
    assert term.plan(text=TEXT, mel=mels[1]).status == "not_finite"


@given(frames=st.integers(0, 300), level=st.floats(-12.0, 4.0), seed=st.integers(0, 2**16))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_length_and_level_gives_a_finite_loss_and_gradient(term, readings, frames, level, seed):
    g = torch.Generator().manual_seed(seed)
    plan = term.plan(text=TEXT, mel=readings["hindi"])
    mel = readings["hindi"][:frames] + level + 0.3 * torch.randn(min(frames, len(readings["hindi"])), 100,
                                                                  generator=g)
    for kwargs in ({"texts": [TEXT]}, {"plans": [plan]}):
        loss, parts, grad = run(term, mel[None], **kwargs)
        assert torch.isfinite(loss) and float(loss) >= 0 and torch.isfinite(grad).all()
        assert len(parts.item_status) == 1 and isinstance(parts.item_status[0], str)


def test_mel_input_errors_are_typed(tiny):
    mels = torch.zeros(1, 50, 100)
    with pytest.raises(PenaltyInputError, match="needs a mel bridge"):
        PathMarginPenalty(tiny.recognizer)(mels=mels, texts=[TEXT])
    with pytest.raises(PenaltyInputError, match="not both"):
        tiny(torch.zeros(1, 800), [TEXT], mels=mels)
    with pytest.raises(PenaltyInputError, match="mel_lengths without mels"):
        tiny(texts=[TEXT], mel_lengths=torch.tensor([5]))
    with pytest.raises(PenaltyInputError, match=r"\[batch, frames, 100\]"):
        tiny(mels=torch.zeros(1, 50, 80), texts=[TEXT])
    with pytest.raises(PenaltyInputError, match=r"\[batch, frames, 100\]"):
        tiny(mels=torch.zeros(1, 50, 100, dtype=torch.int32), texts=[TEXT])
    with pytest.raises(PenaltyInputError, match="mel_lengths"):
        tiny(mels=mels, mel_lengths=torch.tensor([51]), texts=[TEXT])
    with pytest.raises(PenaltyInputError, match="up to 30 s"):
        tiny(mels=torch.zeros(1, 2900, 100), texts=[TEXT])
    with pytest.raises(PenaltyInputError, match="one of the two"):
        tiny.plan(torch.zeros(800), TEXT, mel=mels[0])
    with pytest.raises(PenaltyInputError, match="one of the two"):
        tiny.plan(text=TEXT)
    with pytest.raises(PenaltyInputError, match=r"one item's \[frames, bins\]"):
        tiny.plan(text=TEXT, mel=mels)
    with pytest.raises(ValueError, match="MelBridge"):
        PathMarginPenalty(tiny.recognizer, mel_bridge="vocos_to_whisper")


def test_a_bridge_needs_an_own_length_whisper_encoder(tiny_rec):
    with pytest.raises(ValueError, match="Whisper encoder"):
        PathMarginPenalty(tiny_rec, mel_bridge=MelBridge(hidden=8))


def test_f5_s_longest_clips_are_heard_up_to_the_encoder_s_30_s(tiny):
    # a 30.0 s clip's centred mel (2,813 frames) runs 86 samples past 30 s: LeakPenalty scores it, and so must this
    mels = torch.randn(1, 1 + 30 * 24_000 // 256, 100, generator=torch.Generator().manual_seed(0)) - 2.0
    plans = [MarginPlan((), "no_testable_site", "x")]
    assert tiny(mels=mels, plans=plans)[1].item_status == ("no_testable_site",)
    (log_probs, frames), seconds = tiny._bridged(mels[0])
    assert int(frames[0]) == 1500 and log_probs.shape[1] == 1500 and seconds == 30.0
    with pytest.raises(PenaltyInputError, match="up to 30 s"):
        tiny(mels=torch.zeros(1, 2900, 100), plans=plans)


def test_nothing_scored_on_mels_is_zero_with_a_zero_gradient(tiny):
    loss, parts, grad = run(tiny, torch.zeros(2, 60, 100), plans=[MarginPlan((), "no_testable_site", "x")] * 2)
    assert float(loss) == 0.0 and torch.equal(grad, torch.zeros(2, 60, 100)) and parts.active_sites == 0
    assert parts.item_status == ("no_testable_site", "no_testable_site")
