"""Tests for leakloss.audio: every documented behaviour of loading, checking and saving."""

from __future__ import annotations

import base64
import io
import json
import math
import os
import stat

import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio.functional as AF

from leakloss.audio import (
    CLIP_LEVEL,
    MIN_DURATION_S,
    SAMPLE_RATE,
    SILENCE_DBFS,
    AudioError,
    AudioInfo,
    audio_to_wav_bytes,
    load_audio,
    prepare_waveform,
    save_audio,
)


def tone(seconds: float = 0.5, rate: int = SAMPLE_RATE, freq: float = 440.0, amp: float = 0.5) -> np.ndarray:
    """Float64 sine ``[t]``."""
    t = np.arange(int(round(seconds * rate))) / rate
    return amp * np.sin(2 * np.pi * freq * t)


# --- formats -------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "fmt, subtype, step",
    [
        ("WAV", "PCM_16", 2.0**-15),
        ("WAV", "PCM_24", 2.0**-23),
        ("WAV", "PCM_32", 2.0**-31),
        ("WAV", "FLOAT", 1e-7),
        ("FLAC", "PCM_16", 2.0**-15),
        ("FLAC", "PCM_24", 2.0**-23),
    ],
)
def test_formats_load_to_same_waveform_within_quantisation(tmp_path, fmt, subtype, step):
    ref = tone()
    path = tmp_path / f"x.{fmt.lower()}"
    sf.write(path, ref, SAMPLE_RATE, format=fmt, subtype=subtype)
    wave, info = load_audio(path)
    assert wave.dtype == torch.float32 and wave.dim() == 1 and wave.shape[0] == ref.shape[0]
    # Within one quantisation step: libsndfile writes with scale 2**(b-1)-1 but reads with
    # 2**(b-1), which adds up to half a step on top of rounding; float32 adds ~6e-8.
    err = np.abs(wave.numpy().astype(np.float64) - ref).max()
    assert err <= step + 1e-7, err
    assert info == AudioInfo(str(path), SAMPLE_RATE, 1, 0.5, 0.0, False, False)


def test_int16_and_float_files_agree(tmp_path):
    ref = tone()
    sf.write(tmp_path / "a.wav", ref, SAMPLE_RATE, subtype="PCM_16")
    sf.write(tmp_path / "b.wav", ref, SAMPLE_RATE, subtype="FLOAT")
    a, _ = load_audio(tmp_path / "a.wav")
    b, _ = load_audio(tmp_path / "b.wav")
    assert torch.allclose(a, b, rtol=0.0, atol=2.0**-15)  # one 16-bit step


# --- resampling and downmixing ---------------------------------------------------------------

def test_wrong_rate_is_resampled(tmp_path):
    ref = tone(rate=22_050)
    sf.write(tmp_path / "x.wav", ref, 22_050, subtype="FLOAT")
    wave, info = load_audio(tmp_path / "x.wav")
    assert info.resampled and info.original_rate == 22_050
    assert wave.shape[0] == math.ceil(ref.shape[0] * SAMPLE_RATE / 22_050)
    expected = AF.resample(torch.from_numpy(ref.astype(np.float32)), 22_050, SAMPLE_RATE)
    assert torch.allclose(wave, expected, atol=1e-6)
    # A 440 Hz tone stays a 440 Hz tone: compare with the tone synthesised at 16 kHz away from edges.
    direct = tone(rate=SAMPLE_RATE)[: wave.shape[0]]
    assert np.abs(wave.numpy()[800:-800] - direct[800:-800]).max() < 1e-2


STANDARD_RATES = (8_000, 11_025, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000, 88_200, 96_000, 192_000)


