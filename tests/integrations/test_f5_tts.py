"""Tests for integrations.f5_tts: the leak-aware CFM, checkpoints, vocab, data and the F5 Trainer launcher."""

from __future__ import annotations

import copy
import csv
import math
import random
from pathlib import Path
from typing import Any, NamedTuple

import pytest

pytest.importorskip("f5_tts")

import torch  # noqa: E402
from f5_tts.model import CFM  # noqa: E402
from f5_tts.model.dataset import collate_fn  # noqa: E402
from f5_tts.model.utils import get_tokenizer  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from integrations.f5_tts import (  # noqa: E402
    clean_mel_estimate,
    LeakAwareCFM,
    LeakCurveLogger,
    WaveTextDataset,
    devanagari_chars,
    devanagari_vocab,
    load_indicf5_checkpoint,
    sites_in_span,
    tiny_f5,
    train_f5,
)
from leakloss.timing import TimedSite  # noqa: E402
from leakloss.vocoder import MelToWave, mel_lengths_to_samples  # noqa: E402

FRAME_RATE = 24_000 / 256
SITE = TimedSite(0.1, 0.3, "deletion", "ʌ->∅", "घर")


class EnergyParts(NamedTuple):
    energy: torch.Tensor
    n_sites: torch.Tensor


class EnergyPenalty(torch.nn.Module):
    """Stand-in obeying the penalty contract: mean wave energy inside the site spans of each item."""

    def __init__(self, mel_to_wave: MelToWave) -> None:
        super().__init__()
        self.mel_to_wave = mel_to_wave
        self.calls: list[dict[str, Any]] = []

    def forward(self, waves=None, wave_lengths=None, mels=None, mel_lengths=None, sites=()):
        self.calls.append(dict(waves=waves, wave_lengths=wave_lengths, mels=mels, mel_lengths=mel_lengths, sites=sites))
        if waves is None:
            waves, wave_lengths = self.mel_to_wave(mels), mel_lengths_to_samples(mel_lengths)
        energies = [
            waves[i, int(s.start * 16_000) : int(s.end * 16_000)].pow(2).mean()
            for i, item_sites in enumerate(sites)
            for s in item_sites
        ]
        if not energies:
            return waves.new_zeros(()), EnergyParts(waves.new_zeros(()), waves.new_zeros(()))
        loss = torch.stack(energies).mean()
        return loss, EnergyParts(loss.detach(), torch.tensor(float(len(energies))))


@pytest.fixture(scope="module")
def m2w() -> MelToWave:
    return MelToWave.tiny(seed=0)


def _model(m2w: MelToWave, *, lookup=lambda text: [SITE], **kwargs: Any) -> LeakAwareCFM:
    kwargs.setdefault("leak_penalty", EnergyPenalty(m2w))
    kwargs.setdefault("leak_weight", 10.0)
    kwargs.setdefault("audio_drop_prob", 0.0)
    kwargs.setdefault("cond_drop_prob", 0.0)
    kwargs.setdefault("sites_in_span_only", False)
    model = tiny_f5(256, seed=0, site_lookup=lookup, **kwargs)
    # F5 zero-initialises the output layer, so pred == 0 at init would hide mistakes in x1_hat
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        model.transformer.proj_out.weight.copy_(0.1 * torch.randn(model.transformer.proj_out.weight.shape, generator=g))
    return model


