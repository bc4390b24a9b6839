"""LeakAwareCFM's reference-paired term: x1_hat against the ground truth F5 infills, separately weighted."""

from __future__ import annotations

import random
from typing import Any, NamedTuple

import pytest

pytest.importorskip("f5_tts")

import torch  # noqa: E402

from integrations.f5_tts import leak_log_row, tiny_f5  # noqa: E402
from leakloss.paired_penalty import PairedPosteriorPenalty  # noqa: E402
from leakloss.timing import TimedSite  # noqa: E402
from leakloss.vocoder import MelToWave, mel_lengths_to_samples, silence_past_lengths  # noqa: E402

SITE = TimedSite(0.1, 0.3, "deletion", "ʌ->∅", "घर")


@pytest.fixture(scope="module")
def m2w() -> MelToWave:
    return MelToWave.tiny(seed=0)


class _Recorded(NamedTuple):
    penalty: torch.Tensor
    active_sites: torch.Tensor


class RecordingPaired(torch.nn.Module):
    """Stand-in obeying the paired contract: mean squared difference of the two waves over the sites' samples."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def forward(self, waves=None, wave_lengths=None, ref_waves=None, sites=()):
        self.calls.append(dict(waves=waves, wave_lengths=wave_lengths, ref_waves=ref_waves, sites=sites))
        diffs = [(waves[i, int(s.start * 16_000): int(s.end * 16_000)]
                  - ref_waves[i, int(s.start * 16_000): int(s.end * 16_000)]).pow(2).mean()
                 for i, item in enumerate(sites) for s in item]
        loss = torch.stack(diffs).mean()
        return loss, _Recorded(loss.detach(), torch.tensor(len(diffs)))


def _model(m2w: MelToWave, **kwargs: Any):
    kwargs.setdefault("audio_drop_prob", 0.0)
    kwargs.setdefault("cond_drop_prob", 0.0)
    kwargs.setdefault("sites_in_span_only", False)
    kwargs.setdefault("mel_to_wave", m2w)
    model = tiny_f5(256, seed=0, site_lookup=lambda text: [SITE], **kwargs)
    with torch.no_grad():  # F5 zero-initialises the output layer: pred == 0 would hide mistakes in x1_hat
        g = torch.Generator().manual_seed(0)
        model.transformer.proj_out.weight.copy_(0.1 * torch.randn(model.transformer.proj_out.weight.shape, generator=g))
    return model


def _batch() -> tuple[torch.Tensor, list[str], torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    mel = torch.randn(2, 48, 100, generator=g) - 4.0
    mel[1, 40:] = 0.0
    return mel, ["abc", "de"], torch.tensor([48, 40])


def _run(model, seed: int = 0, inp: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    mel, text, lens = _batch()
    seen: dict = {}
    handle = model.transformer.register_forward_hook(lambda m, a, kw, o: seen.update(kw), with_kwargs=True)
    random.seed(seed)
    torch.manual_seed(seed)
    loss, _, _ = model(mel if inp is None else inp, text=text, lens=lens if inp is None else None)
    handle.remove()
    return loss, seen


def _grads(model, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def test_the_paired_term_sees_x1_hat_and_the_vocoded_ground_truth_without_gradient(m2w):
    paired = RecordingPaired()
    model = _model(m2w, paired_penalty=paired, paired_weight=5.0)
    _, seen = _run(model)
    call = paired.calls[-1]
    mel, _, lens = _batch()
    truth = m2w(silence_past_lengths(mel, lens))
    n = call["ref_waves"].shape[-1]
    torch.testing.assert_close(call["ref_waves"], truth[:, :n])
    assert not call["ref_waves"].requires_grad and call["waves"].requires_grad
    assert call["wave_lengths"].tolist() == mel_lengths_to_samples(lens).tolist()
    assert call["sites"] == [[SITE], [SITE]]
    weight = 5.0 * float((seen["time"] ** 2).mean())
    assert model.last_paired_weight == pytest.approx(weight)
    assert model.last_leak_parts is None and model.last_leak_weight == 0.0
    assert float(model.last_paired_penalty) > 0


def test_a_wave_input_is_compared_with_its_own_mel(m2w):
    paired = RecordingPaired()
    model = _model(m2w, paired_penalty=paired, paired_weight=5.0)
    wave = 0.1 * torch.randn(2, 48 * 256, generator=torch.Generator().manual_seed(3))
    _run(model, inp=wave)
    mel = model.mel_spec(wave).permute(0, 2, 1)
    truth = m2w(silence_past_lengths(mel, torch.full((2,), mel.shape[1])))
    torch.testing.assert_close(paired.calls[-1]["ref_waves"], truth[:, : paired.calls[-1]["ref_waves"].shape[-1]])


@pytest.mark.slow
def test_the_paired_term_changes_the_loss_only_with_a_weight_and_its_gradient_reaches_f5(m2w, tiny_rec):
    paired = PairedPosteriorPenalty(tiny_rec)
    plain = _model(m2w)
    flow, _ = _run(plain)
    flow_grads = _grads(plain, flow)

    monitored = _model(m2w, paired_penalty=paired, paired_weight=0.0)
    loss0, _ = _run(monitored)
    assert torch.equal(loss0, flow)  # weight 0: the same loss, only monitored
    assert monitored.last_paired_parts is not None and monitored.last_paired_weight == 0.0
    assert float(monitored.last_paired_penalty) > 0 and int(monitored.last_paired_parts.active_sites) == 2
    grads0 = _grads(monitored, loss0)
    assert all(torch.equal(grads0[k], flow_grads[k]) for k in flow_grads)

    weighted = _model(m2w, paired_penalty=paired, paired_weight=50.0)
    loss, seen = _run(weighted)
    weight = 50.0 * float((seen["time"] ** 2).mean())
    torch.testing.assert_close(loss.detach(), flow.detach() + weight * weighted.last_paired_penalty)
    assert loss.item() > flow.item()
    grads = _grads(weighted, loss)
    moved = [k for k in flow_grads if not torch.allclose(grads[k], flow_grads[k], rtol=0, atol=1e-12)]
    assert any(k.startswith("transformer.") for k in moved)  # the paired gradient reaches F5's own weights
    assert all(torch.isfinite(g).all() for g in grads.values())
    assert all(p.grad is None and not p.requires_grad for p in paired.parameters())
    assert all(p.grad is None and not p.requires_grad for p in m2w.parameters())


def test_both_terms_are_added_each_with_its_own_weight_and_logged_apart(m2w):
    from tests.integrations.test_f5_tts import EnergyPenalty

    plain = _model(m2w)
    flow, seen = _run(plain)
    t2 = float((seen["time"] ** 2).mean())
    both = _model(m2w, leak_penalty=EnergyPenalty(m2w), leak_weight=3.0, paired_penalty=RecordingPaired(),
                  paired_weight=7.0)
    loss, _ = _run(both)
    torch.testing.assert_close(loss.detach(), flow.detach() + 3.0 * t2 * both.last_leak_penalty
                               + 7.0 * t2 * both.last_paired_penalty)
    assert both.last_leak_weight == pytest.approx(3.0 * t2) and both.last_paired_weight == pytest.approx(7.0 * t2)
    row = leak_log_row(both, loss)
    assert row["leak/weight"] == pytest.approx(3.0 * t2) and row["paired/weight"] == pytest.approx(7.0 * t2)
    assert row["paired/penalty"] == pytest.approx(float(both.last_paired_penalty))
    assert row["paired/active_sites"] == 2.0 and "leak/energy" in row
    # a model without a paired term logs no paired/ curve
    assert not any(k.startswith("paired/") for k in leak_log_row(plain, flow))


def test_dropped_text_and_no_sites_skip_the_paired_term(m2w):
    paired = RecordingPaired()
    model = _model(m2w, paired_penalty=paired, paired_weight=5.0, cond_drop_prob=1.0)
    flow, _ = _run(_model(m2w, cond_drop_prob=1.0))
    loss, _ = _run(model)
    assert torch.equal(loss, flow) and paired.calls == [] and model.last_paired_weight == 0.0
    none = tiny_f5(256, seed=0, site_lookup=lambda text: [], paired_penalty=paired, paired_weight=5.0,
                   mel_to_wave=m2w, audio_drop_prob=0.0, cond_drop_prob=0.0)
    loss, _ = _run(none)
    assert torch.isfinite(loss) and paired.calls == [] and none.last_paired_parts is None


def test_a_nonfinite_ground_truth_item_is_masked_not_a_nan_loss(m2w, tiny_rec):
    model = _model(m2w, paired_penalty=PairedPosteriorPenalty(tiny_rec), paired_weight=5.0)
    mel, text, lens = _batch()
    mel[0, 5, 7] = float("nan")  # the ground truth of item 0 (F5's own flow loss sees it too: use its x1 elsewhere)
    random.seed(0)
    torch.manual_seed(0)
    model(mel, text=text, lens=lens)
    parts = model.last_paired_parts
    assert int(parts.nonfinite_items) == 1 and parts.site_active.tolist() == [False, True]
    assert torch.isfinite(model.last_paired_penalty)


@pytest.mark.parametrize("kwargs,message", [
    (dict(paired_weight=float("nan")), "paired_weight must be a finite number >= 0"),
    (dict(paired_weight=-1.0), "paired_weight must be a finite number >= 0"),
    (dict(mel_to_wave=None), "give mel_to_wave"),
])
def test_bad_paired_settings_are_refused(m2w, kwargs, message):
    kwargs = dict(dict(paired_penalty=RecordingPaired(), paired_weight=1.0), **kwargs)
    with pytest.raises(ValueError, match=message):
        _model(m2w, **kwargs)
    with pytest.raises(ValueError, match="paired_weight > 0 with a paired_penalty needs a site_lookup"):
        tiny_f5(256, paired_penalty=RecordingPaired(), paired_weight=1.0, mel_to_wave=m2w)


@pytest.mark.parametrize("leak_bf16, outer", [(True, False), (False, True)])
def test_the_paired_recognizer_runs_under_leak_bf16_as_the_vocoder_does(leak_bf16, outer):
    """leak_bf16 set: the paired penalty runs under bf16 autocast; not set: in fp32 even inside an outer bf16
    autocast (accelerate's mixed precision). The paired call once sat outside the term's autocast block."""
    seen: list[bool] = []

    class AutocastSeen(RecordingPaired):
        def forward(self, **kwargs):
            seen.append(torch.is_autocast_cpu_enabled())
            return super().forward(**kwargs)

    model = _model(MelToWave.tiny(seed=0), paired_penalty=AutocastSeen(), paired_weight=1.0, leak_bf16=leak_bf16)
    mel, text, lens = _batch()
    random.seed(0)
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=outer):
        model(mel, text=text, lens=lens)
    assert seen == [leak_bf16]
