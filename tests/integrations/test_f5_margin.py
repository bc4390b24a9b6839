"""LeakAwareCFM's text-paired path-margin term: x1_hat heard against plans made once on the vocoded ground truth."""

from __future__ import annotations

import copy
import math
import random
from typing import Any

import pytest

pytest.importorskip("f5_tts")

import torch  # noqa: E402

from integrations.f5_tts import leak_log_row, plan_in_span, tiny_f5  # noqa: E402
from tests.integrations.test_f5_paired import _batch, _model  # noqa: E402  (the same tiny F5 and batch)
from leakloss.acoustic.features import SiteSpec  # noqa: E402
from leakloss.margin_penalty import MarginParts, MarginPlan, PathMarginPenalty  # noqa: E402
from leakloss.schema import KINDS  # noqa: E402
from leakloss.vocoder import MelToWave, mel_lengths_to_samples, silence_past_lengths  # noqa: E402

HOP = 320  # the stand-in recognizer's samples per frame (50 frames/s at 16 kHz)


@pytest.fixture(scope="module")
def m2w() -> MelToWave:
    return MelToWave.tiny(seed=0)


def _spec(index: int, first: int, last: int) -> SiteSpec:
    return SiteSpec((0, index), KINDS[index % 2], 1, (), (), frozenset(), ((first, last),))


class _StandInRecognizer:
    frame_rate, name = 50.0, "stand-in"