def _batch(seed: int = 0) -> tuple[torch.Tensor, list[str], torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mel = torch.randn(2, 48, 100, generator=g) - 4.0
    mel[1, 40:] = 0.0  # padding, as F5's collate_fn pads
    return mel, ["abc", "de"], torch.tensor([48, 40])


def _run(model: CFM, seed: int = 0, **batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """Forward with fixed RNG; also returns the transformer's call kwargs (x_t, time, drop flags)."""
    mel, text, lens = _batch()
    seen: dict = {}
    handle = model.transformer.register_forward_hook(lambda m, a, kw, o: seen.update(kw), with_kwargs=True)
    random.seed(seed)
    torch.manual_seed(seed)
    loss, cond, pred = model(batch.get("mel", mel), text=batch.get("text", text), lens=batch.get("lens", lens))
    handle.remove()
    return loss, cond, pred, seen


def _plain_cfm(model: LeakAwareCFM) -> CFM:
    plain = CFM(copy.deepcopy(model.transformer), audio_drop_prob=model.audio_drop_prob,
                cond_drop_prob=model.cond_drop_prob, mel_spec_kwargs=dict(n_mel_channels=100))
    return plain


def _span(cond: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
    return (cond == 0).all(-1) & (torch.arange(cond.shape[1])[None] < lens[:, None])


def test_contract_matches_parent_cfm(m2w: MelToWave) -> None:
    model = _model(m2w)
    loss, cond, pred, seen = _run(model)
    ref_loss, ref_cond, ref_pred, _ = _run(_plain_cfm(model))
    assert loss.shape == ref_loss.shape == ()
    assert cond.shape == ref_cond.shape == pred.shape == ref_pred.shape == (2, 48, 100)
    torch.testing.assert_close(cond, ref_cond)
    torch.testing.assert_close(pred, ref_pred)
    # total = F5 flow loss + leak_weight * mean(t^2) * penalty
    weight = 10.0 * float((seen["time"] ** 2).mean())
    assert model.last_leak_weight == pytest.approx(weight)
    torch.testing.assert_close(loss.detach(), ref_loss.detach() + weight * model.last_leak_penalty)
    assert model.last_leak_penalty > 0
    assert isinstance(model.last_leak_parts, EnergyParts)
    assert not model.last_leak_parts.energy.requires_grad


def test_without_penalty_is_exactly_parent(m2w: MelToWave) -> None:
    model = _model(m2w, leak_penalty=None)
    loss, *_ = _run(model)
    ref_loss, *_ = _run(_plain_cfm(model))
    assert torch.equal(loss, ref_loss)
    assert model.last_leak_parts is None and model.last_leak_weight == 0.0


def test_penalty_sees_x1_hat_in_span_and_ground_truth_outside(m2w: MelToWave) -> None:
    model = _model(m2w)
    mel, _, lens = _batch()
    _, cond, pred, seen = _run(model)
    call = model.leak_penalty.calls[-1]
    span = _span(cond, lens)
    assert span.any() and (~span[:, :40]).any()  # both regions exist
    assert pred[span].abs().min() > 0
    t = seen["time"][:, None, None]
    expected = torch.where(span[..., None], seen["x"] + (1 - t) * pred, mel)
    torch.testing.assert_close(call["mels"], expected)
    assert call["mel_lengths"].tolist() == [48, 40]
    assert call["waves"] is None and call["sites"] == [[SITE], [SITE]]


def test_gradient_reaches_pred_in_span_only_and_not_the_vocoder(m2w: MelToWave) -> None:
    def pred_grad(weight: float) -> tuple[torch.Tensor, torch.Tensor]:
        model = _model(m2w, leak_weight=weight)
        loss, cond, pred, _ = _run(model)
        pred.retain_grad()
        loss.backward()
        return pred.grad, cond

    with_leak, cond = pred_grad(10.0)
    without, _ = pred_grad(0.0)
    from_leak = with_leak - without  # the penalty's own share of d loss / d pred
    span = _span(cond, _batch()[2])
    assert from_leak[span].abs().sum() > 0
    assert torch.equal(from_leak[~span], torch.zeros_like(from_leak[~span]))
    assert all(p.grad is None and not p.requires_grad for p in m2w.parameters())


def test_model_side_vocoding_passes_waves(m2w: MelToWave) -> None:
    model = _model(m2w, mel_to_wave=m2w)
    loss, *_ = _run(model)
    call = model.leak_penalty.calls[-1]
    assert call["mels"] is None
    assert call["wave_lengths"].tolist() == mel_lengths_to_samples(torch.tensor([48, 40])).tolist()
    assert call["waves"].shape == (2, mel_lengths_to_samples(48))
    loss.backward()
    assert torch.isfinite(loss)


def test_a_penalty_with_a_mel_bridge_gets_the_mels_even_beside_a_vocoder(m2w: MelToWave) -> None:
    """leak.mel_bridge: the model does not vocode for such a penalty (it reads x1_hat's mels itself); with
    leak_crop it calls the penalty's own crop (LeakPenalty.cropped: the encoder on crops), never the vocoder."""
    penalty = EnergyPenalty(m2w)
    penalty.mel_bridge = torch.nn.Identity()  # what LeakPenalty(mel_bridge=...) holds
    model = _model(m2w, leak_penalty=penalty, mel_to_wave=m2w)
    loss, *_ = _run(model)
    call = penalty.calls[-1]
    assert call["waves"] is None and call["mels"].shape == (2, 48, 100) and call["mel_lengths"].tolist() == [48, 40]
    crops = []

    def cropped(mels, mel_lengths, sites):
        crops.append((mels.shape, mel_lengths.tolist(), sites))
        return penalty(mels=mels, mel_lengths=mel_lengths, sites=sites)

    penalty.cropped = cropped
    model = _model(m2w, leak_penalty=penalty, mel_to_wave=m2w, leak_crop=True)
    loss, *_ = _run(model)
    assert crops and crops[-1][0] == (2, 48, 100) and crops[-1][1] == [48, 40]
    assert model.last_leak_sites == crops[-1][2]  # the items' sites, in the order of parts.site_probs


def test_no_sites_gives_flow_loss_and_no_nan(m2w: MelToWave) -> None:
    model = _model(m2w, lookup=lambda text: [])
    loss, *_ = _run(model)
    ref_loss, *_ = _run(_plain_cfm(model))
    assert torch.equal(loss, ref_loss)
    assert model.leak_penalty.calls == []
    assert model.last_leak_parts is None and model.last_leak_weight == 0.0
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_items_without_sites_are_left_out(m2w: MelToWave) -> None:
    model = _model(m2w, lookup=lambda text: [SITE] if text == "de" else None)
    loss, *_ = _run(model)
    call = model.leak_penalty.calls[-1]
    assert call["mels"].shape[0] == 1 and call["mel_lengths"].tolist() == [40]
    assert call["sites"] == [[SITE]]
    assert torch.isfinite(loss)


def test_dropped_text_steps_skip_the_penalty(m2w: MelToWave) -> None:
    model = _model(m2w, cond_drop_prob=1.0)
    loss, _, _, seen = _run(model)
    ref_loss, *_ = _run(_plain_cfm(model))
    assert seen["drop_text"] is True
    assert model.leak_penalty.calls == [] and model.last_leak_weight == 0.0
    assert torch.equal(loss, ref_loss) and torch.isfinite(loss)


def test_text_as_token_lists_is_joined_for_lookup(m2w: MelToWave) -> None:
    asked: list[str] = []
    chars = {c: i for i, c in enumerate(" abcde")}  # F5 needs a char map for token-list text
    model = _model(m2w, lookup=lambda text: asked.append(text) or [SITE], vocab_char_map=chars)
    _run(model, text=[list("abc"), list("de")])
    assert asked == ["abc", "de"]


def test_token_id_text_with_penalty_is_an_error(m2w: MelToWave) -> None:
    model = _model(m2w)
    with pytest.raises(TypeError, match="list of strings"):
        _run(model, text=torch.tensor([[1, 2, 3], [4, 5, -1]]))


def test_sites_in_span_only_drops_conditioned_sites(m2w: MelToWave) -> None:
    early, late = TimedSite(0.0, 0.05, "quality", "a"), TimedSite(0.38, 0.42, "quality", "b")
    span = torch.zeros(48, dtype=torch.bool)
    span[30:48] = True  # frames 30..47 = 0.32..0.51 s
    assert sites_in_span([early, late], span, FRAME_RATE) == [late]
    assert sites_in_span([TimedSite(0.9, 1.0, "quality", "c")], span, FRAME_RATE) == []
    model = _model(m2w, sites_in_span_only=True, lookup=lambda text: [early, late])
    _, cond, _, _ = _run(model)
    per_item = [sites_in_span([early, late], s, FRAME_RATE) for s in _span(cond, _batch()[2])]
    assert any(len(sites) < 2 for sites in per_item)  # this seed's spans do leave a site out
    calls = model.leak_penalty.calls
    assert (calls[-1]["sites"] if calls else []) == [sites for sites in per_item if sites]


def test_helpers_stay_out_of_state_dict_but_follow_the_model(m2w: MelToWave) -> None:
    model = _model(m2w, leak_penalty=EnergyPenalty(MelToWave.tiny(1)), mel_to_wave=MelToWave.tiny(2))
    assert set(model.state_dict()) == set(_plain_cfm(model).state_dict())
    assert not any("mel_to_wave" in n or "leak_penalty" in n for n, _ in model.named_parameters())
    twin = copy.deepcopy(model)  # what F5's EMA does
    assert twin.leak_penalty is model.leak_penalty and twin.mel_to_wave is model.mel_to_wave
    model.double()
    assert next(model.mel_to_wave.parameters()).dtype == torch.float64
    assert next(model.leak_penalty.parameters()).dtype == torch.float64
    model.train()
    assert not model.mel_to_wave.training


# --- checkpoints and vocab ---------------------------------------------------------------------------------


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.state_dict().items()}


def test_load_pt_in_f5_trainer_format_with_prefixes(tmp_path: Path) -> None:
    source, target = tiny_f5(256, seed=1), tiny_f5(256, seed=2)
    state = source.state_dict()
    ema = {f"ema_model._orig_mod.{k}": v for k, v in state.items()} | {"initted": torch.tensor(True), "step": torch.tensor(3)}
    model_sd = {k: torch.zeros_like(v) for k, v in state.items()}  # must NOT be chosen over the EMA weights
    torch.save(dict(ema_model_state_dict=ema, model_state_dict=model_sd, update=3), tmp_path / "model_last.pt")
    report = load_indicf5_checkpoint(target, tmp_path / "model_last.pt")
    assert report.missing == report.unexpected == report.mismatched == []
    for k, v in _params(target).items():
        torch.testing.assert_close(v, state[k], msg=k)


def test_load_safetensors_with_module_prefix_reports_keys(tmp_path: Path) -> None:
    source, target = tiny_f5(256, seed=1), tiny_f5(300, seed=2)  # different vocab: text embedding mismatches
    state = {f"module.{k}": v.contiguous() for k, v in source.state_dict().items()}
    dropped = next(iter(state))
    del state[dropped]
    state["module.extra.weight"] = torch.ones(2)
    save_file(state, str(tmp_path / "model.safetensors"))
    report = load_indicf5_checkpoint(target, tmp_path / "model.safetensors")
    assert report.missing == [dropped.removeprefix("module.")]
    assert report.unexpected == ["extra.weight"]
    assert report.mismatched == ["transformer.text_embed.text_embed.weight"]
    proj = "transformer.proj_out.weight"
    torch.testing.assert_close(target.state_dict()[proj], source.state_dict()[proj])


def test_devanagari_vocab_file_reads_back_through_f5(tmp_path: Path) -> None:
    path = tmp_path / "vocab.txt"
    vocab = devanagari_vocab(path)
    f5_map, size = get_tokenizer(str(path), "custom")
    assert f5_map == vocab and size == len(devanagari_chars())
    assert vocab[" "] == 0  # F5 maps unknown chars to 0
    for ch in "कखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसहािीुूेैोौंःँ्ऋृ।॥०१२३४५६७८९\u200d\u200c,.?!":
        assert ch in vocab, ch
    assert len(set(vocab.values())) == len(vocab) and all(len(c) == 1 for c in vocab)
    assert "\n" not in vocab and "a" not in vocab


# --- data and training -------------------------------------------------------------------------------------


def test_wave_text_dataset_feeds_f5_collate() -> None:
    wave16 = torch.randn(16_000) * 0.1  # 1 s at 16 kHz
    wave24 = torch.randn(12_000) * 0.1  # 0.5 s at 24 kHz
    ds = WaveTextDataset([(wave16, 16_000, "नमस्ते"), (wave24, 24_000, "घर")])
    items = [ds[0], ds[1]]
    assert items[0]["mel_spec"].shape == (100, 24_000 // 256 + 1)
    assert items[1]["mel_spec"].shape == (100, 12_000 // 256 + 1)
    assert ds.get_frame_len(0) == pytest.approx(24_000 / 256)
    batch = collate_fn(items)
    assert batch["mel"].shape == (2, 100, 94) and batch["mel_lengths"].tolist() == [94, 47]
    assert batch["text"] == ["नमस्ते", "घर"]


@pytest.mark.parametrize("wave, message", [
    (torch.randn(2, 16_000), r"items\[1\]: the wave must be a 1-D tensor \[t\].*got \(2, 16000\)"),  # channels end to end
    (torch.randn(16_000, 1), r"must be a 1-D tensor"),  # resampled along its size-1 axis
    (torch.zeros(0), r"items\[1\]: the wave is empty"),  # a reshape RuntimeError
    (torch.tensor([0.1, float("nan")] * 8000), r"items\[1\]: the wave holds NaN/Inf"),  # trained a NaN model
])
def test_wave_text_dataset_refuses_waves_it_would_misread(wave, message) -> None:
    with pytest.raises(ValueError, match=message):
        WaveTextDataset([(torch.randn(16_000) * 0.1, 16_000, "घर"), (wave, 16_000, "घर")])


def test_leak_curve_logger_writes_every_n_training_steps(tmp_path: Path, m2w: MelToWave) -> None:
    model = _model(m2w)
    logged: list[tuple[dict, int]] = []
    hook = LeakCurveLogger(tmp_path / "c.csv", every=2, log_fn=lambda row, step: logged.append((row, step)))
    handle = model.register_forward_hook(hook)
    for seed in range(4):
        _run(model, seed=seed)
    model.eval()
    _run(model)  # eval calls do not count
    handle.remove()
    assert [step for _, step in logged] == [2, 4]
    assert {"loss/total", "loss/flow", "leak/weight", "leak/penalty", "leak/energy", "leak/n_sites"} <= set(logged[0][0])
    rows = list(csv.DictReader((tmp_path / "c.csv").open()))
    assert {r["step"] for r in rows} == {"2", "4"}


def test_a_resumed_leak_curve_logger_keeps_the_curve_to_its_update_and_counts_on(tmp_path: Path, m2w: MelToWave) -> None:
    # a resume truncated the curves to the header and logged updates 3, 4 as steps 1, 2
    path = tmp_path / "c.csv"
    path.write_text("step,name,value\n1,leak/penalty,0.5\n2,leak/penalty,0.4\n3,leak/penalty,0.3\n")
    model = _model(m2w)
    logged: list[int] = []
    hook = LeakCurveLogger(path, every=1, log_fn=lambda row, step: logged.append(step), start_update=2)
    handle = model.register_forward_hook(hook)
    for seed in range(2):
        _run(model, seed=seed)
    handle.remove()
    rows = list(csv.DictReader(path.open()))
    assert logged == [3, 4]
    assert [r["value"] for r in rows if r["step"] in ("1", "2")] == ["0.5", "0.4"]  # kept
    assert "0.3" not in [r["value"] for r in rows]  # logged after the checkpoint: trained again
    assert sorted({int(r["step"]) for r in rows}) == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="start_update"):
        LeakCurveLogger(path, start_update=-1)


def test_checkpoint_update_reads_the_update_and_names_a_damaged_file(tmp_path: Path) -> None:
    from integrations.f5_tts import CheckpointReadError, checkpoint_update

    assert checkpoint_update(tmp_path) == 0
    torch.save({"update": 7, "model_state_dict": {"w": torch.zeros(2)}}, tmp_path / "model_last.pt")
    assert checkpoint_update(tmp_path) == 7
    data = (tmp_path / "model_last.pt").read_bytes()
    (tmp_path / "model_last.pt").write_bytes(data[: len(data) // 2])  # a save cut short (Ctrl-C)
    with pytest.raises(CheckpointReadError, match="model_last.pt: cannot be read"):
        checkpoint_update(tmp_path)


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), -5.0, True, "0.1"])
def test_a_leak_weight_that_is_not_a_finite_number_at_least_0_is_refused(m2w: MelToWave, weight) -> None:
    # NaN/inf made the training loss NaN/inf; -5 trained the model to leak more
    with pytest.raises(ValueError, match="leak_weight must be a finite number >= 0"):
        tiny_f5(256, seed=0, leak_penalty=EnergyPenalty(m2w), mel_to_wave=m2w, leak_weight=weight,
                site_lookup=lambda text: [SITE])


def test_a_penalty_without_a_site_lookup_is_refused(m2w: MelToWave) -> None:
    # without one, no site was ever found: the penalty was identically zero, without a word
    with pytest.raises(ValueError, match="needs a site_lookup"):
        tiny_f5(256, seed=0, leak_penalty=EnergyPenalty(m2w), mel_to_wave=m2w, leak_weight=0.1)
    tiny_f5(256, seed=0, leak_penalty=EnergyPenalty(m2w), mel_to_wave=m2w, leak_weight=0.0)  # monitoring: fine


class _FakeProbe:
    texts = ["घर", "पानी पर्‍यो"]

    def __init__(self) -> None:
        self.waves: list[torch.Tensor] = []

    def measure(self, waves: list[torch.Tensor]) -> dict[str, float]:
        self.waves = waves
        return {"leak_probe/flagged_share": 0.0, "leak_probe/sites": 0.0}


def test_f5_probe_synthesises_every_probe_text_and_restores_training_mode(m2w: MelToWave) -> None:
    from integrations.f5_tts import f5_probe

    model = tiny_f5(256, seed=0)
    model.train()
    probe = _FakeProbe()
    measure = f5_probe(probe, 0.1 * torch.randn(8000, generator=torch.Generator().manual_seed(0)), "नमस्ते", m2w, nfe=2)
    assert measure(model) == {"leak_probe/flagged_share": 0.0, "leak_probe/sites": 0.0}
    assert model.training and len(probe.waves) == 2
    assert all(w.dim() == 1 and w.numel() > 0 and torch.isfinite(w).all() for w in probe.waves)
    assert len(probe.waves[1]) > len(probe.waves[0])  # a longer sentence gets a longer synthesis
    assert all(p.grad is None for p in model.parameters())
    # F5's sample() seeds torch's generator: training after each probe restarted from the same noise and times
    torch.manual_seed(12345)  # a state no probe leaves behind
    state = torch.get_rng_state()
    measure(model)
    after_probe = torch.rand(4)
    torch.set_rng_state(state)
    assert torch.equal(after_probe, torch.rand(4))


def test_a_clip_at_an_odd_rate_is_resampled_with_bounded_memory(monkeypatch) -> None:
    # torchaudio's polyphase kernel for 44,101 Hz -> 24 kHz asked for 4 GB for one second (leakloss.audio.resample
    # interpolates such ratios; torchaudio's kernel is never asked for them)
    import torchaudio.functional

    from integrations.f5_tts import WaveTextDataset

    def refuse(wave, orig, new, *args, **kwargs):
        raise AssertionError(f"torchaudio's resample asked for {orig} -> {new} Hz")

    monkeypatch.setattr(torchaudio.functional, "resample", refuse)
    data = WaveTextDataset([(0.1 * torch.randn(44_101, generator=torch.Generator().manual_seed(0)), 44_101, "आज")])
    assert abs(data.waves[0].numel() - 24_000) <= 1 and torch.isfinite(data.waves[0]).all()


def test_f5_probe_samples_with_the_guidance_and_sway_it_is_given(m2w: MelToWave, monkeypatch) -> None:
    # the Hindi base is sampled with cfg 2 and sway -1 (train_f5.evaluate); the probe used CFM.sample's defaults
    from integrations.f5_tts import f5_probe

    model = tiny_f5(256, seed=0)
    seen: list[dict] = []
    real = model.sample
    monkeypatch.setattr(model, "sample", lambda *a, **k: seen.append(k) or real(*a, **k))
    ref = 0.1 * torch.randn(8000, generator=torch.Generator().manual_seed(0))
    f5_probe(_FakeProbe(), ref, "नमस्ते", m2w, nfe=2, cfg_strength=2.5, sway_sampling_coef=-1.0)(model)
    assert [(k["steps"], k["cfg_strength"], k["sway_sampling_coef"]) for k in seen] == [(2, 2.5, -1.0)] * 2


def test_leak_curve_logger_probes_every_n_updates(tmp_path: Path, m2w: MelToWave) -> None:
    model = _model(m2w)
    probed: list[int] = []
    hook = LeakCurveLogger(tmp_path / "c.csv", every=100, probe=lambda m: probed.append(1) or {"leak_probe/x": 1.0},
                           probe_every=2)
    handle = model.register_forward_hook(hook)
    for seed in range(5):
        _run(model, seed=seed)
    handle.remove()
    rows = list(csv.DictReader((tmp_path / "c.csv").open()))
    assert len(probed) == 2 and [(r["step"], r["name"]) for r in rows] == [("2", "leak_probe/x"), ("4", "leak_probe/x")]


TEXTS = ["नमस्ते", "म घर जान्छु", "पानी", "राम्रो छ", "आमा", "किताब", "हिमाल", "बाटो"]


@pytest.mark.slow
def test_train_f5_twenty_steps_offline(tmp_path: Path, m2w: MelToWave) -> None:
    from leakloss.constants import SAMPLE_RATE
    from leakloss.speech.synth import HINDI_VOICES, speak_text

    readings = [speak_text(t, HINDI_VOICES[0]) for t in TEXTS]
    items = [(r.waveform, SAMPLE_RATE, t) for r, t in zip(readings, TEXTS)] * 2  # 16 utterances
    sites = {t: [TimedSite(0.05, min(0.3, r.duration), "deletion", "ʌ->∅")] for r, t in zip(readings, TEXTS)}
    vocab = devanagari_vocab(tmp_path / "vocab.txt")
    model = tiny_f5(len(vocab), seed=0, vocab_char_map=vocab, leak_penalty=EnergyPenalty(m2w), leak_weight=1.0,
                    site_lookup=lambda text: sites.get(text, []))
    run = train_f5(model, WaveTextDataset(items), tmp_path / "run", steps=20, batch_size=4, log_every=5)
    assert run.wandb_run_dir is not None and run.wandb_run_dir.name.startswith("offline-run-")
    records = list(run.wandb_run_dir.glob("run-*.wandb"))
    assert records and b"leak/penalty" in records[0].read_bytes()
    rows = list(csv.DictReader(run.leak_csv.open()))
    assert {r["step"] for r in rows} == {"5", "10", "15", "20"}
    assert all(torch.isfinite(torch.tensor(float(r["value"]))) for r in rows)
    assert (run.checkpoint_dir / "model_last.pt").exists()
    fresh = tiny_f5(len(vocab), seed=5, vocab_char_map=vocab)
    report = load_indicf5_checkpoint(fresh, run.checkpoint_dir / "model_last.pt")
    assert report.missing == report.unexpected == report.mismatched == []


@pytest.mark.slow
def test_penalty_lowers_the_leak_curve_of_a_tiny_f5_in_200_steps(tmp_path: Path) -> None:
    """The issue's check: tiny F5 + the embedded tiny Vocos, 200 steps through F5's Trainer, with and without
    the real penalty (recognizer A's raw-conv head, by name: the check was made for it), on Hindi-base readings: the
    penalised run ends lower. Measured 2026-12-04 with the shipped head on wb (Whisper base) instead: 2.219 with vs
    2.213 without — the wb penalty does not move this tiny F5 in 200 steps (a negative result, docs/penalty.md)."""
    from integrations.f5_tts import final_leak, penalty_comparison
    from leakloss.constants import SAMPLE_RATE
    from leakloss.penalty import LeakPenalty, place_dataset_sites
    from leakloss.speech.corpus import builtin_sentences, split_sentences
    from leakloss.speech.synth import TRAIN_HINDI_VOICES, speak_text

    train, _ = split_sentences(builtin_sentences())
    texts = sorted(train, key=len)[:12]  # short sentences: the CI version must stay under 3 minutes
    penalty = LeakPenalty.load(head="rawconv_a", mel_to_wave=MelToWave.embedded())
    items = [(speak_text(t, TRAIN_HINDI_VOICES[i % 5]).waveform, SAMPLE_RATE, t) for i, t in enumerate(texts)]
    sites = place_dataset_sites([(w, t) for w, _, t in items], penalty.recognizer, tmp_path / "leak_sites.jsonl")
    assert sum(map(len, sites)) >= 6
    runs = penalty_comparison(items, sites, tmp_path, leak_penalty=penalty, mel_to_wave=penalty.mel_to_wave,
                              steps=200, batch_size=2)  # timing lives in benchmarks, not here
    without, with_penalty = (final_leak(runs[k].leak_csv) for k in ("without_penalty", "with_penalty"))
    print(f"final leak penalty: without {without:.3f}, with {with_penalty:.3f}")
    assert with_penalty < 0.8 * without, (with_penalty, without)
    for run in runs.values():
        records = list(run.wandb_run_dir.glob("run-*.wandb"))
        assert records and b"leak/per_kind/deletion" in records[0].read_bytes()


# ---------------------------------------------------------------------------------------------------------------
# issue 43: a diverged fine-tune exited 0 with NaN weights saved and a leak curve of 0.0


class _MaskedParts(NamedTuple):
    loss: torch.Tensor
    per_kind: dict
    active_sites: torch.Tensor
    nonfinite_items: torch.Tensor


def test_a_step_whose_items_were_all_masked_logs_its_penalty_as_not_measured(m2w: MelToWave) -> None:
    # "leak/penalty 0.0" beside "nonfinite_items 3" read as "no leak" for a dead model
    from integrations.f5_tts import leak_log_row

    model = _model(m2w)
    zero = torch.tensor(0.0)
    model.last_leak_penalty = zero
    model.last_leak_parts = _MaskedParts(zero, {"deletion": zero}, torch.tensor(0), torch.tensor(3))
    row = leak_log_row(model, torch.tensor(float("nan")))
    assert row["loss/nonfinite"] == 1.0 and row["leak/nonfinite_items"] == 3.0
    assert math.isnan(row["leak/penalty"]) and math.isnan(row["leak/per_kind/deletion"])
    model.last_leak_parts = _MaskedParts(zero, {"deletion": zero}, torch.tensor(2), torch.tensor(1))
    row = leak_log_row(model, torch.tensor(1.0))  # some items measured: their penalty stands
    assert row["leak/penalty"] == 0.0 and "loss/nonfinite" not in row


class _FakeAccelerator:
    """What ``_guard_saves`` uses of F5's accelerator: ``unwrap_model`` and ``save`` (a torch.save)."""

    unwrap_model = staticmethod(lambda model: model)

    def save(self, obj: Any, f: str) -> None:
        torch.save(obj, f)


class _FakeF5Trainer:
    """What ``_guard_saves`` uses of F5's Trainer: ``accelerator``, ``model``, ``ema_model`` and a
    ``save_checkpoint`` that writes the weights through ``accelerator.save``, as F5's does."""

    def __init__(self, model: torch.nn.Module, path: Path) -> None:
        self.model, self.ema_model, self.path = model, None, path
        self.accelerator = _FakeAccelerator()

    def save_checkpoint(self, update: int, last: bool = False) -> None:
        self.accelerator.save({"model_state_dict": self.model.state_dict(), "update": update}, str(self.path))


def test_a_save_cut_short_keeps_the_last_checkpoint(tmp_path, m2w: MelToWave) -> None:
    # Ctrl-C during F5's save left a truncated model_last.pt, the only resume point, and the rerun was refused
    from integrations.f5_tts import _guard_saves, checkpoint_update

    trainer = _FakeF5Trainer(_model(m2w), tmp_path / "model_last.pt")
    _guard_saves(trainer)
    trainer.save_checkpoint(3, last=True)

    def interrupted(obj: Any, f: str) -> None:
        Path(f).write_bytes(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    again = _FakeF5Trainer(_model(m2w), tmp_path / "model_last.pt")
    again.accelerator.save = interrupted  # the write the guard wraps is cut short
    _guard_saves(again)
    with pytest.raises(KeyboardInterrupt):
        again.save_checkpoint(4, last=True)
    assert checkpoint_update(tmp_path) == 3 and sorted(p.name for p in tmp_path.iterdir()) == ["model_last.pt"]


_BAD = st.sampled_from([float("nan"), float("inf"), float("-inf")])


@pytest.fixture(scope="module")
def pristine(m2w: MelToWave) -> tuple[LeakAwareCFM, dict[str, torch.Tensor]]:
    model = _model(m2w)
    return model, copy.deepcopy(model.state_dict())


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nonfinite=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 47), st.integers(0, 99), _BAD), max_size=3),
       poisoned=st.one_of(st.none(), st.tuples(st.integers(0, 10_000), _BAD)))