@pytest.mark.parametrize("rate", STANDARD_RATES)
def test_standard_rates_resample_exactly_as_torchaudio(tmp_path, rate):
    x = 0.1 * np.random.default_rng(rate).standard_normal(rate // 5).astype(np.float32)
    sf.write(tmp_path / "x.wav", x, rate, subtype="FLOAT")
    wave, info = load_audio(tmp_path / "x.wav")
    expected = AF.resample(torch.from_numpy(x), rate, SAMPLE_RATE)
    assert torch.equal(wave, expected) and info.resampled == (rate != SAMPLE_RATE)


def _no_huge_torchaudio_kernel(monkeypatch):
    """Make leakloss.audio's torchaudio resample fail fast (no allocation) where its kernel would be huge."""
    from leakloss import audio

    real = audio.AF.resample

    def guarded(wave, orig, new, *args, **kwargs):
        g = math.gcd(int(orig), int(new))
        if (new // g) * (orig // g) > 10_000_000:
            raise AssertionError(f"torchaudio would build a {new // g} x {orig // g} kernel for {orig} -> {new} Hz")
        return real(wave, orig, new, *args, **kwargs)

    monkeypatch.setattr(audio, "AF", type("AF", (), {"resample": staticmethod(guarded)}))


@pytest.mark.parametrize("rate", [8_001, 96_001, 44_056, 16_001])
def test_odd_rates_load_fast_with_bounded_memory(tmp_path, monkeypatch, rate):
    # 96001 Hz made torchaudio try a 6 GB kernel (RuntimeError traceback), 8001 Hz took 8 s and 2.8 GB
    _no_huge_torchaudio_kernel(monkeypatch)
    sf.write(tmp_path / "x.wav", tone(seconds=1.0, rate=rate, freq=440.0), rate, subtype="FLOAT")
    wave, info = load_audio(tmp_path / "x.wav")
    assert info.resampled and info.original_rate == rate and info.sample_rate == SAMPLE_RATE
    assert wave.dtype == torch.float32 and wave.shape[0] == math.ceil(rate * SAMPLE_RATE / rate)
    # band-limited interpolation: the 440 Hz tone is the 440 Hz tone sampled at 16 kHz, away from the edges
    direct = tone(seconds=1.0, rate=SAMPLE_RATE, freq=440.0)
    assert np.abs(wave.numpy()[800:-800] - direct[800:-800]).max() < 1e-3


def test_odd_rate_in_memory_and_odd_target_rate(monkeypatch):
    _no_huge_torchaudio_kernel(monkeypatch)
    x = torch.from_numpy(np.stack([tone(rate=8_001), tone(rate=8_001)]).astype(np.float32))
    wave, info = prepare_waveform(x, 8_001)
    assert info.resampled and info.downmixed and wave.shape[0] == math.ceil(x.shape[1] * SAMPLE_RATE / 8_001)
    up, _ = prepare_waveform(tone(), SAMPLE_RATE, sample_rate=44_101)  # an odd target rate too
    assert up.shape[0] == math.ceil(8_000 * 44_101 / SAMPLE_RATE)
    direct = tone(rate=44_101)
    assert np.abs(up.numpy()[2000:direct.shape[0] - 2000] - direct[2000:-2000]).max() < 1e-3


def test_bounded_resampler_is_torchaudios_filter():
    # the path for odd rates computes torchaudio's own kernel: same output (float64) on rates both can do
    from leakloss.audio import MAX_POLYPHASE_TAPS, _polyphase_taps, _sinc_resample

    x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, 3001)))
    for orig, new in [(44_100, 16_000), (11_025, 16_000), (8_000, 16_000), (16_000, 22_050), (48_000, 24_000)]:
        torch.testing.assert_close(_sinc_resample(x, orig, new), AF.resample(x, orig, new), atol=1e-10, rtol=0)
    assert _sinc_resample(x.float(), 44_100, 16_000).dtype == torch.float32
    assert all(_polyphase_taps(r, SAMPLE_RATE) <= MAX_POLYPHASE_TAPS for r in STANDARD_RATES)
    assert all(_polyphase_taps(r, SAMPLE_RATE) > MAX_POLYPHASE_TAPS for r in (8_001, 96_001, 44_056))


def test_other_target_rate(tmp_path):
    sf.write(tmp_path / "x.wav", tone(), SAMPLE_RATE)
    wave, info = load_audio(tmp_path / "x.wav", sample_rate=24_000)
    assert info.resampled and wave.shape[0] == 12_000


def test_stereo_is_downmixed_by_mean(tmp_path):
    left, right = tone(freq=440.0), tone(freq=660.0, amp=0.25)
    sf.write(tmp_path / "x.wav", np.stack([left, right], axis=1), SAMPLE_RATE, subtype="FLOAT")
    wave, info = load_audio(tmp_path / "x.wav")
    assert info.downmixed and info.channels == 2 and not info.resampled
    assert np.allclose(wave.numpy(), (left + right) / 2, atol=1e-6)


def test_multichannel_in_memory_channels_first():
    x = torch.from_numpy(np.stack([tone(), -tone() * 0.5, tone() * 0.25]).astype(np.float32))
    wave, info = prepare_waveform(x, SAMPLE_RATE)
    assert info.channels == 3 and info.downmixed and info.path is None
    assert torch.allclose(wave, x.mean(dim=0))


def test_time_major_array_is_rejected_not_misread():
    x = np.stack([tone(), tone()], axis=1)  # [t, 2]
    with pytest.raises(AudioError, match=r"channels first"):
        prepare_waveform(x, SAMPLE_RATE)


def test_in_memory_int16_scaled_like_soundfile(tmp_path):
    pcm = (tone() * 32767).astype(np.int16)
    wave, _ = prepare_waveform(pcm, SAMPLE_RATE)
    sf.write(tmp_path / "x.wav", pcm, SAMPLE_RATE, subtype="PCM_16")
    from_file, _ = load_audio(tmp_path / "x.wav")
    assert torch.equal(wave, from_file)