class RecordingMargin(torch.nn.Module):
    """Stand-in obeying the margin contract: plans one spec per crop given (kinds alternating), each site's value
    (margin and hinge alike) is the mean square of the samples inside its crop, the loss their mean."""

    def __init__(self, crops=((2, 8), (18, 24)), status: str = "ok") -> None:
        super().__init__()
        self.recognizer, self.crops, self.status = _StandInRecognizer(), crops, status
        self.planned: list[tuple[torch.Tensor, str]] = []
        self.calls: list[dict[str, Any]] = []

    def plan(self, wave: torch.Tensor, text: str) -> MarginPlan:
        self.planned.append((wave.clone(), text))
        if self.status != "ok":
            return MarginPlan((), self.status, "stand-in")
        specs = tuple(_spec(i, a, b) for i, (a, b) in enumerate(self.crops))
        return MarginPlan(specs, "ok", None, wave.shape[-1] // HOP, self.recognizer.name)

    def forward(self, waves=None, texts=None, wave_lengths=None, plans=None):
        self.calls.append(dict(waves=waves, wave_lengths=wave_lengths, plans=plans,
                               autocast=torch.is_autocast_enabled(waves.device.type)))
        specs = [(i, spec) for i, plan in enumerate(plans) for spec in plan.specs]
        values = [waves[i, spec.crops[0][0] * HOP: spec.crops[0][1] * HOP].pow(2).mean() for i, spec in specs]
        loss = torch.stack(values).mean() if values else waves.sum() * 0.0
        margins = torch.stack(values).detach() if values else torch.zeros(0)
        kinds = tuple(spec.kind for _, spec in specs)
        per_kind = {k: margins[[j for j, kind in enumerate(kinds) if kind == k]].mean() for k in KINDS if k in kinds}
        return loss, MarginParts(loss.detach(), per_kind, margins, kinds, len(values),
                                 tuple(p.status for p in plans), 0, 0, margins)


def _run(model, seed: int = 0, mel: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    base, text, lens = _batch()
    seen: dict = {}
    handle = model.transformer.register_forward_hook(lambda m, a, kw, o: seen.update(kw), with_kwargs=True)
    random.seed(seed)
    torch.manual_seed(seed)
    loss, _, _ = model(base if mel is None else mel, text=text, lens=lens)
    handle.remove()
    return loss, seen


def test_plans_come_from_the_vocoded_ground_truth_once_and_the_term_hears_x1_hat(m2w):
    margin = RecordingMargin()
    flow, seen = _run(_model(m2w))
    model = _model(m2w, margin_penalty=margin, margin_weight=5.0)
    loss, seen = _run(model)
    mel, text, lens = _batch()
    truth = m2w(silence_past_lengths(mel, lens))
    lengths = mel_lengths_to_samples(lens).tolist()
    assert [t for _, t in margin.planned] == text
    for (wave, _), n, row in zip(margin.planned, lengths, truth):
        assert wave.shape[-1] == n and not wave.requires_grad
        torch.testing.assert_close(wave, row[:n])
    call = margin.calls[-1]
    assert call["waves"].requires_grad and call["wave_lengths"].tolist() == lengths
    assert [p.frames for p in call["plans"]] == [n // HOP for n in lengths]
    t2 = float((seen["time"] ** 2).mean())
    assert model.last_margin_weight == pytest.approx(5.0 * t2)
    torch.testing.assert_close(loss.detach(), flow.detach() + 5.0 * t2 * model.last_margin_penalty)
    assert model.last_leak_parts is None and model.last_paired_parts is None
    row = leak_log_row(model, loss)
    assert row["margin/weight"] == pytest.approx(5.0 * t2) and row["margin/active_sites"] == 4.0
    assert row["margin/penalty"] == pytest.approx(float(model.last_margin_penalty))
    assert "margin/site_kinds" not in row and "margin/item_status" not in row  # labels, not curves
    assert all(math.isfinite(v) for v in row.values())

    grads = torch.autograd.grad(loss, model.transformer.proj_out.weight)[0]
    plain = _model(m2w)
    flow_grads = torch.autograd.grad(_run(plain)[0], plain.transformer.proj_out.weight)[0]
    assert not torch.allclose(grads, flow_grads)  # the term's gradient reaches F5's own weights

    _run(model, seed=1)  # the same utterances again: planned from the cache, not again
    assert len(margin.planned) == 2 and len(margin.calls) == 2
    ema_copy = copy.deepcopy(model)  # F5's EMA copy shares the plans (and the frozen term)
    assert ema_copy.margin_penalty is margin and ema_copy._shared.margin_plans is model._shared.margin_plans


def test_weight_zero_monitors_the_term_without_changing_the_loss(m2w):
    flow, _ = _run(_model(m2w))
    model = _model(m2w, margin_penalty=RecordingMargin(), margin_weight=0.0)
    loss, _ = _run(model)
    assert torch.equal(loss, flow) and model.last_margin_weight == 0.0
    assert model.last_margin_parts is not None and not model.margin_penalty.calls[-1]["waves"].requires_grad


def test_only_sites_whose_word_is_centred_in_the_span_are_scored():
    plan = MarginPlan((_spec(0, 2, 8), _spec(1, 18, 24)), "ok", None, 25, "r")
    span = torch.zeros(48, dtype=torch.bool)
    span[30:45] = True  # mel frames at 93.75/s: word 1's midpoint (0.42 s) is frame 39, word 0's (0.1 s) frame 9
    cut = plan_in_span(plan, span, 24_000 / 256, 50.0)
    assert [s.key for s in cut.specs] == [(0, 1)] and cut.status == "ok" and cut.frames == 25
    none = plan_in_span(plan, torch.zeros(48, dtype=torch.bool), 24_000 / 256, 50.0)
    assert none.status == "no_testable_site" and none.specs == () and none.frames == 25
    failed = MarginPlan((), "alignment_failed", "x")
    assert plan_in_span(failed, span, 24_000 / 256, 50.0) is failed


def test_a_nonfinite_ground_truth_is_not_planned_nor_cached_and_the_term_stays_finite(m2w):
    margin = RecordingMargin()
    model = _model(m2w, margin_penalty=margin, margin_weight=5.0)
    mel, _, _ = _batch()
    mel[0, 5, 7] = float("inf")
    _run(model, mel=mel)  # F5's own flow loss sees the Inf too; the term must not add a NaN of its own
    assert torch.isfinite(model.last_margin_penalty)
    assert [t for _, t in margin.planned] == ["de"]
    # the unplannable item is not vocoded nor heard, and is reported as non-finite
    call = margin.calls[-1]
    assert call["waves"].shape[0] == 1 and [p.status for p in call["plans"]] == ["ok"]
    assert torch.isfinite(call["waves"]).all()
    parts = model.last_margin_parts
    assert parts.item_status == ("not_finite", "ok") and parts.nonfinite_items == 1 and parts.active_sites == 2
    assert ("abc", 48) not in model._shared.margin_plans and ("de", 40) in model._shared.margin_plans


def test_items_whose_plan_cannot_be_scored_are_never_vocoded_nor_heard(m2w):
    margin = RecordingMargin(status="alignment_failed")
    flow, _ = _run(_model(m2w))
    model = _model(m2w, margin_penalty=margin, margin_weight=5.0)
    loss, _ = _run(model)
    assert margin.calls == [] and len(margin.planned) == 2 and torch.equal(loss, flow)
    parts = model.last_margin_parts
    assert parts.item_status == ("alignment_failed",) * 2 and parts.active_sites == 0
    assert float(model.last_margin_penalty) == 0.0
    assert leak_log_row(model, loss)["margin/active_sites"] == 0.0


def test_in_span_only_the_sites_whose_word_is_centred_in_the_infilled_span_are_heard(m2w):
    """The default (sites_in_span_only): each item's plan reaches the term cut to its infilled span."""
    from integrations.f5_tts import clean_mel_estimate

    margin = RecordingMargin()
    model = _model(m2w, margin_penalty=margin, margin_weight=5.0, sites_in_span_only=True)
    heard = cut = 0
    for seed in range(6):  # F5 draws the span: over a few seeds both cut and whole plans occur
        _, seen = _run(model, seed=seed)
        _, _, lens = _batch()
        _, span = clean_mel_estimate(seen["x"], seen["time"], torch.zeros_like(seen["x"]), seen["cond"], lens)
        full = MarginPlan(tuple(_spec(i, a, b) for i, (a, b) in enumerate(margin.crops)), "ok", None, 0, "")
        want = [plan_in_span(full, span[i], 24_000 / 256, 50.0) for i in range(2)]
        parts = model.last_margin_parts
        if parts is None:  # no item had its site (0.1-0.3 s) in the span this time
            continue
        call = margin.calls[-1] if margin.calls and parts.active_sites else None
        got = iter(call["plans"]) if call else iter(())
        for i, status in enumerate(parts.item_status):
            if status == "ok":
                assert [sp.key for sp in next(got).specs] == [sp.key for sp in want[i].specs]
                heard += 1
                cut += len(want[i].specs) < len(full.specs)
            else:
                assert status == "no_testable_site" and want[i].status == "no_testable_site"
    assert heard > 0 and cut > 0  # plans reached the term cut to the span (the all-cut case: the test below)


def test_a_batch_with_one_item_cut_to_nothing_hears_only_the_other():
    """Both items have their timed site (0.2 s, mel frame 19) in the span; item 0's words (midpoints 0.1 s and 0.42 s:
    frames 9 and 39) lie outside it, item 1's second word inside: item 0 is no_testable_site and not vocoded."""
    margin = RecordingMargin()
    model = _model(MelToWave.tiny(seed=0), margin_penalty=margin, margin_weight=5.0, sites_in_span_only=True)
    mel, text, lens = _batch()
    span = torch.zeros(2, 48, dtype=torch.bool)
    span[0, 15:25] = True
    span[1, 15:45] = True
    loss, parts = model._margin_penalty(mel, mel, lens, span, text, torch.tensor([0.5, 0.5]))
    assert parts.item_status == ("no_testable_site", "ok") and parts.active_sites == 1
    call = margin.calls[-1]
    assert call["waves"].shape[0] == 1 and [[sp.key for sp in p.specs] for p in call["plans"]] == [[(0, 1)]]
    assert torch.isfinite(loss)


def test_plans_are_keyed_by_site_key_and_the_least_recently_used_are_dropped(monkeypatch):
    from integrations import f5_tts
    from integrations.f5_dataset import SiteText

    margin = RecordingMargin()
    model = _model(MelToWave.tiny(seed=0), margin_penalty=margin, margin_weight=5.0)
    mel, _, lens = _batch()
    lens = torch.tensor([40, 40])  # the same text, the same length, two recordings
    texts = [SiteText("घर", "clip-a"), SiteText("घर", "clip-b")]
    model._margin_plans(texts, mel, lens)
    assert set(model._shared.margin_plans) == {("clip-a", 40), ("clip-b", 40)} and len(margin.planned) == 2
    monkeypatch.setattr(f5_tts, "MARGIN_PLAN_CACHE", 2)
    model._margin_plans([texts[0]], mel[:1], lens[:1])  # clip-a used again: clip-b is now the oldest
    model._margin_plans([SiteText("घर", "clip-c")], mel[:1], lens[:1])
    assert list(model._shared.margin_plans) == [("clip-a", 40), ("clip-c", 40)] and len(margin.planned) == 3
    model._margin_plans([texts[1]], mel[1:], lens[1:])  # dropped: planned again
    assert len(margin.planned) == 4 and ("clip-b", 40) in model._shared.margin_plans


@pytest.mark.parametrize("leak_bf16", [True, False])
def test_the_margin_term_runs_under_leak_bf16_as_the_other_terms(m2w, leak_bf16):
    margin = RecordingMargin()
    _run(_model(m2w, margin_penalty=margin, margin_weight=5.0, leak_bf16=leak_bf16))
    assert margin.calls[-1]["autocast"] is leak_bf16


def test_the_real_term_on_a_tiny_recognizer_plans_reports_and_adds_nothing_it_cannot_score(m2w, tiny_rec):
    """Random weights cannot align the words: both items are planned (and cached) as alignment_failed, none is
    scored, and the loss is exactly the flow loss."""
    mel, _, lens = _batch()
    texts = ["नेकपा घर", "बैठक"]
    losses = []
    for model in (_model(m2w), _model(m2w, margin_penalty=PathMarginPenalty(tiny_rec), margin_weight=5.0)):
        random.seed(0)
        torch.manual_seed(0)
        losses.append(model(mel, text=texts, lens=lens)[0])
    assert torch.equal(losses[0], losses[1])
    parts = model.last_margin_parts
    assert parts.item_status == ("alignment_failed",) * 2 and parts.active_sites == 0
    assert float(model.last_margin_penalty) == 0.0 and model.last_margin_weight > 0
    assert {p.status for p in model._shared.margin_plans.values()} == {"alignment_failed"}
    assert set(model._shared.margin_plans) == {(texts[0], 48), (texts[1], 40)}


@pytest.mark.parametrize("kwargs,message", [
    (dict(margin_weight=float("nan")), "margin_weight must be a finite number >= 0"),
    (dict(margin_weight=-1.0), "margin_weight must be a finite number >= 0"),
    (dict(mel_to_wave=None), "give mel_to_wave"),
])
def test_bad_margin_settings_are_refused(m2w, kwargs, message):
    kwargs = dict(dict(margin_penalty=RecordingMargin(), margin_weight=1.0), **kwargs)
    with pytest.raises(ValueError, match=message):
        _model(m2w, **kwargs)
    with pytest.raises(ValueError, match="margin_weight > 0 with a margin_penalty needs a site_lookup"):
        tiny_f5(256, margin_penalty=RecordingMargin(), margin_weight=1.0, mel_to_wave=m2w)


class RecordingBridgedMargin(RecordingMargin):
    """The stand-in heard through a mel bridge: plans on the ground truth's mel, scores x1_hat's mels (one
    "frame" per mel frame here), no vocoder anywhere."""

    mel_bridge = "a bridge"

    def plan(self, wave=None, text=None, *, mel=None) -> MarginPlan:
        assert wave is None and mel is not None
        self.planned.append((mel.clone(), text))
        specs = tuple(_spec(i, a, b) for i, (a, b) in enumerate(self.crops))
        return MarginPlan(specs, "ok", None, mel.shape[0], self.recognizer.name)

    def forward(self, waves=None, texts=None, wave_lengths=None, plans=None, *, mels=None, mel_lengths=None):
        assert waves is None and wave_lengths is None
        self.calls.append(dict(mels=mels, mel_lengths=mel_lengths, plans=plans))
        specs = [(i, spec) for i, plan in enumerate(plans) for spec in plan.specs]
        values = [mels[i, slice(*spec.crops[0])].pow(2).mean() for i, spec in specs]
        loss = torch.stack(values).mean()
        margins = torch.stack(values).detach()
        kinds = tuple(spec.kind for _, spec in specs)
        per_kind = {k: margins[[j for j, kind in enumerate(kinds) if kind == k]].mean() for k in KINDS if k in kinds}
        return loss, MarginParts(loss.detach(), per_kind, margins, kinds, len(values),
                                 tuple(p.status for p in plans), 0, 0, margins)


def test_a_bridged_term_plans_on_the_ground_truth_mel_and_hears_x1_hat_s_mels_without_a_vocoder():
    margin = RecordingBridgedMargin()
    model = _model(None, margin_penalty=margin, margin_weight=5.0)  # no vocoder needed
    flow = _model(None)
    loss, seen = _run(model)
    mel, text, lens = _batch()
    assert [t for _, t in margin.planned] == text
    for (planned, _), n, row in zip(margin.planned, lens.tolist(), mel):
        assert planned.shape[0] == n and not planned.requires_grad
        torch.testing.assert_close(planned, row[:n])
    call = margin.calls[-1]
    assert call["mels"].requires_grad and call["mel_lengths"].tolist() == lens.tolist()
    t2 = float((seen["time"] ** 2).mean())
    torch.testing.assert_close(loss.detach(), _run(flow)[0].detach() + 5.0 * t2 * model.last_margin_penalty)
    _run(model, seed=1)
    assert len(margin.planned) == 2  # cached


def test_the_real_bridged_term_hears_x1_hat_through_the_bridge_with_a_gradient_to_f5(fake_w, monkeypatch):
    # with plans that score (random weights align nothing, so the term's own plans never reached forward(mels=))
    from leakloss.mel_bridge import MelBridge

    mel, _, lens = _batch()
    texts = ["नेकपा घर", "बैठक"]
    torch.manual_seed(0)
    term = PathMarginPenalty(fake_w, mel_bridge=MelBridge(hidden=8))
    ids = [frozenset({i}) for i in range(1, 4)]
    spec = SiteSpec((0, 1), "deletion", 1, tuple(ids), (ids[0], ids[2]), ids[2], ((4, 12), (3, 13), (2, 14)))

    def plan(wave=None, text=None, *, mel=None):
        (_, frames), _ = term._bridged(mel)
        return MarginPlan((spec,), "ok", None, int(frames[0]), str(term.recognizer.name))

    monkeypatch.setattr(term, "plan", plan)
    model = _model(None, margin_penalty=term, margin_weight=5.0, leak_bf16=False)
    random.seed(0)
    torch.manual_seed(0)
    loss = model(mel, text=texts, lens=lens)[0]
    parts = model.last_margin_parts
    assert parts.item_status == ("ok", "ok") and parts.active_sites == 2 and torch.isfinite(loss)
    grad = torch.autograd.grad(loss, model.transformer.proj_out.weight)[0]
    random.seed(0)
    torch.manual_seed(0)
    plain = _model(None)
    flow_grad = torch.autograd.grad(plain(mel, text=texts, lens=lens)[0], plain.transformer.proj_out.weight)[0]
    assert torch.isfinite(grad).all() and not torch.allclose(grad, flow_grad)


def test_the_real_bridged_term_on_a_tiny_whisper_recognizer_adds_nothing_it_cannot_score(fake_w):
    from leakloss.mel_bridge import MelBridge

    mel, _, lens = _batch()
    texts = ["नेकपा घर", "बैठक"]
    torch.manual_seed(0)
    term = PathMarginPenalty(fake_w, mel_bridge=MelBridge(hidden=8))
    losses = []
    for model in (_model(None), _model(None, margin_penalty=term, margin_weight=5.0)):
        random.seed(0)
        torch.manual_seed(0)
        losses.append(model(mel, text=texts, lens=lens)[0])
    assert torch.equal(losses[0], losses[1])
    assert model.last_margin_parts.active_sites == 0 and len(model.last_margin_parts.item_status) == 2
    assert set(model._shared.margin_plans) == {(texts[0], 48), (texts[1], 40)}