def test_random_nonfinite_batches_and_weights_stop_the_run_and_are_never_saved(tmp_path, pristine, nonfinite,
                                                                               poisoned):
    """A forward of a batch with NaN/Inf at random places, then F5's save: a non-finite loss stops the run (the
    logger raises before backward), non-finite weights are never saved; otherwise the step logs and saves."""
    from integrations.f5_tts import TrainingDivergedError, _guard_saves

    model, state = pristine
    model.load_state_dict(state)
    model.train()
    mel, text, lens = _batch()
    for item, frame, mel_bin, value in nonfinite:
        mel[item, frame, mel_bin] = value
    if poisoned is not None:
        weights = [p for p in model.parameters() if p.numel()]
        flat = torch.cat([p.detach().flatten() for p in weights])
        index, value = poisoned[0] % flat.numel(), poisoned[1]
        for p in weights:  # the index-th weight of all of them
            if index < p.numel():
                with torch.no_grad():
                    p.view(-1)[index] = value
                break
            index -= p.numel()
    run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    run.mkdir()
    trainer = _FakeF5Trainer(model, run / "model_last.pt")
    _guard_saves(trainer)
    handle = model.register_forward_hook(LeakCurveLogger(run / "c.csv", every=100))
    try:
        loss, _, _ = model(mel, text=text, lens=lens)
        trainer.save_checkpoint(1, last=True)
    except TrainingDivergedError as err:
        assert "not finite" in str(err) or "hold NaN/Inf" in str(err)
    else:  # a clean result: a finite loss and finite saved weights
        assert torch.isfinite(loss)
    finally:
        handle.remove()
    weights_finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    if (run / "model_last.pt").exists():
        saved = torch.load(run / "model_last.pt", weights_only=True)["model_state_dict"]
        assert all(bool(torch.isfinite(t).all()) for t in saved.values() if t.is_floating_point())
    else:
        assert not weights_finite or any(math.isnan(v) or math.isinf(v) for *_, v in nonfinite)


