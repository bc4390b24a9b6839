"""Tests for leakloss.vocoder: frozen, differentiable mel -> 16 kHz wave."""

from __future__ import annotations

import math

import pytest
import torch
import torchaudio.functional as AF

from leakloss.vocoder import MelToWave, mel_lengths_to_samples

pytest.importorskip("vocos")


@pytest.fixture(scope="module")
def m2w() -> MelToWave:
    return MelToWave.tiny(seed=0)


@pytest.mark.parametrize("n_frames", [1, 2, 3, 37, 94])
def test_output_length_matches_mel_lengths_to_samples(m2w: MelToWave, n_frames: int) -> None:
    wave = m2w(torch.randn(2, n_frames, 100))
    assert wave.shape == (2, mel_lengths_to_samples(n_frames))
    assert mel_lengths_to_samples(n_frames) == math.ceil(n_frames * 256 * 16_000 / 24_000)


def test_mel_lengths_to_samples_on_tensors() -> None:
    lengths = torch.tensor([0, 1, 3, 94])
    out = mel_lengths_to_samples(lengths)
    assert out.dtype == torch.long
    assert out.tolist() == [mel_lengths_to_samples(int(n)) for n in lengths]


def test_gradient_reaches_mel_not_vocoder(m2w: MelToWave) -> None:
    mel = torch.randn(2, 20, 100, requires_grad=True)
    m2w(mel).pow(2).mean().backward()
    assert mel.grad is not None and mel.grad.abs().sum() > 0 and torch.isfinite(mel.grad).all()
    assert all(not p.requires_grad and p.grad is None for p in m2w.parameters())


def test_stays_frozen_in_eval_when_parent_trains(m2w: MelToWave) -> None:
    parent = torch.nn.ModuleDict({"v": m2w})
    parent.train()
    assert not m2w.training and not m2w.backbone.training and not m2w.head.training
    assert parent.training


def test_from_vocos_matches_decode_and_resamples() -> None:
    from vocos import Vocos
    from vocos.feature_extractors import MelSpectrogramFeatures

    tiny = MelToWave.tiny(seed=3)
    vocos = Vocos(MelSpectrogramFeatures(), tiny.backbone, tiny.head)
    mel = torch.randn(1, 30, 100)
    at_24k = MelToWave.from_vocos(vocos, sample_rate_out=24_000)(mel)
    torch.testing.assert_close(at_24k, vocos.decode(mel.transpose(1, 2)))
    at_16k = MelToWave.from_vocos(vocos)(mel)
    torch.testing.assert_close(at_16k, AF.resample(at_24k, 24_000, 16_000))
    assert not any(p.requires_grad for p in vocos.parameters())  # from_vocos freezes the shared modules


def test_tiny_is_seeded_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, b, c = MelToWave.tiny(seed=1), MelToWave.tiny(seed=1), MelToWave.tiny(seed=2)
    assert torch.equal(torch.rand(3), expected)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_output_follows_input_dtype(m2w: MelToWave) -> None:
    wave = m2w.double()(torch.randn(1, 8, 100, dtype=torch.float64))
    assert wave.dtype == torch.float64
    m2w.float()