def test_big_endian_and_float64_arrays():
    x = tone()
    a, _ = prepare_waveform(x.astype(">f4"), SAMPLE_RATE)
    b, _ = prepare_waveform(x, SAMPLE_RATE)
    assert a.dtype == b.dtype == torch.float32
    assert torch.equal(a, torch.from_numpy(x.astype(np.float32)))
    assert torch.allclose(a, b)


def test_bad_types_and_rates():
    with pytest.raises(AudioError, match="sample type"):
        prepare_waveform(np.zeros(1000, dtype=np.uint8), SAMPLE_RATE)
    with pytest.raises(AudioError, match="Tensor or numpy"):
        prepare_waveform([0.1] * 1000, SAMPLE_RATE)  # type: ignore[arg-type]
    with pytest.raises(AudioError, match="positive integer"):
        prepare_waveform(tone(), 0)
    with pytest.raises(AudioError, match="positive integer"):
        prepare_waveform(tone(), 16000.0)  # type: ignore[arg-type]
    with pytest.raises(AudioError, match=r"\[time\] or \[channels, time\]"):
        prepare_waveform(np.zeros((1, 2, 3000)), SAMPLE_RATE)
    with pytest.raises(AudioError, match="at least 8000 Hz"):
        prepare_waveform(tone(rate=4_000), 4_000)  # too little band left to hear a vowel in
    assert prepare_waveform(tone(rate=8_000), 8_000)[1].resampled  # telephone speech still loads
    with pytest.raises(AudioError, match="float32 range"):
        prepare_waveform(tone() * 1e300, SAMPLE_RATE)  # finite as float64, Inf as float32


# --- rejected audio ---------------------------------------------------------------------------

def test_zero_byte_file_is_empty(tmp_path):
    (tmp_path / "x.wav").write_bytes(b"")
    with pytest.raises(AudioError, match=r"x\.wav.* is empty"):
        load_audio(tmp_path / "x.wav")


def test_zero_sample_file_is_empty(tmp_path):
    sf.write(tmp_path / "x.wav", np.zeros(0), SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"x\.wav.* is empty"):
        load_audio(tmp_path / "x.wav")


def test_zero_sample_tensor_is_empty():
    with pytest.raises(AudioError, match=r"^audio is empty"):
        prepare_waveform(torch.zeros(0), SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"is empty"):
        prepare_waveform(torch.zeros(2, 0), SAMPLE_RATE)


def test_too_short(tmp_path):
    n = int(MIN_DURATION_S * 8_000) - 1  # just under 50 ms at 8 kHz
    sf.write(tmp_path / "x.wav", tone(rate=8_000)[:n], 8_000)
    with pytest.raises(AudioError, match=r"x\.wav.* too short"):
        load_audio(tmp_path / "x.wav")
    # exactly 50 ms is accepted
    wave, info = prepare_waveform(tone(rate=8_000)[: n + 1], 8_000)
    assert info.duration_s == pytest.approx(MIN_DURATION_S)