def test_the_clean_mel_estimate_keeps_t_in_fp32_under_bf16():
    """x1_hat = x_t + (1 - t) * pred with a bf16 pred (autocast): t = 0.999 once rounded to 1.0 in bf16, so the
    items closest to speech got no gradient at all; d x1_hat / d pred must be 1 - t."""
    t = torch.tensor([0.999, 0.99, 0.95])
    x_t = torch.randn(3, 4, 100)
    pred = torch.randn(3, 4, 100).bfloat16().requires_grad_(True)
    x1_hat, span = clean_mel_estimate(x_t, t, pred, torch.zeros(3, 4, 100), torch.tensor([4, 4, 3]))
    x1_hat.sum().backward()
    assert span.tolist() == [[True] * 4, [True] * 4, [True, True, True, False]]
    torch.testing.assert_close(pred.grad[:, 0, 0].float(), 1 - t, rtol=1e-2, atol=0)
    torch.testing.assert_close(x1_hat[:, :3], x_t[:, :3] + (1 - t[:, None, None]) * pred.detach().float()[:, :3])


@pytest.mark.parametrize("content", [b"the weights are on the shared drive\n", b"hello\n", b"(junk", b"Q", b""])
def test_a_text_file_given_as_a_checkpoint_is_a_read_error_not_a_traceback(tmp_path, content):
    # torch's restricted unpickler raised IndexError ("pop from empty list") and KeyError on such files
    from integrations.f5_tts import CheckpointReadError, load_state

    (tmp_path / "notes_model.pt").write_bytes(content)
    with pytest.raises(CheckpointReadError, match="notes_model.pt: not a readable F5 checkpoint"):
        load_state(tmp_path / "notes_model.pt")


