"""Audio input and output: load, check, downmix, resample and save speech clips.

Every clip that enters leakloss goes through :func:`prepare_waveform` (directly, or via
:func:`load_audio`), so the same checks apply to files and to in-memory audio:

* wrong sample rate      -> resampled (``info.resampled``) by :func:`resample`: the standard rates (8000, 11025,
  22050, 24000, 32000, 44100, 48000, 88200, 96000, 192000 Hz...) with ``torchaudio.functional.resample``, any
  other rate (8001, 44056, 96001 Hz...) with the same windowed-sinc filter evaluated per output sample, so memory
  and time stay bounded whatever the rate; below 8 kHz (:data:`MIN_SAMPLE_RATE`, telephone speech) ->
  :class:`AudioError`: no speech band left
* more than one channel  -> downmixed by the mean over channels (``info.downmixed``)
* no samples / empty file -> :class:`AudioError` ``"... is empty"``
* shorter than 50 ms     -> :class:`AudioError` ``"... is too short"``
* a file longer than 10 minutes (:data:`MAX_DURATION_S`, ``max_duration_s=``) -> :class:`AudioError`
  ``"... is too long"``, from its header, before any sample is read
* NaN or Inf samples     -> :class:`AudioError` naming how many
* finite samples beyond the float32 range (``|x| > 3.4e38``, e.g. in a float64 WAV) -> :class:`AudioError`
  ``"... has samples beyond the float32 range"``
* peak below -60 dBFS    -> :class:`AudioError` ``"... is silent"`` (``"... channels that cancel when mixed to mono"``
  when the channels are not silent but their mean is: opposite-phase stereo)
* clipped samples        -> loaded and scored; the share of samples at ``|x| >= 0.999`` is
  reported in ``info.clipped_fraction`` and ``info.is_clipped`` is true from 0.1 % on
* float audio at the wrong scale (peak above :data:`FLOAT_FULL_SCALE_LIMIT`, e.g. int16 values stored as
  float), in a file or a tensor -> :class:`AudioError` ``"... has samples far beyond full scale"`` (nothing was
  clipped)
* a format other than WAV, AIFF or FLAC (:data:`READ_FORMATS`) -> :class:`AudioError`: cut short, they read as a
  shorter clip with no sign of it
* missing, unreadable, corrupt or non-audio file -> :class:`AudioError` (cause chained)
* truncated file (a WAV whose header declares more data than the file holds, or any file that
  decodes to fewer frames than it declares) -> :class:`AudioError` ``"... is truncated"``

What was found and done (clipping, resampling, downmixing) is kept in :class:`AudioInfo`;
``info.warnings`` says it in words and ``info.as_dict()`` is the ``audio`` block of a scorer result.

Files are read with ``soundfile`` (WAV int16/int24/int32/float, FLAC), never ``torchaudio.load``.
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass
from typing import Literal, get_args
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF
from torch import Tensor

from leakloss.atomic import write_bytes_atomic
from leakloss.constants import SAMPLE_RATE

__all__ = [
    "MIN_DURATION_S",
    "MAX_DURATION_S",
    "MIN_SAMPLE_RATE",
    "SILENCE_DBFS",
    "CLIP_LEVEL",
    "CLIP_REPORT_FRACTION",
    "AudioError",
    "AudioInfo",
    "load_audio",
    "prepare_waveform",
    "resample",
    "save_audio",
    "WavSubtype",
    "audio_to_wav_bytes",
]

MIN_DURATION_S = 0.05
#: Longest file :func:`load_audio` reads by default (seconds). A TTS reading is one sentence or a paragraph (seconds
#: to a minute); 10 minutes is ten times the longest, yet bounds memory (~38 MB of 16 kHz float32, ~230 MB read at
#: 48 kHz stereo) where a multi-hour file was read whole. Callers that mean longer pass ``max_duration_s``.
MAX_DURATION_S = 600.0
MIN_SAMPLE_RATE = 8_000  # telephone speech; below it the vowels' formants are gone, resampling cannot bring them back
SILENCE_DBFS = -60.0
CLIP_LEVEL = 0.999  # |x| at or above this counts as a clipped sample
CLIP_REPORT_FRACTION = 0.001  # clips with at least this share of clipped samples are reported
#: Peak above which a float file is refused as at the wrong scale: a float WAV holds [-1, 1], a little beyond after
#: processing; integer PCM values stored as float (peak ~27,000) were called "85% clipped" and quarantined.
FLOAT_FULL_SCALE_LIMIT = 1.5


# The resampling filter of torchaudio.functional.resample's defaults (Hann-windowed sinc), used by both paths.
_LOWPASS_WIDTH = 6  # zero crossings of the sinc each side
_ROLLOFF = 0.99  # cut-off as a share of the lower rate's Nyquist frequency
#: torchaudio's polyphase kernel has ``new/g * (orig/g + 2 * width)`` taps (g = gcd of the rates): a few hundred
#: thousand for the standard rates (11025 -> 16000 Hz, the largest, 291k), 128 million for 8001 Hz and 1.5 billion
#: (6 GB) for 96001 Hz. Up to this size the polyphase kernel is used; beyond it, :func:`_sinc_resample`.
MAX_POLYPHASE_TAPS = 1 << 20
_CHUNK_ELEMENTS = 1 << 22  # working set of one chunk of _sinc_resample (float64: 32 MiB)


class AudioError(ValueError):
    """Audio that cannot be used; the message names the file (if any) and the problem."""


@dataclass(frozen=True)
class AudioInfo:
    """What was found in, and done to, one clip.

    ``duration_s`` is measured at ``original_rate`` before resampling. ``clipped_fraction``
    is the share of all samples (all channels, before downmixing) with ``|x| >= CLIP_LEVEL``.
    """

    path: str | None
    original_rate: int
    channels: int
    duration_s: float
    clipped_fraction: float
    resampled: bool
    downmixed: bool
    sample_rate: int = SAMPLE_RATE  # the rate the clip was brought to

    @property
    def is_clipped(self) -> bool:
        """True when clipping is large enough to report (>= 0.1 % of samples)."""
        return self.clipped_fraction >= CLIP_REPORT_FRACTION

    @property
    def warnings(self) -> list[str]:
        """What a listener of the scores should know about this clip, in words (empty when clean)."""
        out = []
        if self.is_clipped:
            out.append(f"{100 * self.clipped_fraction:.1f}% of samples clipped (|x| >= {CLIP_LEVEL}): "
                       "distortion can change how vowels score")
        if self.resampled:
            out.append(f"resampled from {self.original_rate} Hz to {self.sample_rate} Hz")
        if self.downmixed:
            out.append(f"downmixed {self.channels} channels to mono (mean)")
        return out

    def as_dict(self) -> dict:
        """The ``audio`` block of a scorer result: plain JSON types only."""
        return {
            "original_rate": self.original_rate,
            "sample_rate": self.sample_rate,
            "channels": self.channels,
            "duration_s": round(self.duration_s, 4),
            "resampled": self.resampled,
            "downmixed": self.downmixed,
            "clipped_fraction": round(self.clipped_fraction, 4),
            "warnings": self.warnings,
        }


def _name(path: str | Path | None) -> str:
    """How a clip is named in error messages."""
    return f"audio file '{path}'" if path is not None else "audio"


def _check_rate(rate: object, what: str) -> int:
    # bool is an int subclass; True would silently mean 1 Hz.
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or rate <= 0:
        raise AudioError(f"{what} must be a positive integer number of Hz, got {rate!r}")
    return int(rate)


def _to_float_tensor(wave: Tensor | np.ndarray, name: str) -> Tensor:
    """Convert to a float tensor; integer PCM is scaled to [-1, 1) by its full range."""
    if isinstance(wave, np.ndarray):
        if wave.dtype == np.int16:
            return torch.from_numpy(wave.astype(np.float32) / 32768.0)
        if wave.dtype == np.int32:
            return torch.from_numpy((wave.astype(np.float64) / 2147483648.0).astype(np.float32))
        if not np.issubdtype(wave.dtype, np.floating):
            raise AudioError(f"{name} has unsupported sample type {wave.dtype}; use float, int16 or int32")
        # torch cannot wrap big-endian buffers; copy to native byte order when needed.
        return torch.from_numpy(np.ascontiguousarray(wave, dtype=wave.dtype.newbyteorder("=")))
    if isinstance(wave, Tensor):
        if wave.dtype == torch.int16:
            return wave.to(torch.float32) / 32768.0
        if wave.dtype == torch.int32:
            return (wave.to(torch.float64) / 2147483648.0).to(torch.float32)
        if not wave.is_floating_point():
            raise AudioError(f"{name} has unsupported sample type {wave.dtype}; use float, int16 or int32")
        return wave
    raise AudioError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(wave).__name__}")


def _polyphase_taps(orig: int, new: int) -> int:
    """Taps of the kernel ``torchaudio.functional.resample(x, orig, new)`` builds (see MAX_POLYPHASE_TAPS)."""
    g = math.gcd(orig, new)
    o, n = orig // g, new // g
    width = math.ceil(_LOWPASS_WIDTH * o / (min(o, n) * _ROLLOFF))
    return n * (o + 2 * width)


def resample(wave: Tensor, orig: int, new: int) -> Tensor:
    """Resample ``wave [..., t]`` (float) from ``orig`` to ``new`` Hz -> ``[..., ceil(t * new / orig)]``.

    Rates whose ratio is a fraction with a small denominator after reduction (every standard audio rate to or
    from 16 kHz: 8000, 11025, 22050, 24000, 32000, 44100, 48000, 88200, 96000, 192000 Hz) go through
    ``torchaudio.functional.resample`` exactly as before. For other ratios (8001 or 96001 Hz to 16 kHz) its
    polyphase kernel would need ``new/g * orig/g`` taps (gigabytes), so the same band-limited interpolation
    (Hann-windowed sinc, 6 zero crossings, roll-off 0.99: the same output up to float rounding) is evaluated
    directly at each output sample, in chunks: memory stays bounded (tens of MiB) and time is linear in the
    clip's length.
    """
    if orig == new:
        return wave
    if _polyphase_taps(orig, new) <= MAX_POLYPHASE_TAPS:
        return AF.resample(wave, orig, new)
    return _sinc_resample(wave, orig, new)


def _sinc_resample(wave: Tensor, orig: int, new: int) -> Tensor:
    """torchaudio's ``sinc_interp_hann`` resampling evaluated per output sample (any rates, bounded memory).

    Output ``j`` is ``sum_i x[i] * k(i / orig - j / new)`` over the input samples ``i`` within the filter's
    reach (zeros beyond the clip's ends, as torchaudio pads), with ``k`` torchaudio's kernel:
    ``t = cutoff * (i / orig - j / new)`` clamped to +-6, ``sinc(pi t) * cos(pi t / 12)^2 * cutoff / orig`` and
    ``cutoff = 0.99 * min(orig, new)``. Positions are exact integers (``i * new - j * orig``), weights float64.
    """
    shape, length = wave.shape[:-1], wave.shape[-1]
    x = wave.reshape(-1, length)
    n_out = -(-new * length // orig)  # ceil(new * length / orig), as torchaudio
    cutoff = min(orig, new) * _ROLLOFF
    reach = math.ceil(_LOWPASS_WIDTH * orig / cutoff)  # input samples each side with a non-zero weight
    taps = torch.arange(-reach, reach + 1, device=x.device)
    padded = torch.nn.functional.pad(x, (reach, reach))  # x[i] is padded[i + reach]
    step = max(1, _CHUNK_ELEMENTS // (taps.numel() * x.shape[0]))
    pieces = []
    for start in range(0, n_out, step):
        j = torch.arange(start, min(start + step, n_out), device=x.device)
        i = (j * orig // new)[:, None] + taps  # [c, taps]: input samples around output j's position
        t = (i * new - j[:, None] * orig).double() * (cutoff / (orig * new))
        t = t.clamp(-_LOWPASS_WIDTH, _LOWPASS_WIDTH)
        window = torch.cos(t * (math.pi / _LOWPASS_WIDTH / 2)) ** 2
        kernel = torch.sinc(t) * window * (cutoff / orig)  # torch.sinc(t) = sin(pi t) / (pi t)
        pieces.append((padded[:, i + reach].double() * kernel).sum(-1).to(x.dtype))
    out = torch.cat(pieces, dim=-1) if pieces else x.new_zeros(x.shape[0], 0)
    return out.reshape(*shape, n_out)


def prepare_waveform(
    wave: Tensor | np.ndarray,
    rate: int,
    sample_rate: int = SAMPLE_RATE,
    *,
    path: str | Path | None = None,
    clip_level: float = CLIP_LEVEL,
) -> tuple[Tensor, AudioInfo]:
    """Check in-memory audio and bring it to mono float32 at ``sample_rate``.

    ``clip_level``: ``|x|`` from which a sample counts as clipped (:func:`load_audio` lowers it for 8-bit files,
    whose positive full scale is 127/128).

    Args:
        wave: ``[t]`` mono or ``[c, t]`` channels-first audio; float in [-1, 1] (values beyond
            are kept and count as clipped), or int16/int32 PCM (scaled by full range).
        rate: sample rate of ``wave`` in Hz.
        sample_rate: target rate in Hz.
        path: file the audio came from, only used in messages and ``AudioInfo.path``.

    Returns:
        ``(mono, info)``: ``mono`` is a 1-D float32 tensor ``[t']`` with
        ``t' = ceil(t * sample_rate / rate)``, on the device of ``wave``. Any rate from
        :data:`MIN_SAMPLE_RATE` up is resampled, with bounded memory (see :func:`resample`).

    Raises:
        AudioError: bad shape or type, a rate below :data:`MIN_SAMPLE_RATE`, empty, NaN/Inf, too short,
            silent audio, or samples beyond the float32 range.
    """
    name = _name(path)
    rate = _check_rate(rate, f"sample rate of {name}")
    sample_rate = _check_rate(sample_rate, "target sample rate")
    if rate < MIN_SAMPLE_RATE:
        raise AudioError(f"{name} has a sample rate of {rate} Hz: speech needs at least {MIN_SAMPLE_RATE} Hz")
    x = _to_float_tensor(wave, name)

    if x.dim() not in (1, 2):
        raise AudioError(f"{name} must have shape [time] or [channels, time], got {tuple(x.shape)}")
    if x.numel() == 0:
        raise AudioError(f"{name} is empty (no samples)")
    if x.dim() == 1:
        x = x.unsqueeze(0)
    channels, frames = x.shape
    # A [time, channels] array is the usual mistake; more channels than samples is never real audio.
    if channels > frames:
        if path is not None:  # a file: soundfile's layout is known, so the clip is just too short to be speech
            raise AudioError(f"{name} has {frames} sample(s) in each of its {channels} channels: far too short to "
                             "be speech")
        raise AudioError(
            f"{name} has shape {tuple(x.shape)}, which looks like [time, channels]; "
            "pass channels first ([channels, time]), e.g. wave.T"
        )

    n_bad = int((~torch.isfinite(x)).sum())
    if n_bad:
        raise AudioError(f"{name} contains {n_bad} NaN or Inf samples out of {x.numel()}")

    duration_s = frames / rate
    if duration_s < MIN_DURATION_S:
        raise AudioError(
            f"{name} is too short: {duration_s * 1000:.1f} ms, "
            f"need at least {MIN_DURATION_S * 1000:.0f} ms"
        )

    clipped_fraction = float((x.abs() >= clip_level).sum()) / x.numel()

    mono = x.mean(dim=0) if channels > 1 else x[0]
    # Silence is judged on the downmix: that is the signal that gets scored.
    peak = float(mono.abs().max())
    peak_dbfs = 20.0 * math.log10(peak) if peak > 0 else -math.inf
    if peak_dbfs < SILENCE_DBFS:
        channel_peak = float(x.abs().max())
        if channels > 1 and channel_peak > 0 and 20.0 * math.log10(channel_peak) >= SILENCE_DBFS:
            # opposite-phase channels: each is speech, their mean is nothing ("is silent" sent users hunting)
            raise AudioError(
                f"{name} has {channels} channels that cancel when mixed to mono (out of phase): the mean peaks at "
                f"{peak_dbfs:.1f} dBFS, a channel at {20.0 * math.log10(channel_peak):.1f} dBFS; give one channel"
            )
        raise AudioError(
            f"{name} is silent: peak level {peak_dbfs:.1f} dBFS is below {SILENCE_DBFS:.0f} dBFS"
        )

    mono = mono.to(torch.float32)
    resampled = rate != sample_rate
    if resampled:
        mono = resample(mono, rate, sample_rate)
    if not bool(torch.isfinite(mono).all()):  # finite as float64, but not as float32 (|x| > 3.4e38)
        raise AudioError(f"{name} has samples beyond the float32 range (peak {peak:.3g}): rescale it")
    if x.is_floating_point() and (top := float(x.abs().max())) > FLOAT_FULL_SCALE_LIMIT:
        # integer PCM cannot leave [-1, 1]; float audio this far out is at the wrong scale, not clipped (a tensor
        # of int16 values as float was scored "97.5% clipped" where the same samples in a file were refused)
        hint = ("it looks like integer PCM values stored as float: divide by 32768 (16-bit) or 2**31 (32-bit)"
                if top >= 256 else "rescale it to [-1, 1] (e.g. divide by its peak)")
        raise AudioError(f"{name} has samples far beyond full scale (peak {top:.4g}; float audio holds samples in "
                         f"[-1, 1], at most {FLOAT_FULL_SCALE_LIMIT} is accepted): {hint}")
    info = AudioInfo(
        path=str(path) if path is not None else None,
        original_rate=rate,
        channels=channels,
        duration_s=duration_s,
        clipped_fraction=clipped_fraction,
        resampled=resampled,
        downmixed=channels > 1,
        sample_rate=sample_rate,
    )
    return mono.contiguous(), info


def load_audio(path: str | Path, sample_rate: int = SAMPLE_RATE, *,
               max_duration_s: float | None = MAX_DURATION_S) -> tuple[Tensor, AudioInfo]:
    """Read a WAV (int16/int24/int32/float) or FLAC file into mono float32 at ``sample_rate``.

    ``max_duration_s``: longest file accepted (seconds, from the header's frame count and rate, checked before
    the samples are read); ``None`` for no limit.

    Returns:
        ``(mono, info)`` with ``mono`` a 1-D float32 CPU tensor ``[t]``; see
        :func:`prepare_waveform` for the checks applied.

    float64 (``DOUBLE``) files are read as float64 and checked to fit float32, other files are read as float32.

    Raises:
        AudioError: missing file, folder, empty, unreadable, truncated or too long file, or any check of
            :func:`prepare_waveform` (a float64 file with samples beyond the float32 range is refused);
            a soundfile error is chained as ``__cause__``.
    """
    from leakloss.atomic import path_problem

    name = _name(path)
    p = Path(path)
    if max_duration_s is not None and (isinstance(max_duration_s, bool) or not isinstance(max_duration_s, (int, float))
                                       or not max_duration_s > 0):  # a NaN limit too
        raise AudioError(f"max_duration_s must be a number of seconds > 0 or None, got {max_duration_s!r}")
    if (problem := path_problem(p, utf8=False)) is not None:  # Path.exists() raised ENAMETOOLONG; a link loop
        raise AudioError(f"audio file {problem}")
    try:  # exists() and is_file() raise on EACCES; opening a write-only file raises PermissionError
        if not p.exists():
            raise AudioError(f"{name} does not exist")
        if p.is_dir():
            raise AudioError(f"{name} is a folder, not an audio file")
        size = p.stat().st_size
        if not p.is_file():  # a pipe or device has size 0: "empty" was the wrong reason
            raise AudioError(f"{name} is not a regular file (a pipe, device or socket): give an audio file")
        if size == 0:
            raise AudioError(f"{name} is empty (0 bytes)")
        # libsndfile quietly reads a WAV cut short as a shorter clip: half a sentence would be scored.
        problem = _wav_truncation(p, size)
    except OSError as exc:
        raise AudioError(f"{name} cannot be accessed: {exc.strerror or exc}") from exc
    if problem:
        raise AudioError(f"{name} is truncated: {problem} (the file was cut short, e.g. by an interrupted copy)")
    try:
        # an open file, not str(p): a file name that is not UTF-8 (q\xff.wav) could not be passed to libsndfile
        with p.open("rb") as raw, sf.SoundFile(raw) as fh:
            unchecked = None if fh.format in READ_FORMATS else fh.format_info
            if unchecked is None:
                declared, rate, subtype = fh.frames, fh.samplerate, fh.subtype
                # judged from the header, before the read: a multi-hour file was read whole into memory
                too_long = max_duration_s is not None and rate > 0 and declared / rate > max_duration_s
                # float64 files are read as float64, so that finite samples beyond the float32 range (1e300) are
                # reported as such by prepare_waveform, not turned into Inf by the read and reported as Inf
                dtype = "float64" if fh.subtype == "DOUBLE" else "float32"
                data = None if too_long else fh.read(dtype=dtype, always_2d=True)
    except (sf.SoundFileError, RuntimeError, OSError, ValueError) as exc:
        reason = getattr(exc, "error_string", None) or str(exc)
        raise AudioError(
            f"{name} could not be read as WAV or FLAC audio (file damaged or not audio: {reason})"
        ) from exc
    if unchecked is not None:
        raise AudioError(f"{name} is {unchecked}: only WAV, FLAC or AIFF audio is read (in other formats a file cut "
                         "short reads as a shorter clip with no sign of it); convert it (e.g. ffmpeg -i IN OUT.wav)")
    if too_long:
        raise AudioError(f"{name} is too long: {declared / rate:.1f} s, the limit is {max_duration_s:g} s "
                         "(load_audio(..., max_duration_s=...) reads longer audio)")
    if data.shape[0] < declared:
        raise AudioError(f"{name} is truncated: only {data.shape[0]} of {declared} frames could be decoded")
    # soundfile gives [frames, channels]; we work channels first.
    # 8-bit PCM reads its positive full scale back as 127/128 = 0.992, mu-law as 0.980, A-law as 0.984, all under
    # CLIP_LEVEL: their clipping went unseen
    level = min(CLIP_LEVEL, SUBTYPE_FULL_SCALE.get(subtype, CLIP_LEVEL))
    return prepare_waveform(data.T, rate, sample_rate, path=path, clip_level=level)


#: The libsndfile formats read: WAV and AIFF (their data chunk's size is checked against the file,
#: :func:`_wav_truncation`) and FLAC (libsndfile reports a short stream). Others are refused: cut short, Ogg, MP3,
#: RF64, W64, AU, NIST, IRCAM, VOC, MAT5... read as a shorter clip with no sign of it.
READ_FORMATS = frozenset({"WAV", "WAVEX", "AIFF", "FLAC"})
#: What a full-scale sample of these subtypes reads back as (below :data:`CLIP_LEVEL`): their clip level.
SUBTYPE_FULL_SCALE = {"PCM_U8": 127 / 128, "PCM_S8": 127 / 128, "ULAW": 32124 / 32768, "ALAW": 32256 / 32768}
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)  # streamed WAVs (pipes) and RF64 leave the size to be found from the file


def _wav_truncation(path: Path, size: int) -> str | None:
    """For a RIFF/RIFX WAVE or an AIFF/AIFF-C file: why it is truncated (its ``data``/``SSND`` chunk declares
    more bytes than the file holds), or None. Other formats, streamed WAVs with an unknown size and files without a data
    chunk (soundfile reports those) give None.

    ``size``: the file's size in bytes.
    """
    with path.open("rb") as fh:
        head = fh.read(12)
        if len(head) == 12 and head[:4] in (b"RIFF", b"RIFX") and head[8:12] == b"WAVE":
            endian, audio_chunk = ("<" if head[:4] == b"RIFF" else ">"), b"data"
        elif len(head) == 12 and head[:4] == b"FORM" and head[8:12] in (b"AIFF", b"AIFC"):
            # AIFF: libsndfile shrinks its frame count to what the file holds, so only the chunk size tells
            endian, audio_chunk = ">", b"SSND"
        else:
            return None
        pos = 12
        while pos + 8 <= size:
            fh.seek(pos)
            chunk_id, chunk_size = struct.unpack(endian + "4sI", fh.read(8))
            if chunk_id == audio_chunk:
                if chunk_size in _UNKNOWN_SIZES:
                    return None
                held = size - (pos + 8)
                if chunk_size > held:
                    return f"its header declares {chunk_size} bytes of audio data but the file holds only {held}"
                return None
            pos += 8 + chunk_size + (chunk_size & 1)  # chunks are padded to an even size
    return None


WavSubtype = Literal["PCM_16", "FLOAT"]


def _to_samples(wave: Tensor | np.ndarray, what: str) -> np.ndarray:
    """``[t]`` or ``[c, t]`` float audio -> finite float64 ``[t, c]`` (soundfile layout)."""
    if not isinstance(wave, (Tensor, np.ndarray)):
        raise AudioError(f"{what}: wave must be a torch.Tensor or numpy.ndarray, got {type(wave).__name__}")
    is_float = wave.is_floating_point() if isinstance(wave, Tensor) else np.issubdtype(wave.dtype, np.floating)
    if not is_float:
        raise AudioError(f"{what}: wave must hold float samples in [-1, 1], got {wave.dtype}")
    # via float64 so bfloat16/float16 tensors convert too
    x = wave.detach().to("cpu", torch.float64).numpy() if isinstance(wave, Tensor) else wave.astype(np.float64)
    if x.ndim not in (1, 2) or x.size == 0:
        raise AudioError(f"{what}: wave must be non-empty [time] or [channels, time], got shape {x.shape}")
    if x.ndim == 2 and x.shape[0] > x.shape[1]:
        raise AudioError(f"{what}: shape {x.shape} looks like [time, channels]; pass channels first")
    n_bad = int((~np.isfinite(x)).sum())
    if n_bad:
        raise AudioError(f"{what}: wave contains {n_bad} NaN or Inf samples")
    return x.T if x.ndim == 2 else x


def _encode(x: np.ndarray, sample_rate: int, subtype: WavSubtype) -> bytes:
    """Finite float64 samples ``[t, c]`` -> WAV bytes of ``subtype``."""
    if subtype == "PCM_16":
        # Scale by 32768 to match how soundfile reads int16 back (k / 32768), so load/save round-trips exactly.
        data: np.ndarray = np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16)
    else:
        if x.size and float(np.abs(x).max()) > float(np.finfo(np.float32).max):  # cast to inf, and load refused it
            raise AudioError(f"samples beyond the float32 range (peak {float(np.abs(x).max()):.3g}) cannot be written "
                             "as FLOAT: rescale them")
        data = x.astype(np.float32)
    buffer = io.BytesIO()
    sf.write(buffer, data, sample_rate, format="WAV", subtype=subtype)
    return buffer.getvalue()


def save_audio(path: str | Path, wave: Tensor | np.ndarray, sample_rate: int = SAMPLE_RATE,
               subtype: WavSubtype = "PCM_16") -> None:
    """Write ``wave`` (``[t]`` or ``[c, t]``, float in [-1, 1]) as a WAV file, atomically.

    ``subtype``: ``"PCM_16"`` (samples beyond [-1, 1) are clipped to the 16-bit range) or ``"FLOAT"``
    (32-bit float, kept as they are: caches of synthesized speech that must read back bit for bit).
    Encoded in memory and written with :func:`leakloss.atomic.write_bytes_atomic`, so a reader
    never sees a partial file and a failure leaves no file behind.

    Raises:
        AudioError: bad wave or subtype, non-``.wav`` name, missing destination folder or write failure.
    """
    p = Path(path)
    what = f"cannot save audio file '{p}'"
    sample_rate = _check_rate(sample_rate, f"{what}: sample rate")
    if sample_rate >= 2**31:  # a WAV header holds 32 bits (soundfile raised a bare OverflowError)
        raise AudioError(f"{what}: sample rate {sample_rate} Hz does not fit a WAV header")
    if subtype not in get_args(WavSubtype):
        raise AudioError(f"{what}: subtype must be one of {', '.join(get_args(WavSubtype))}, got {subtype!r}")
    if p.suffix.lower() != ".wav":
        raise AudioError(f"{what}: it is written as WAV, so the name must end in .wav")
    x = _to_samples(wave, what)
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise AudioError(f"{what}: folder '{folder}' does not exist")
    try:
        write_bytes_atomic(p, _encode(x, sample_rate, subtype))
    except (OSError, RuntimeError, sf.SoundFileError) as exc:
        raise AudioError(f"{what}: {exc}") from exc


def audio_to_wav_bytes(wave: Tensor, sample_rate: int = SAMPLE_RATE) -> bytes:
    """Encode ``wave`` (``[t]`` or ``[c, t]``, float in [-1, 1]) as 16-bit PCM WAV bytes.

    For embedding clips in HTML reports (``base64.b64encode`` the result).
    """
    what = "cannot encode audio as WAV"
    sample_rate = _check_rate(sample_rate, f"{what}: sample rate")
    return _encode(_to_samples(wave, what), sample_rate, "PCM_16")