def _sparse_wav(path, seconds: float, rate: int = 8_000) -> None:
    """A 16-bit mono WAV of ``seconds`` of silence whose samples are a hole in the file (no disk, no writing)."""
    import struct

    n_bytes = int(seconds * rate) * 2
    fmt = struct.pack("<HHIIHH", 1, 1, rate, 2 * rate, 2, 16)
    with open(path, "wb") as fh:
        fh.write(b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + n_bytes) + b"WAVE")
        fh.write(b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", n_bytes))
        fh.truncate(fh.tell() + n_bytes)


def test_hours_long_file_is_refused_from_its_header_before_any_sample_is_read(tmp_path, monkeypatch):
    # a multi-hour file was read whole into memory (2 h of 48 kHz stereo: 2.8 GB as float32)
    _sparse_wav(tmp_path / "long.wav", 2 * 3600)

    def no_read(self, *args, **kwargs):
        raise AssertionError("the samples were read")

    monkeypatch.setattr(sf.SoundFile, "read", no_read)
    with pytest.raises(AudioError, match=r"long\.wav' is too long: 7200\.0 s, the limit is 600 s .*max_duration_s="):
        load_audio(tmp_path / "long.wav")


def test_duration_limit_is_a_parameter(tmp_path):
    from leakloss.audio import MAX_DURATION_S

    assert MAX_DURATION_S >= 600  # generous for any TTS reading
    sf.write(tmp_path / "x.wav", tone(2.0), SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"too long: 2\.0 s, the limit is 1\.5 s"):
        load_audio(tmp_path / "x.wav", max_duration_s=1.5)
    assert load_audio(tmp_path / "x.wav", max_duration_s=2.0)[1].duration_s == pytest.approx(2.0)  # the limit is in
    _sparse_wav(tmp_path / "long.wav", 11 * 60)
    with pytest.raises(AudioError, match="too long"):
        load_audio(tmp_path / "long.wav")
    with pytest.raises(AudioError, match="is silent"):  # read (and judged) when the caller lifts the limit
        load_audio(tmp_path / "long.wav", max_duration_s=None)
    for bad in (0, -1.0, float("nan"), True, "600"):
        with pytest.raises(AudioError, match="max_duration_s must be"):
            load_audio(tmp_path / "x.wav", max_duration_s=bad)


def test_silent(tmp_path):
    sf.write(tmp_path / "zeros.wav", np.zeros(8000), SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"zeros\.wav.* is silent"):
        load_audio(tmp_path / "zeros.wav")
    quiet = tone(amp=10 ** ((SILENCE_DBFS - 1) / 20))  # peak -61 dBFS
    with pytest.raises(AudioError, match=r"is silent: peak level -61\.0 dBFS"):
        prepare_waveform(quiet, SAMPLE_RATE)
    audible = tone(amp=10 ** ((SILENCE_DBFS + 1) / 20))  # peak -59 dBFS
    prepare_waveform(audible, SAMPLE_RATE)


def test_opposite_phase_channels_are_said_to_cancel_not_to_be_silent(tmp_path):
    x = np.stack([tone(), -tone()])  # opposite phase cancels in the mono mix that gets scored
    with pytest.raises(AudioError, match=r"has 2 channels that cancel when mixed to mono \(out of phase\).*give one channel"):
        prepare_waveform(x, SAMPLE_RATE)
    sf.write(tmp_path / "phase.wav", x.T, SAMPLE_RATE)
    with pytest.raises(AudioError, match=r"phase\.wav. has 2 channels that cancel"):
        load_audio(tmp_path / "phase.wav")
    quiet = tone(amp=10 ** ((SILENCE_DBFS - 1) / 20))
    with pytest.raises(AudioError, match=r"is silent: peak level -61\.0 dBFS"):  # silent channels stay "silent"
        prepare_waveform(np.stack([quiet, quiet]), SAMPLE_RATE)


def test_nan_and_inf_counted(tmp_path):
    x = tone().astype(np.float32)
    x[[10, 20, 30]] = np.nan
    x[40] = np.inf
    sf.write(tmp_path / "x.wav", x, SAMPLE_RATE, subtype="FLOAT")
    with pytest.raises(AudioError, match=r"x\.wav.* contains 4 NaN or Inf samples"):
        load_audio(tmp_path / "x.wav")
    with pytest.raises(AudioError, match=r"contains 1 NaN"):
        prepare_waveform(torch.tensor([0.5] * 999 + [float("-inf")]), SAMPLE_RATE)


def test_float64_file_beyond_float32_range_is_named_so(tmp_path):
    # read as float32, 1e300 became Inf and was reported as "contains 8000 NaN or Inf samples"
    x = tone() * 1e300
    sf.write(tmp_path / "x.wav", x, SAMPLE_RATE, subtype="DOUBLE")
    with pytest.raises(AudioError, match=r"x\.wav' has samples beyond the float32 range \(peak 5e\+299\)") as err:
        load_audio(tmp_path / "x.wav")
    assert "NaN" not in str(err.value)
    sf.write(tmp_path / "r.wav", tone(rate=22_050) * 1e300, 22_050, subtype="DOUBLE")  # resampled too
    with pytest.raises(AudioError, match="float32 range"):
        load_audio(tmp_path / "r.wav")
    y = tone()
    y[5] = np.inf  # a real Inf in a float64 file is still counted as one
    sf.write(tmp_path / "i.wav", y, SAMPLE_RATE, subtype="DOUBLE")
    with pytest.raises(AudioError, match="contains 1 NaN or Inf samples"):
        load_audio(tmp_path / "i.wav")
    sf.write(tmp_path / "ok.wav", tone(), SAMPLE_RATE, subtype="DOUBLE")  # ordinary float64 audio loads as float32
    wave, _ = load_audio(tmp_path / "ok.wav")
    assert wave.dtype == torch.float32 and torch.equal(wave, torch.from_numpy(tone().astype(np.float32)))


def test_clipped_is_loaded_and_reported(tmp_path):
    x = tone(amp=0.5)
    n_clip = 8  # 8 of 8000 = exactly 0.1 %
    x[100 : 100 + n_clip] = 1.0
    sf.write(tmp_path / "x.wav", x, SAMPLE_RATE, subtype="FLOAT")
    wave, info = load_audio(tmp_path / "x.wav")
    assert wave.shape[0] == x.shape[0]
    assert info.clipped_fraction == pytest.approx(n_clip / x.shape[0])
    assert info.is_clipped
    x[100] = CLIP_LEVEL - 1e-3  # one fewer clipped sample: below the reporting threshold
    _, info = prepare_waveform(x, SAMPLE_RATE)
    assert info.clipped_fraction == pytest.approx((n_clip - 1) / x.shape[0]) and not info.is_clipped


def test_clipped_fraction_counts_all_channels():
    x = np.stack([tone(), tone()])
    x[0, :80] = -1.0  # 80 of 16000 channel samples
    _, info = prepare_waveform(x, SAMPLE_RATE)
    assert info.clipped_fraction == pytest.approx(80 / 16000)


def test_missing_file(tmp_path):
    with pytest.raises(AudioError, match=r"nope\.wav.* does not exist"):
        load_audio(tmp_path / "nope.wav")


def test_folder_is_not_audio(tmp_path):
    with pytest.raises(AudioError, match="is a folder"):
        load_audio(tmp_path)


@pytest.mark.parametrize("content", [b"hello, this is a text file\n", bytes(range(256)) * 8])
def test_non_audio_file(tmp_path, content):
    (tmp_path / "x.wav").write_bytes(content)
    with pytest.raises(AudioError, match=r"x\.wav.* could not be read") as err:
        load_audio(tmp_path / "x.wav")
    assert isinstance(err.value.__cause__, sf.SoundFileError)  # cause chained, not leaked as-is
    assert not isinstance(err.value, RuntimeError)


def test_truncated_file(tmp_path):
    buf = io.BytesIO()
    sf.write(buf, tone(), SAMPLE_RATE, format="FLAC")
    (tmp_path / "x.flac").write_bytes(buf.getvalue()[:30])
    with pytest.raises(AudioError, match=r"x\.flac"):
        load_audio(tmp_path / "x.flac")


def test_audio_error_is_value_error():
    assert issubclass(AudioError, ValueError)


# --- saving -------------------------------------------------------------------------------------

def test_save_round_trip_is_exact_on_16bit_grid(tmp_path):
    wave, _ = prepare_waveform(tone().astype(np.float32), SAMPLE_RATE)
    wave = torch.round(wave * 32768) / 32768  # already on the 16-bit grid
    save_audio(tmp_path / "x.wav", wave)
    back, info = load_audio(tmp_path / "x.wav")
    assert torch.equal(back, wave)
    meta = sf.info(str(tmp_path / "x.wav"))
    assert (meta.format, meta.subtype, meta.samplerate, meta.channels) == ("WAV", "PCM_16", SAMPLE_RATE, 1)


def test_save_quantises_and_clips(tmp_path):
    wave = torch.tensor([0.1234567, 1.5, -2.0, 0.0] * 400)
    save_audio(tmp_path / "x.wav", wave, 8_000)
    data, rate = sf.read(str(tmp_path / "x.wav"), dtype="int16")
    assert rate == 8_000
    assert data[:4].tolist() == [round(0.1234567 * 32768), 32767, -32768, 0]


def test_save_float_keeps_samples_bit_for_bit(tmp_path):
    """FLOAT: what a synthesis cache writes reads back exactly, beyond [-1, 1] included (no clipping)."""
    wave = torch.tensor([0.1234567, 1.5, -2.0, 1e-9] * 400, dtype=torch.float32)
    save_audio(tmp_path / "x.wav", wave, subtype="FLOAT")
    data, rate = sf.read(str(tmp_path / "x.wav"), dtype="float32")
    assert rate == SAMPLE_RATE and sf.info(str(tmp_path / "x.wav")).subtype == "FLOAT"
    assert torch.equal(torch.from_numpy(data), wave)


def test_save_refuses_an_unknown_subtype(tmp_path):
    with pytest.raises(AudioError, match="subtype must be one of PCM_16, FLOAT"):
        save_audio(tmp_path / "x.wav", torch.zeros(100), subtype="PCM_24")  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_save_is_atomic_and_leaves_nothing_on_error(tmp_path, monkeypatch):
    target = tmp_path / "x.wav"
    save_audio(target, torch.from_numpy(tone().astype(np.float32)))
    before = target.read_bytes()

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(sf, "write", boom)
    with pytest.raises(AudioError, match="disk full"):
        save_audio(target, torch.zeros(1000))
    assert target.read_bytes() == before  # old file untouched
    assert sorted(os.listdir(tmp_path)) == ["x.wav"]  # no temp file left


def test_save_bad_input_creates_nothing(tmp_path):
    with pytest.raises(AudioError, match="NaN"):
        save_audio(tmp_path / "x.wav", torch.tensor([0.0, float("nan")]))
    with pytest.raises(AudioError, match=r"\.wav"):
        save_audio(tmp_path / "x.flac", torch.zeros(100))
    with pytest.raises(AudioError, match="does not exist"):
        save_audio(tmp_path / "missing" / "x.wav", torch.zeros(100))
    with pytest.raises(AudioError, match="non-empty"):
        save_audio(tmp_path / "x.wav", torch.zeros(0))
    assert os.listdir(tmp_path) == []


def test_saved_file_has_normal_permissions(tmp_path):
    save_audio(tmp_path / "x.wav", torch.zeros(100))
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(os.stat(tmp_path / "x.wav").st_mode) == 0o666 & ~mask


def test_save_multichannel(tmp_path):
    x = torch.from_numpy(np.stack([tone(), tone() * 0.5]).astype(np.float32))
    save_audio(tmp_path / "x.wav", x)
    data, _ = sf.read(str(tmp_path / "x.wav"), always_2d=True)
    assert data.shape == (x.shape[1], 2)
    assert np.allclose(data.T, x.numpy(), atol=2.0**-15)


def test_save_dtypes(tmp_path):
    save_audio(tmp_path / "a.wav", torch.full((800,), 0.5, dtype=torch.bfloat16))
    assert sf.read(str(tmp_path / "a.wav"), dtype="int16")[0][0] == 16384
    with pytest.raises(AudioError, match="float samples"):
        save_audio(tmp_path / "b.wav", torch.zeros(800, dtype=torch.int16))
    with pytest.raises(AudioError, match="float samples"):
        audio_to_wav_bytes(np.zeros(800, dtype=np.int32))  # type: ignore[arg-type]
    assert not (tmp_path / "b.wav").exists()


def test_wav_bytes_decode_back():
    wave = torch.from_numpy(tone().astype(np.float32))
    blob = audio_to_wav_bytes(wave, SAMPLE_RATE)
    assert blob[:4] == b"RIFF" and blob[8:12] == b"WAVE"
    data, rate = sf.read(io.BytesIO(base64.b64decode(base64.b64encode(blob))), dtype="float32")
    assert rate == SAMPLE_RATE
    assert np.abs(data - wave.numpy()).max() <= 2.0**-16 + 1e-7
    assert len(blob) == 44 + 2 * wave.shape[0]  # plain 16-bit PCM, no extra chunks


# --- truncated WAV files (issue 14, defect 11) ---------------------------------------------------------

def _wav_bytes(x: np.ndarray, subtype: str = "PCM_16") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, SAMPLE_RATE, format="WAV", subtype=subtype)
    return buf.getvalue()