@pytest.mark.parametrize("kwargs, message", [
    ({"steps": 1}, r"steps must be a whole number >= 2"),
    ({"steps": 10, "num_warmup_updates": 0}, r"num_warmup_updates must be a whole number >= 1"),
    ({"steps": 10, "num_warmup_updates": True}, r"num_warmup_updates must be a whole number >= 1"),
])
def test_train_f5_refuses_a_schedule_without_a_warm_up_update_before_any_work(tmp_path, kwargs, message):
    # F5's schedule with a warm-up of 0 starts at lr x 1e-8 and its decay scales that: the run trained nothing
    from integrations.f5_tts import train_f5

    with pytest.raises(ValueError, match=message):
        train_f5(None, None, tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()


def test_f5_probe_takes_a_24khz_prompt_as_it_is(m2w: MelToWave, monkeypatch) -> None:
    # finetune-f5 passed its prompt through 16 kHz: nothing above 8 kHz, unlike F5's own prompts
    import leakloss.audio
    from integrations.f5_tts import f5_probe

    calls = []
    real = leakloss.audio.resample
    monkeypatch.setattr(leakloss.audio, "resample", lambda *a, **k: calls.append(a[1:]) or real(*a, **k))
    wave = 0.1 * torch.randn(12000, generator=torch.Generator().manual_seed(0))
    f5_probe(_FakeProbe(), wave, "नमस्ते", m2w, nfe=2, ref_rate=24_000)
    assert calls == []  # used as it is
    f5_probe(_FakeProbe(), wave, "नमस्ते", m2w, nfe=2)  # the default: a 16 kHz wave, brought to 24 kHz
    assert calls == [(16_000, 24_000)]
