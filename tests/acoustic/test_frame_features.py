"""The frame-feature interface both recognizer kinds offer the leak penalty (issue 40): a wav2vec2 conv layer
(5 ms) and a Whisper encoder's states (20 ms): shapes, hop and frame counts agree, gradients reach the wave."""

import pytest
import torch

from leakloss.acoustic import whisper_encoder as W
from leakloss.acoustic.whisper_recognizer import WhisperPhoneHead, WhisperRecognizer
from tests.acoustic.test_whisper_encoder import _write_fake_whisper

SR = 16_000


def fake_whisper_recognizer(folder, own_length: bool = True, d: int = 8, layers: int = 2) -> WhisperRecognizer:
    """A tiny random Whisper encoder (CTranslate2 layout) with a tiny random phone head: recognizer-w shaped."""
    frames = W.WhisperFrames.load(_write_fake_whisper(folder, d=d, layers=layers), own_length=own_length)
    vocab = {"<pad>": 0, "a": 1, "ʌ": 2, "k": 3}
    torch.manual_seed(0)
    head = WhisperPhoneHead(n_states=layers + 1, dim=d, vocab_size=len(vocab), hidden=8, lstm_layers=1)
    return WhisperRecognizer(frames, head, vocab, name="fakew@0")


@pytest.fixture(scope="module")
def real_w():
    from leakloss.acoustic.recognizer import Recognizer, RecognizerLoadError

    try:
        return Recognizer.load("w")
    except (RecognizerLoadError, FileNotFoundError) as err:
        pytest.skip(f"recognizer w not loadable here: {err}")


def _check_interface(rec, seconds=(1.0, 0.37), layer=None):
    lengths = torch.tensor([int(s * SR) for s in seconds])
    waves = torch.zeros(len(seconds), int(lengths.max()))
    for i, n in enumerate(lengths.tolist()):
        waves[i, :n] = torch.randn(n, generator=torch.Generator().manual_seed(i)) * 0.1
    waves.requires_grad_(True)
    feats, frames = rec.frame_features(waves, lengths, layer)
    assert feats.dtype == torch.float32 and feats.shape[:2] == (len(seconds), rec.frame_channels(layer))
    assert frames.tolist() == rec.frame_count(lengths, layer).tolist()
    assert [rec.frame_count(int(n), layer) for n in lengths] == frames.tolist()  # int and tensor agree
    assert feats.shape[-1] == int(frames.max())
    # hop x frames spans the audio: one frame per started hop (Whisper) or the conv stack's frames (wav2vec2)
    hop = rec.frame_hop_s(layer)
    for n, g in zip(lengths.tolist(), frames.tolist()):
        assert abs(g * hop - n / SR) <= rec.frame_min_samples(layer) / SR + hop
    feats[0, :, : int(frames[0])].sum().backward()
    assert torch.isfinite(waves.grad).all() and waves.grad[0].abs().sum() > 0
    assert waves.grad[1].abs().sum() == 0  # items do not reach each other
    assert not any(p.requires_grad for p in rec.parameters())
    return feats, frames


def test_wav2vec2_frames_are_conv_layer_4(tiny_rec):
    feats, _ = _check_interface(tiny_rec)
    assert tiny_rec.frame_source == "wav2vec2-conv" and tiny_rec.default_frame_layer == 4
    assert tiny_rec.frame_hop_s() == pytest.approx(0.005)
    ref, _ = tiny_rec.conv_features(torch.randn(1, 8000) * 0 + 0.1, 4)
    assert ref.shape[1] == tiny_rec.frame_channels() == 16
    assert tiny_rec.frame_context_s() == tiny_rec.frame_min_samples() / SR


def test_fake_whisper_frames_are_encoder_states(fake_w):
    feats, frames = _check_interface(fake_w)
    assert fake_w.frame_source == "whisper-states" and fake_w.frame_hop_s() == pytest.approx(0.02)
    assert frames.tolist() == [50, 19]  # one per started 20 ms
    assert fake_w.default_frame_layer == 2 and fake_w.frame_channels() == 8
    _check_interface(fake_w, layer=1)
    with pytest.raises(ValueError, match="out of range"):
        fake_w.frame_features(torch.zeros(1, 800), layer=3)


def test_whisper_frames_are_heard_at_one_level(fake_w):
    """normalize=True centres and scales each item; normalize=False takes it already at unit RMS (the penalty):
    the two agree, and a louder copy or a DC offset gives the same features."""
    x = torch.randn(1, 8000, generator=torch.Generator().manual_seed(3)) * 0.1
    a, _ = fake_w.frame_features(x)
    b, _ = fake_w.frame_features(x * 7 + 0.2)
    unit = (x - x.mean()) / (x - x.mean()).pow(2).mean().sqrt()
    c, _ = fake_w.frame_features(unit, normalize=False)
    torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(a, c, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_recognizer_w_offers_frames_with_gradient(real_w):
    feats, frames = _check_interface(real_w, seconds=(1.0, 0.5))
    assert frames.tolist() == [50, 25] and feats.shape[1] == 384
    assert real_w.frame_context_s() > 0.2  # a crop keeps a margin: attention is global
