"""``benchmarks/penalty_overhead.py`` on the Whisper path (issue 40): the FLOP counter follows the penalty as it
runs on a Whisper recognizer, the cropped share is below the uncropped one, the default recognizer follows the
shipped head's card, and the last line carries the new keys."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from leakloss.penalty import LeakPenalty
from leakloss.vocoder import VOCODER_TAIL_FRAMES, MelToWave
from tests.conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("transformers")
    return load_benchmark("penalty_overhead")


def tiny_whisper(folder: Path, own_length: bool = True):
    from tests.acoustic.test_frame_features import fake_whisper_recognizer

    return fake_whisper_recognizer(folder, own_length=own_length)


@pytest.fixture(scope="module")
def whisper_penalty(bench, tmp_path_factory):
    rec = tiny_whisper(tmp_path_factory.mktemp("tinyw") / "enc")
    head, _ = bench.build_head("wb", rec.frame_channels(None))
    return LeakPenalty(rec, head, mel_to_wave=MelToWave.tiny(0))


@pytest.mark.parametrize("own_length", [True, False])
def test_whisper_states_are_the_recognizers_frame_features(bench, tmp_path, own_length):
    """The fake-tensor-safe copy computes what WhisperRecognizer.frame_features(normalize=False) computes."""
    rec = tiny_whisper(tmp_path / "enc", own_length=own_length)
    wave = torch.randn(2, 13_000, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, _ = rec.frame_features(wave, None, rec.default_frame_layer, normalize=False)
        got = bench.FrameFeatures(rec, rec.default_frame_layer)(wave)
    assert got.shape == want.shape == (2, 8, 41)
    assert torch.allclose(got, want, atol=1e-5)


def test_stage_flops_add_up_to_the_whole_whisper_penalty(bench, whisper_penalty):
    """The per-stage count (vocoder with its silent tail, Whisper encoder on the items plus the penalty's tail,
    head) is the whole LeakPenalty(mels=...) count on real tensors, plus only the analytic inverse FFT."""
    frames = 188
    whole, summed = bench.check_against_full_penalty(whisper_penalty, frames)
    assert whole > 0
    assert summed - whole == bench.irfft_flops(frames + VOCODER_TAIL_FRAMES)
    parts = bench.penalty_parts_flops(whisper_penalty, 1, frames)
    assert set(parts) == {"vocoder backbone", "vocoder ISTFT head", "resampler", "whisper encoder", "raw-conv head"}
    assert parts["whisper encoder"] > 0


def test_margin_stage_flops_are_the_recognizers_own_count_plus_its_lstm(bench, tmp_path):
    """The margin term's recognizer stages (every encoder state, the phone head, log-softmax) count what the real
    WhisperRecognizer's forward + backward counts on real tensors, plus the BiLSTM the counter cannot see, which
    is priced by the gate formula (checked here against a naive sum over layers and directions)."""
    from leakloss.vocoder import mel_lengths_to_samples

    rec = tiny_whisper(tmp_path / "enc")
    frames = 188
    wave = torch.randn(1, int(mel_lengths_to_samples(frames)), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # the fake-tensor copy of the states is the recognizer's own
        want, _ = rec.hidden_states(wave)
        got = bench.whisper_all_states(rec, wave)
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)

    def real() -> None:
        x = wave.clone().requires_grad_(True)
        log_probs, _ = rec(x)
        log_probs.sum().backward()

    whole, _ = bench.count_flops(real)
    parts = bench.margin_parts_flops(rec, MelToWave.tiny(0), 1, frames)
    assert set(parts) == {"vocoder backbone", "vocoder ISTFT head", "resampler", "whisper encoder, all layers",
                          "phone head"}
    lstm, steps = rec.head.lstm, want.shape[2]
    naive = 0
    for layer in range(lstm.num_layers):
        width = lstm.input_size if layer == 0 else 2 * lstm.hidden_size
        for _direction in range(2):
            for _step in range(steps):  # forward gates, then the same matmuls for the input gradient
                naive += 2 * (2 * 4 * lstm.hidden_size * (width + lstm.hidden_size))
    assert bench.lstm_flops(lstm, 1, steps) == naive
    assert parts["whisper encoder, all layers"] + parts["phone head"] == whole + naive
    assert bench.margin_parts_flops(rec, MelToWave.tiny(0), 3, frames)["phone head"] == 3 * parts["phone head"]


def test_cropped_whisper_penalty_costs_less_than_the_whole(bench, whisper_penalty):
    from leakloss.functional.crop import length_groups
    from leakloss.vocoder import mel_lengths_to_samples

    batch, utt_frames = 3, 960
    crops, n_sites, ctx = bench.draw_crops(whisper_penalty, batch, utt_frames, density=0.15, site_s=0.08, seed=1)
    assert n_sites > 0 and crops
    # the Whisper crop keeps its configured margin each side (global attention: no receptive field)
    assert ctx.wave_s > whisper_penalty.recognizer.frame_context_s()
    sizes = [c.mel_frames for c in crops]
    groups = [(len(g), max(sizes[i] for i in g)) for g in length_groups(sizes)]
    region = [int(mel_lengths_to_samples(c.end - c.start)) for c in crops]
    wave_groups = [(len(g), max(region[i] for i in g)) for g in length_groups(region)]
    cropped = bench.cropped_parts_flops(whisper_penalty, groups, wave_groups)
    whole = bench.penalty_parts_flops(whisper_penalty, batch, utt_frames)
    assert 0 < cropped["whisper encoder"] < whole["whisper encoder"]
    assert 0 < sum(cropped.values()) < sum(whole.values())


def test_the_bridged_crop_is_counted_as_it_runs_and_costs_less_than_the_whole_bridge(bench, tmp_path):
    """bridge_cropped_parts_flops (fake tensors, stage by stage) against LeakPenalty.cropped counted whole on real
    tensors: the same FLOPs within 2% (elementwise ops are left out on both sides); the encoder's fewer than on the
    whole items (the tiny encoder here costs less than the shipped bridge; on wb it is the other way round)."""
    from leakloss.mel_bridge import MelBridge

    rec = tiny_whisper(tmp_path / "enc")
    head, _ = bench.build_head("wb", rec.frame_channels(None))
    bridged = LeakPenalty(rec, head, mel_bridge=MelBridge.embedded())
    batch, frames = 2, 700  # 7.5 s items: two sites 5 s apart make two crops each
    site = bench.TimedSite
    sites = [[site(0.5, 0.6, "deletion", "ʌ->∅"), site(5.5, 5.6, "deletion", "ʌ->∅")]] * batch
    parts, n_crops = bench.bridge_cropped_parts_flops(bridged, batch, frames, sites)
    assert n_crops == 4 and all(v > 0 for v in parts.values())
    mels = torch.randn(batch, frames, 100, generator=torch.Generator().manual_seed(0))

    def run() -> None:
        x = mels.clone().requires_grad_(True)
        loss, _ = bridged.cropped(x, None, sites)
        loss.backward()

    real, _ = bench.count_flops(run)
    assert sum(parts.values()) == pytest.approx(real, rel=0.02)
    whole = bench.bridge_parts_flops(bridged, batch, frames)
    assert parts["mel bridge"] == whole["mel bridge"]  # every item is bridged whole
    assert parts["whisper encoder"] < 0.5 * whole["whisper encoder"]  # ~2.5 s crops, not 7.5 s items


def test_whisper_architectures_are_the_embedded_recognizers(bench):
    wb = bench.whisper_architecture("wb")
    c = wb.frames.encoder.config
    assert (c.d_model, c.encoder_layers, c.encoder_attention_heads, c.num_mel_bins) == (512, 6, 8, 80)
    assert wb.frames.own_length and wb.encoder_name == "base" and wb.frame_channels() == 512
    w = bench.whisper_architecture("w")
    assert (w.frames.dim, len(w.frames.encoder.layers), w.frames.own_length) == (384, 4, False)
    head, note = bench.build_head("wb", wb.frame_channels())
    if "shipped" not in note:  # the frame head of conf/head/whisper_frame.yaml
        assert (head.in_channels, head.width, head.kernel, head.layers, head.members) == (512, 64, 3, 3, 3)


def test_default_recognizer_follows_the_shipped_head_card(bench, tmp_path, monkeypatch):
    import leakloss.penalty

    assert bench.shipped_head_recognizer() in bench.RECOGNIZERS
    (tmp_path / "rawconv.json").write_text(json.dumps({"recognizer": "wb@0123abcd"}), encoding="utf-8")
    monkeypatch.setattr(leakloss.penalty, "SHIPPED_HEADS", tmp_path)
    assert bench.shipped_head_recognizer() == "wb"


def test_the_penalty_is_counted_to_the_shipped_heads_frame_layer(bench, tmp_path, monkeypatch):
    """A head on an inner encoder state makes the penalty run the encoder only that far: the benchmark counts that."""
    import leakloss.penalty

    monkeypatch.setattr(leakloss.penalty, "SHIPPED_HEADS", tmp_path)
    card = {"recognizer": "wb@0123abcd", "features": {"source": "whisper-states", "layer": 4}}
    (tmp_path / "rawconv.json").write_text(json.dumps(card), encoding="utf-8")
    assert bench.shipped_head_layer("wb") == 4
    assert bench.shipped_head_layer("a") is None  # another recognizer's head: its default frames
    (tmp_path / "rawconv.json").write_text(json.dumps({"recognizer": "wb@0123abcd"}), encoding="utf-8")
    assert bench.shipped_head_layer("wb") is None  # a card from before features were recorded


@pytest.mark.slow
def test_last_line_has_the_new_keys_and_skips_the_scorer_cleanly(bench, tmp_path, monkeypatch, capsys):
    """A whole run on a tiny Whisper recognizer (F5 v1 Base counted as is): the last line keeps its keys, adds
    the scorer's throughput (nan, with the reason on stderr, when the weights are absent) and the recognizer."""
    rec = tiny_whisper(tmp_path / "enc")
    monkeypatch.setattr(bench, "build_recognizer", lambda name: (rec, "tiny Whisper for the test"))
    monkeypatch.setattr(bench, "released_vocos", lambda: MelToWave.tiny(0))
    monkeypatch.setattr(bench, "load_real_recognizer", lambda name: (None, f"recognizer {name} absent in the test"))
    monkeypatch.setattr(bench, "site_density_hint", lambda: "hint")  # 16 s of frontend over 570 sentences
    bench.main(["--recognizer", "wb", "--steps", "1", "--warmup", "0", "--crop-draws", "1", "--scorer-clips", "1",
                "--margin-sensitivity"])
    out = capsys.readouterr()
    figures = dict(pair.split("=", 1) for pair in out.out.strip().splitlines()[-1].split())
    assert list(figures) == ["penalty_flops_share", "penalty_flops_share_cropped", "penalty_flops_share_default",
                             "penalty_flops_share_bridge", "penalty_flops_share_bridge_cropped", "margin_flops_share",
                             "margin_flops_share_bridge", "wall_ratio", "scorer_speed_before", "scorer_speed_after", "recognizer"]
    assert figures["recognizer"] == "wb"
    assert 0 < float(figures["penalty_flops_share_cropped"]) < float(figures["penalty_flops_share"])
    # the mel bridge path (the shipped bridge on the tiny encoder here), counted stage by stage as the penalty runs
    assert 0 < float(figures["penalty_flops_share_bridge"])
    # the encoder on crops around the sites after the whole items' bridge: less than the whole bridged path
    assert 0 < float(figures["penalty_flops_share_bridge_cropped"]) < float(figures["penalty_flops_share_bridge"])
    # the path-margin term hears every encoder state of every item: more than the penalty's encoder to its layer
    assert float(figures["margin_flops_share"]) > 0
    # through the bridge (the shipped bridge on the tiny encoder: not cheaper than the tiny vocoder here)
    assert 0 < float(figures["margin_flops_share_bridge"])
    check = [line for line in out.out.splitlines() if "PathMarginPenalty(mels=..., mel_bridge)" in line]
    whole, stages = (float(x) for x in re.findall(r"([\d.]+) GFLOP", check[0]))
    assert whole == pytest.approx(stages, rel=1e-6)  # the bridged term's stages are what it runs
    check = [line for line in out.out.splitlines() if line.startswith("check, one 2 s item") and "bridged" in line]
    whole, stages = (float(x) for x in re.findall(r"([\d.]+) GFLOP", check[0]))
    assert whole == pytest.approx(stages, rel=0.01)
    # Whisper: finetune-f5 scores whole items, every item by default (leak.item_fraction 1)
    assert bench.default_item_fraction() == 1.0
    assert float(figures["penalty_flops_share_default"]) == float(figures["penalty_flops_share"])
    # leak.item_fraction 0.25: 10 of the 40 items, and FLOPs are linear in the items
    quarter = [line for line in out.out.splitlines() if line.startswith("sensitivity: ") and "item_fraction 0.25" in line]
    assert len(quarter) == 1 and "10 of 40 items scored" in quarter[0] and "whole items" in quarter[0]
    ratio = float(quarter[0].rsplit("share ", 1)[1].split()[0]) / float(figures["penalty_flops_share"])
    assert ratio == pytest.approx(10 / 40, rel=2e-3)
    assert math.isnan(float(figures["scorer_speed_before"])) and math.isnan(float(figures["scorer_speed_after"]))
    assert "recognizer w absent in the test" in out.err


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--warmup", "-1"], ["--crop-draws", "0"], ["--scorer-clips", "0"],
                                  ["--scorer-threads", "0"], ["--utt-frames", "0"], ["--utt-frames", "40000"],
                                  ["--scorer-seconds", "1"]])
def test_bad_arguments_are_refused_before_any_counting(bench, monkeypatch, argv, capsys):
    """Each failed minutes later with a traceback (an empty median or mean, no clip to warm up on, an empty batch)."""
    monkeypatch.setattr(bench, "build_recognizer", lambda name: pytest.fail("refuse before building anything"))
    with pytest.raises(SystemExit) as exc:
        bench.main(["--recognizer", "wb", *argv])
    assert exc.value.code == 2 and "need --steps >= 1" in capsys.readouterr().err