@pytest.mark.parametrize("subtype", ["PCM_16", "PCM_24", "FLOAT"])
def test_truncated_wav_is_detected(tmp_path, subtype):
    data = _wav_bytes(tone(1.0), subtype)
    (tmp_path / "x.wav").write_bytes(data[: 44 + (len(data) - 44) // 2])  # header still declares all the data
    with pytest.raises(AudioError, match=r"x\.wav.* is truncated.*declares \d+ bytes.*holds only \d+"):
        load_audio(tmp_path / "x.wav")


def test_wav_cut_inside_the_header_is_an_error(tmp_path):
    (tmp_path / "x.wav").write_bytes(_wav_bytes(tone())[:40])
    with pytest.raises(AudioError, match=r"x\.wav"):
        load_audio(tmp_path / "x.wav")


def test_complete_wavs_with_extra_chunks_and_odd_sizes_still_load(tmp_path):
    import struct

    x = tone(0.5)
    data = _wav_bytes(x)
    # a LIST chunk after the data chunk (as many editors write) and a matching RIFF size
    extra = b"LIST" + struct.pack("<I", 5) + b"INFOx" + b"\x00"  # odd size: one pad byte
    body = data[8:] + extra
    (tmp_path / "x.wav").write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    wave, _ = load_audio(tmp_path / "x.wav")
    assert wave.shape[0] == x.shape[0]
    # 8-bit mono with an odd number of data bytes and its pad byte
    sf.write(tmp_path / "odd.wav", tone(0.0505), SAMPLE_RATE, subtype="PCM_U8")
    assert (tmp_path / "odd.wav").stat().st_size % 2 == 0
    assert load_audio(tmp_path / "odd.wav")[0].shape[0] == round(0.0505 * SAMPLE_RATE)


def test_streamed_wav_with_unknown_data_size_loads(tmp_path):
    import struct

    data = bytearray(_wav_bytes(tone(0.5)))
    pos = data.index(b"data")
    data[pos + 4: pos + 8] = struct.pack("<I", 0xFFFFFFFF)  # a pipe writer could not seek back to fill it in
    data[4:8] = struct.pack("<I", 0xFFFFFFFF)
    (tmp_path / "x.wav").write_bytes(bytes(data))
    assert load_audio(tmp_path / "x.wav")[0].shape[0] == 8000


def test_flac_cut_in_the_middle_is_an_error(tmp_path):
    buf = io.BytesIO()
    sf.write(buf, tone(2.0), SAMPLE_RATE, format="FLAC")
    data = buf.getvalue()
    (tmp_path / "x.flac").write_bytes(data[: len(data) // 2])
    with pytest.raises(AudioError, match=r"x\.flac"):
        load_audio(tmp_path / "x.flac")


def test_fewer_frames_than_declared_is_truncated(tmp_path, monkeypatch):
    """Any format: if the decoder returns fewer frames than the file declares, the file is cut short."""
    sf.write(tmp_path / "x.flac", tone(1.0), SAMPLE_RATE, format="FLAC")
    real_read = sf.SoundFile.read

    def short_read(self, *args, **kwargs):
        return real_read(self, *args, **kwargs)[:8000]

    monkeypatch.setattr(sf.SoundFile, "read", short_read)
    with pytest.raises(AudioError, match=r"truncated.*8000 of 16000 frames"):
        load_audio(tmp_path / "x.flac")


# --- what was found and done, for the result (issue 14, defect 10) -----------------------------------

def test_audio_info_warnings_and_json(tmp_path):
    x = np.clip(tone(1.0, rate=22_050, amp=2.0), -1.0, 1.0)
    stereo = np.stack([x, 0.5 * x], axis=1)
    sf.write(tmp_path / "x.wav", stereo, 22_050, subtype="FLOAT")
    _, info = load_audio(tmp_path / "x.wav")
    frac = float((np.abs(stereo) >= CLIP_LEVEL).mean())
    assert 0.2 < frac < 0.5 and info.clipped_fraction == pytest.approx(frac)
    d = info.as_dict()
    assert d == {"original_rate": 22_050, "sample_rate": SAMPLE_RATE, "channels": 2, "duration_s": 1.0,
                 "resampled": True, "downmixed": True, "clipped_fraction": round(frac, 4),
                 "warnings": info.warnings}
    assert len(info.warnings) == 3
    assert f"{100 * frac:.1f}% of samples clipped" in info.warnings[0]
    assert "resampled from 22050 Hz to 16000 Hz" in info.warnings[1]
    assert "downmixed 2 channels to mono" in info.warnings[2]
    json.dumps(d)  # plain JSON types only


def test_clean_audio_has_no_warnings():
    _, info = prepare_waveform(tone(), SAMPLE_RATE)
    assert info.warnings == [] and info.as_dict()["warnings"] == []
    x = tone()
    x[:7] = 1.0  # 7 of 8000 samples: below the reporting threshold
    assert prepare_waveform(x, SAMPLE_RATE)[1].warnings == []


def test_wav_even_one_byte_short_is_truncated(tmp_path):
    import struct

    data = _wav_bytes(tone(0.5))
    pos = data.index(b"data")
    declared = struct.unpack("<I", data[pos + 4: pos + 8])[0]
    (tmp_path / "a.wav").write_bytes(data[:-1])  # soundfile would quietly drop the last, partial sample
    with pytest.raises(AudioError, match=f"declares {declared} bytes.*holds only {declared - 1}"):
        load_audio(tmp_path / "a.wav")


@pytest.mark.parametrize("fmt, subtype", [("OGG", "VORBIS"), ("MP3", "MPEG_LAYER_III")])
def test_compressed_streams_whose_truncation_cannot_be_seen_are_refused(tmp_path, fmt, subtype):
    """Half an OGG file was read as a shorter clip (9 of 36 phones) and scored."""
    path = tmp_path / f"x.{fmt.lower()}"
    try:
        sf.write(path, tone(), SAMPLE_RATE, format=fmt, subtype=subtype)
    except (sf.LibsndfileError, TypeError, ValueError) as err:  # a libsndfile built without the codec
        pytest.skip(f"libsndfile cannot write {fmt}: {err}")
    with pytest.raises(AudioError, match=r"only WAV, FLAC or AIFF audio is read .* convert it"):
        load_audio(path)


@pytest.mark.parametrize("fmt", ["RF64", "W64", "AU", "NIST", "IRCAM", "VOC", "MAT5"])
def test_formats_whose_truncation_libsndfile_hides_are_refused(tmp_path, fmt):
    """Half an RF64 (or W64, AU, NIST...) file loaded as a 0.5 s clip: libsndfile shrinks its frame count."""
    path = tmp_path / f"x.{fmt.lower()}"
    sf.write(path, tone(1.0), SAMPLE_RATE, format=fmt, subtype="PCM_16")
    with pytest.raises(AudioError, match=r"only WAV, FLAC or AIFF audio is read"):
        load_audio(path)


@pytest.mark.parametrize("subtype", ["ULAW", "ALAW"])
def test_clipping_is_seen_in_companded_wavs(tmp_path, subtype):
    """mu-law full scale reads back as 0.980, A-law as 0.984: 77% clipped was reported as 0."""
    x = np.clip(tone(1.0) * 20, -1.0, 1.0)
    sf.write(tmp_path / "x.wav", x, SAMPLE_RATE, subtype=subtype)
    info = load_audio(tmp_path / "x.wav")[1]
    assert info.is_clipped and info.clipped_fraction == pytest.approx(float((np.abs(x) >= 1.0).mean()), abs=0.02)


def test_a_float_tensor_far_beyond_full_scale_is_refused_as_the_file_is():
    """int16 values as a float tensor were scored "97.5% clipped"; the same samples in a file were refused."""
    from leakloss.audio import prepare_waveform

    with pytest.raises(AudioError, match=r"has samples far beyond full scale \(peak .*integer PCM"):
        prepare_waveform(torch.from_numpy((tone(amp=0.3) * 32767).astype(np.float32)), SAMPLE_RATE)


def test_truncated_aiff_is_detected(tmp_path):
    """libsndfile shrinks an AIFF's frame count to what the file holds: it was scored as a complete clip."""
    sf.write(tmp_path / "full.aiff", tone(1.0), SAMPLE_RATE, format="AIFF")
    data = (tmp_path / "full.aiff").read_bytes()
    (tmp_path / "cut.aiff").write_bytes(data[: int(len(data) * 0.8)])
    with pytest.raises(AudioError, match=r"cut\.aiff.* is truncated.*declares \d+ bytes.*holds only \d+"):
        load_audio(tmp_path / "cut.aiff")
    assert load_audio(tmp_path / "full.aiff")[1].duration_s == pytest.approx(1.0)


@pytest.mark.parametrize("fmt, subtype", [("WAV", "PCM_U8"), ("AIFF", "PCM_S8"), ("WAV", "PCM_16")])
def test_clipping_at_the_positive_rail_is_seen_in_every_bit_depth(tmp_path, fmt, subtype):
    """8-bit full scale reads back as 127/128 = 0.992, under CLIP_LEVEL: 14.8% clipped was reported as 0."""
    x = np.clip(tone(1.0) * 20, -0.9, 1.0)
    path = tmp_path / f"x.{fmt.lower()}"
    sf.write(path, x, SAMPLE_RATE, format=fmt, subtype=subtype)
    info = load_audio(path)[1]
    assert info.clipped_fraction == pytest.approx(float((x >= 1.0).mean()), abs=0.01) and info.is_clipped


def test_a_file_name_that_is_not_utf8_is_read(tmp_path):
    """soundfile was given str(path): 'q\\xff.wav' failed as "damaged or not audio"."""
    name = os.fsdecode(b"q\xff.wav")  # a surrogate-escaped name, as the OS gives it
    sf.write(tmp_path / "plain.wav", tone(1.0), SAMPLE_RATE)
    os.rename(tmp_path / "plain.wav", tmp_path / name)
    wave, info = load_audio(tmp_path / name)
    assert info.duration_s == pytest.approx(1.0) and wave.numel() == SAMPLE_RATE


@pytest.mark.parametrize("scale", [2.0, 8.0, 27_000 / 0.9, 1e6])
@pytest.mark.parametrize("subtype", ["FLOAT", "DOUBLE"])
def test_a_float_file_far_beyond_full_scale_is_refused_at_every_scale(tmp_path, scale, subtype):
    """int16 values stored as float (peak ~27,000, or 1e6) were called "85% clipped" and quarantined, at 2x and 8x
    the same clip was scored: nothing is clipped, the file is at the wrong scale (issue 43, defect 8)."""
    x = tone(amp=0.9) * scale
    sf.write(tmp_path / "x.wav", x, SAMPLE_RATE, subtype=subtype)
    with pytest.raises(AudioError, match=r"x\.wav' has samples far beyond full scale \(peak ") as err:
        load_audio(tmp_path / "x.wav")
    assert "clipped" not in str(err.value)
    assert ("integer PCM" in str(err.value)) == (scale > 1000)


def test_a_float_file_a_little_beyond_full_scale_loads_with_its_clipping_reported(tmp_path):
    from leakloss.audio import FLOAT_FULL_SCALE_LIMIT

    sf.write(tmp_path / "x.wav", tone(amp=FLOAT_FULL_SCALE_LIMIT - 0.01), SAMPLE_RATE, subtype="FLOAT")
    _, info = load_audio(tmp_path / "x.wav")
    assert info.is_clipped
    sf.write(tmp_path / "y.wav", tone(amp=FLOAT_FULL_SCALE_LIMIT + 0.01), SAMPLE_RATE, subtype="FLOAT")
    with pytest.raises(AudioError, match="far beyond full scale"):
        load_audio(tmp_path / "y.wav")


def test_save_audio_refuses_what_it_cannot_write_with_an_audio_error(tmp_path):
    # a float64 sample beyond float32 was written as inf (and the file then refused by load_audio); a rate of 2**31
    # was a bare OverflowError
    from leakloss.audio import save_audio

    x = tone(amp=0.5)
    x[2] = 1e39
    with pytest.raises(AudioError, match="beyond the float32 range"):
        save_audio(tmp_path / "x.wav", x, SAMPLE_RATE, subtype="FLOAT")
    with pytest.raises(AudioError, match="does not fit a WAV header"):
        save_audio(tmp_path / "y.wav", tone(amp=0.5), 2**31)
    assert not list(tmp_path.iterdir())
