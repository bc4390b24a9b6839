"""The mel bridge: F5 / Vocos log mels -> Whisper's log-mel, in place of "vocoder -> resampler -> Whisper STFT".

The whole-item leak penalty on a Whisper recognizer spent 59% of its cost in the vocoder (``penalty_overhead.py``,
2026-12-06: Vocos 3.8% of an F5 v1 Base step of the penalty's 6.4%). Whisper never hears the wave itself, only its
log mel; :class:`MelBridge` maps the TTS's mel straight to that log mel: the Vocos bins under 8 kHz
(:func:`leakloss.functional.mel_bridge.vocos_bins_below`), levelled to unit energy, interpolated to Whisper's
10 ms grid, then a 5-frame linear map plus a small residual conv net (3 convs, kernel 5, 256 channels), then
Whisper's own floor and scale. About 0.5 M multiply-adds a frame against the released Vocos' ~14 M.

It is fitted (``python -m train_bridge``) on readings of the training voices only, to Whisper's log-mel of the same
audio; its card says on what, and how close it came. What it costs the signal is measured by
``benchmarks/signal_domains.py --mel-bridge`` (docs/penalty.md): an approximation of the vocoder path, chosen
by ``LeakPenalty(mel_bridge=...)`` / ``leak.mel_bridge=true``, not the default.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from leakloss.checks import first_line, is_whole, load_finite_safetensors
from leakloss.constants import MEL_BINS, MEL_FLOOR, MEL_HOP, MEL_N_FFT, MEL_SAMPLE_RATE, SAMPLE_RATE, WHISPER_MELS
from leakloss.functional.mel_bridge import level_normalize, to_whisper_grid, vocos_bins_below, whisper_floor_scale

EMBEDDED_BRIDGE = Path(__file__).resolve().parent / "assets" / "bridge" / "vocos_to_whisper"
BRIDGE_SCHEMA_VERSION = "1"


class BridgeLoadError(ValueError):
    """A bridge file pair that cannot be loaded: an unreadable card, sizes that do not build, damaged weights."""


class MelBridge(nn.Module):
    """``forward(mels [b, n, 100], mel_lengths [b], n_out, out_lengths [b])`` -> Whisper log-mel ``[b, 80, n_out]``.

    ``mels``: natural-log Vocos magnitudes (F5's ``x1_hat``), silent (``log(MEL_FLOOR)``) past each item's
    ``mel_lengths`` (:func:`leakloss.vocoder.silence_past_lengths`; a value below ``log(MEL_FLOOR)`` reads as that
    silence, as the vocoder hears it); ``out_lengths``: each item's Whisper mel frames
    (its floor is taken over them). Frozen unless ``frozen=False`` (the fitting script); gradients reach the mel.
    """

    def __init__(self, in_bins: int | None = None, context: int = 2, hidden: int = 256, kernel: int = 5,
                 frozen: bool = True) -> None:
        super().__init__()
        in_bins = vocos_bins_below() if in_bins is None else in_bins
        for name, value in (("in_bins", in_bins), ("hidden", hidden), ("kernel", kernel)):
            if not is_whole(value, 1):
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if not is_whole(context, 0) or kernel % 2 == 0:
            raise ValueError(f"context must be a whole number >= 0 and kernel odd, got {context!r}, {kernel!r}")
        if in_bins > MEL_BINS:  # the first forward was a conv's shape error
            raise ValueError(f"in_bins must be at most a Vocos mel's {MEL_BINS} bins, got {in_bins}")
        self.in_bins, self.context, self.hidden, self.kernel = in_bins, context, hidden, kernel
        self.linear = nn.Conv1d(in_bins, WHISPER_MELS, 2 * context + 1)  # replicate-padded: see forward
        self.net = nn.Sequential(nn.Conv1d(in_bins, hidden, kernel, padding=kernel // 2), nn.GELU(),
                                 nn.Conv1d(hidden, hidden, kernel, padding=kernel // 2), nn.GELU(),
                                 nn.Conv1d(hidden, WHISPER_MELS, kernel, padding=kernel // 2))
        self.frozen = frozen
        if frozen:
            self.requires_grad_(False)
            self.eval()

    def train(self, mode: bool = True) -> "MelBridge":  # frozen: a parent's .train() leaves it in eval
        return super().train(mode and not self.frozen)

    @property
    def receptive_frames(self) -> int:
        """Whisper-grid frames each side one output frame reads (the net's three convs, or the linear map's)."""
        return max(self.context, 3 * (self.kernel // 2))

    def card(self) -> dict:
        return {"schema_version": BRIDGE_SCHEMA_VERSION, "in_bins": self.in_bins, "context": self.context,
                "hidden": self.hidden, "kernel": self.kernel, "out_bins": WHISPER_MELS}

    def spectral(self, grid: Tensor) -> Tensor:
        """``[b, m, in_bins]`` levelled Vocos log mels on Whisper's grid -> ``[b, m, 80]`` log10 mel power."""
        x = grid.transpose(1, 2)
        linear = self.linear(F.pad(x, (self.context, self.context), mode="replicate") if x.shape[-1] else x)
        return (linear + self.net(x)).transpose(1, 2)

    def forward(self, mels: Tensor, mel_lengths: Tensor, n_out: int, out_lengths: Tensor) -> Tensor:
        # below the Vocos floor is silence to the vocoder; the fitted map never saw it and would extrapolate it loud
        x = mels[..., : self.in_bins].clamp(min=math.log(MEL_FLOOR))
        x = level_normalize(x, mel_lengths)  # fp32 (or fp64): the level in log space
        if n_out == 0:
            return x.new_zeros(x.shape[0], WHISPER_MELS, 0)
        grid = to_whisper_grid(x, n_out).to(self.linear.weight.dtype)  # the convs in the weights' dtype
        return whisper_floor_scale(self.spectral(grid), out_lengths)

    def whisper_log_mel(self, mels: Tensor, mel_lengths: Tensor, encoder_frames: Tensor) -> Tensor:
        """``mels [g, n, 100]`` (finite; ``mel_lengths [g]`` valid frames), each heard on ``encoder_frames [g]``
        20 ms encoder frames -> Whisper log-mel ``[g, 80, 2 max(encoder_frames)]``. Every item gets silence past
        its length (not the convs' zero padding, which would sit nearer a short item than in a longer one's
        group), for as many frames as the bridge's receptive field reads there; the extra frames are cut."""
        from leakloss.functional.mel_bridge import bridge_frames
        from leakloss.vocoder import silence_past_lengths

        n_out, grid, needed = bridge_frames(int(encoder_frames.max()), self.receptive_frames)
        longest = int(mel_lengths.max())
        chunk = silence_past_lengths(mels[:, :longest], mel_lengths, tail_frames=max(needed - longest, 0))
        return self(chunk, mel_lengths, grid, 2 * encoder_frames)[..., :n_out]

    @classmethod
    def embedded(cls, path: str | os.PathLike | None = None) -> "MelBridge":
        """The shipped bridge (``leakloss/assets/bridge``), or the one at ``path`` (``.json`` card +
        ``.safetensors``). Loads safetensors, never a pickle."""
        from leakloss.textfile import read_json_object

        path = Path(path or EMBEDDED_BRIDGE)
        card_path, weights = path.with_suffix(".json"), path.with_suffix(".safetensors")
        if not card_path.exists() or not weights.exists():
            raise BridgeLoadError(f"no mel bridge at {path} (.json + .safetensors); fit one: python -m train_bridge")
        try:
            card = read_json_object(card_path, "mel bridge card")
        except ValueError as err:
            raise BridgeLoadError(str(err)) from None
        if card.get("schema_version") != BRIDGE_SCHEMA_VERSION:
            raise BridgeLoadError(f"{card_path}: schema_version {card.get('schema_version')!r}, this code reads "
                                  f"{BRIDGE_SCHEMA_VERSION!r}")
        if is_whole(card.get("in_bins"), 1) and card["in_bins"] > MEL_BINS:
            raise BridgeLoadError(f"{card_path}: in_bins {card['in_bins']} is more than a Vocos mel's {MEL_BINS}")
        sizes = [card.get(k) for k in ("in_bins", "context", "hidden", "kernel")]
        sizes[0] = vocos_bins_below() if sizes[0] is None else sizes[0]  # (not computable on the meta device)
        try:
            with torch.device("meta"):  # the sizes checked and shaped without memory: a damaged card's hidden 1e9
                shapes = {k: tuple(v.shape) for k, v in cls(*sizes).state_dict().items()}  # allocated terabytes
        except (TypeError, ValueError, RuntimeError) as err:
            raise BridgeLoadError(f"{card_path}: sizes do not build a bridge ({first_line(err)})") from None
        state = load_finite_safetensors(weights, BridgeLoadError)
        not_float = sorted(k for k, v in state.items() if not v.is_floating_point())
        if not_float:  # load_state_dict would cast int or bool tensors silently
            raise BridgeLoadError(f"{weights}: weights that are not floating point ({', '.join(not_float[:3])})")
        wrong = sorted(k for k in set(shapes) | set(state) if shapes.get(k) != getattr(state.get(k), "shape", None))
        if wrong:  # before building: the card's sizes are only allocated when the file holds them
            raise BridgeLoadError(f"{weights}: the weights do not fit the card's sizes ({', '.join(wrong[:3])})")
        model = cls(*sizes)
        try:
            model.load_state_dict(state)
        except RuntimeError as err:
            raise BridgeLoadError(f"{weights}: the weights do not fit the card's sizes ({first_line(err)})") from None
        model.fit_card = card
        return model

    def save(self, path: str | os.PathLike, **card: object) -> None:
        """``path.safetensors`` + ``path.json`` (this bridge's sizes and ``card``'s facts), written atomically."""
        import json

        from safetensors.torch import save

        from leakloss.atomic import write_files_atomic

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        weights = save({k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()})
        text = json.dumps({**self.card(), **card}, indent=1, ensure_ascii=False) + "\n"
        write_files_atomic({path.with_suffix(".safetensors"): weights, path.with_suffix(".json"): text.encode()})


def check_bridge_recognizer(mel_bridge: object, recognizer: nn.Module) -> None:
    """``ValueError`` unless ``mel_bridge`` is a :class:`MelBridge` that can feed ``recognizer``: a Whisper encoder
    run on each item's own length that reads :data:`~leakloss.constants.WHISPER_MELS` bins."""
    if not isinstance(mel_bridge, MelBridge):  # a path or another module failed in the first forward
        raise ValueError(f"mel_bridge must be a leakloss.mel_bridge.MelBridge (MelBridge.embedded(path)), got "
                         f"{type(mel_bridge).__name__}")
    frames = getattr(recognizer, "frames", None)
    name = getattr(recognizer, "name", type(recognizer).__name__)
    if not callable(getattr(frames, "encode_mel", None)):
        raise ValueError(f"the mel bridge feeds a Whisper encoder's log-mel; recognizer {name} has none")
    if not frames.own_length:  # a 30 s padded window hears other states than the own-length bridge gives
        raise ValueError(f"the mel bridge encodes each item on its own length; recognizer {name} pads to "
                         "30 s (use the vocoder path)")
    if frames.encoder.config.num_mel_bins != WHISPER_MELS:
        raise ValueError(f"the mel bridge gives {WHISPER_MELS} mel bins; recognizer {name}'s encoder reads "
                         f"{frames.encoder.config.num_mel_bins}")


def bridged_samples(mel_lengths: Tensor, recognizer: nn.Module) -> Tensor:
    """``mel_lengths [b]`` Vocos frames -> the 16 kHz samples each item stands for (the vocoder's count), cut to
    the Whisper encoder's 30 s: F5 trains on clips up to 30.0 s, whose centred mels run a few ms past it. An item
    longer than that by more than one encoder frame is a :class:`~leakloss.penalty.PenaltyInputError` (the
    vocoder path hears it in 30 s windows)."""
    from leakloss.checks import PenaltyInputError
    from leakloss.vocoder import mel_lengths_to_samples

    samples = torch.as_tensor(mel_lengths_to_samples(mel_lengths), device=mel_lengths.device)
    limit = recognizer.frames.encoder.config.max_source_positions * recognizer.samples_per_frame
    if samples.numel() and int(samples.max()) > limit + recognizer.samples_per_frame:
        raise PenaltyInputError(f"the mel bridge hears items up to {limit / SAMPLE_RATE:.0f} s; got "
                                f"{int(samples.max()) / SAMPLE_RATE:.1f} s (the vocoder path hears longer items)")
    return samples.clamp(max=limit)


def vocos_mels(waves: Tensor, wave_lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``[b, t]`` 16 kHz waves -> (``[b, n, 100]`` Vocos log mels of each item resampled to 24 kHz, the mels an F5
    model is trained to produce, silent past each item; ``mel_lengths [b]``: the frames centred inside it).
    Differentiable; on the waves' device. An item too short for one Vocos STFT is zero-padded to it (its frames
    still count from its own length). An item with NaN/Inf among its valid samples gets NaN mels (so a penalty
    masks it) and a zero gradient. Waves that are not a ``[b, t]`` float tensor, or ``wave_lengths`` outside
    ``[0, t]``, are a :class:`~leakloss.penalty.PenaltyInputError` (a ``ValueError``)."""
    import torchaudio.functional as AF

    from leakloss.functional.leak import mask_nonfinite_items
    from leakloss.checks import PenaltyInputError
    from leakloss.vocoder import log_mel, silence_past_lengths

    if not isinstance(waves, Tensor) or waves.dim() != 2 or not waves.is_floating_point():
        raise PenaltyInputError(f"waves must be a float tensor [batch, samples], got "
                                f"{getattr(waves, 'dtype', type(waves).__name__)} {tuple(getattr(waves, 'shape', ()))}"
                                " (int16 PCM: divide by 32768)")
    b, t = waves.shape
    lengths = wave_lengths if wave_lengths is not None else torch.full((b,), t, dtype=torch.long)
    lengths = torch.as_tensor(lengths, device=waves.device)
    if lengths.shape != (b,) or lengths.is_floating_point() or bool(((lengths < 0) | (lengths > t)).any()):
        raise PenaltyInputError(f"wave_lengths must be [batch] whole numbers in [0, {t}], got {lengths.tolist()}")
    # selected before any arithmetic: the resampler's and the STFT's backward would turn a NaN into NaN gradients
    waves, bad = mask_nonfinite_items(waves, lengths)
    mels, mel_lengths = [], []
    for i in range(b):
        samples = int(lengths[i])
        wave = AF.resample(waves[i, :samples].float()[None], SAMPLE_RATE, MEL_SAMPLE_RATE) if samples \
            else waves.new_zeros(1, 0, dtype=torch.float32)
        n = -(-wave.shape[-1] // MEL_HOP)
        wave = torch.nn.functional.pad(wave, (0, max(0, MEL_N_FFT // 2 + 1 - wave.shape[-1])))  # reflect padding
        mels.append(log_mel(wave)[0, :n])
        mel_lengths.append(n)
    padded = torch.nn.utils.rnn.pad_sequence(mels, batch_first=True) if b \
        else waves.new_zeros(0, 0, MEL_BINS, dtype=torch.float32)
    mel_lengths = torch.tensor(mel_lengths, dtype=torch.long, device=waves.device)
    padded = silence_past_lengths(padded, mel_lengths, tail_frames=0)
    if bool(bad.any()):
        padded = torch.where(bad.to(padded.device)[:, None, None], torch.full((), math.nan, device=padded.device),
                             padded)
    return padded, mel_lengths


class MelPathPenalty(nn.Module):
    """A penalty's mel path heard on waves: ``forward(waves=[b, t], wave_lengths=[b], sites=...)`` scores each
    item's Vocos mel (:func:`vocos_mels`) as ``penalty(mels=..., mel_lengths=..., sites=...)``, so a benchmark or
    a listening check sees what an F5 fine-tune's penalty sees of the same audio (with a ``mel_bridge``: the
    bridge's approximation)."""

    def __init__(self, penalty: nn.Module, crop: bool = False) -> None:
        """``crop``: score as ``leak.crop=true`` does with a bridge (:meth:`leakloss.penalty.LeakPenalty.cropped`:
        the encoder on crops around the sites)."""
        super().__init__()
        self.penalty, self.crop = penalty, crop
        self.recognizer = penalty.recognizer
        self.flag_threshold = penalty.flag_threshold

    def forward(self, waves: Tensor, wave_lengths: Tensor | None = None, sites=()):
        mels, mel_lengths = vocos_mels(waves, wave_lengths)
        if self.crop:
            return self.penalty.cropped(mels, mel_lengths, sites)
        return self.penalty(mels=mels, mel_lengths=mel_lengths, sites=sites)
