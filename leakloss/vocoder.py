"""Differentiable mel -> 16 kHz wave: a frozen Vocos (backbone + head) followed by a 24k -> 16k resampler.

F5-TTS / IndicF5 work on vocos-style log mels (24 kHz, hop 256, 100 bins, ``[b, n, d]``); the leak
recognizers listen at 16 kHz. ``Vocos.decode`` runs under ``torch.inference_mode`` and so cuts the
graph; this module calls ``head(backbone(mel))`` directly so gradients reach the mel.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
import torchaudio.functional as AF
from torch import nn

from leakloss.checks import check_whole, first_line, is_whole
from leakloss.constants import (MEL_BINS, MEL_DESCRIPTION, MEL_FLOOR, MEL_HOP, MEL_N_FFT, MEL_SAMPLE_RATE,
                                SAMPLE_RATE)

EMBEDDED_VOCODER = Path(__file__).resolve().parent / "assets" / "vocoder" / "tiny"


def log_mel(wave: torch.Tensor) -> torch.Tensor:
    """``[b, t]`` 24 kHz wave -> ``[b, n, 100]`` vocos-style log mel (n_fft 1024, hop 256, centred, power 1,
    ``log(clamp(x, MEL_FLOOR))``), the mels F5-TTS and the released Vocos use. fp32 inside."""
    import torchaudio

    spec = torchaudio.functional.spectrogram(
        wave.float(), pad=0, window=torch.hann_window(MEL_N_FFT, device=wave.device), n_fft=MEL_N_FFT,
        hop_length=MEL_HOP, win_length=MEL_N_FFT, power=1.0, normalized=False, center=True, pad_mode="reflect")
    fb = torchaudio.functional.melscale_fbanks(MEL_N_FFT // 2 + 1, 0.0, MEL_SAMPLE_RATE / 2, MEL_BINS, MEL_SAMPLE_RATE,
                                               norm=None, mel_scale="htk").to(spec.device)
    mel = torch.matmul(spec.transpose(-1, -2), fb)  # [b, n, 100]
    return mel.clamp(min=MEL_FLOOR).log()


#: Silent mel frames appended past every item before vocoding a batch (and written over its padding): more than
#: the released 24 kHz Vocos reaches (embedding conv and 8 ConvNeXt blocks, kernel 7: 27 frames, plus the ISTFT's
#: 4-frame window), so an item's samples do not depend on the batch it is vocoded in.
VOCODER_TAIL_FRAMES = 32


def silence_past_lengths(mels: torch.Tensor, mel_lengths: torch.Tensor,
                         tail_frames: int = VOCODER_TAIL_FRAMES) -> torch.Tensor:
    """``mels [b, n, d]`` -> ``[b, n + tail_frames, d]``: frames at and past ``mel_lengths [b]`` set to a silent
    frame (``log(MEL_FLOOR)``, no gradient to them) and ``tail_frames`` more appended.

    Vocode this, not the padded batch: what a batch pads with (zeros, a model's ``x1_hat``) then never reaches
    an item's samples, and an item vocodes as it does alone."""
    mels = torch.nn.functional.pad(mels, (0, 0, 0, tail_frames))
    valid = torch.arange(mels.shape[1], device=mels.device)[None, :] < mel_lengths.to(mels.device)[:, None]
    silent = torch.full((), math.log(MEL_FLOOR), dtype=mels.dtype, device=mels.device)
    return torch.where(valid[..., None], mels, silent)


def mel_lengths_to_samples(
    n_frames: torch.Tensor | int,
    hop_length: int = MEL_HOP,
    sample_rate_in: int = MEL_SAMPLE_RATE,
    sample_rate_out: int = SAMPLE_RATE,
) -> torch.Tensor | int:
    """Valid output samples (16 kHz) for ``n_frames`` mel frames, int or ``[b]`` long tensor.

    Vocos' ISTFT head ("same" padding, as the released 24 kHz mel model) gives ``n * hop`` samples at
    24 kHz; ``torchaudio.functional.resample`` then returns ``ceil(len * out / in)`` samples.
    """
    samples_in = n_frames * hop_length
    return -((-samples_in * sample_rate_out) // sample_rate_in)  # integer ceil, works on ints and tensors


class MelToWave(nn.Module):
    """Frozen Vocos generator: ``[b, n, 100]`` log mel (24 kHz, hop 256) -> ``[b, t]`` wave at 16 kHz.

    Parameters never train (``requires_grad`` False, always eval); gradients flow through to the mel.
    Padded frames vocode to garbage; mask the output with :func:`mel_lengths_to_samples`.
    """

    def __init__(
        self,
        backbone: nn.Module,
        head: nn.Module,
        sample_rate_in: int = MEL_SAMPLE_RATE,
        sample_rate_out: int = SAMPLE_RATE,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self.sample_rate_in = sample_rate_in
        self.sample_rate_out = sample_rate_out
        self.requires_grad_(False)
        self.eval()

    frozen = True

    def train(self, mode: bool = True) -> "MelToWave":
        # a parent's .train() must not flip the frozen vocoder into training behaviour
        return super().train(mode and not self.frozen)

    @classmethod
    def from_vocos(cls, vocos: nn.Module, sample_rate_out: int = SAMPLE_RATE) -> "MelToWave":
        """Wrap a loaded ``vocos.Vocos`` (its feature extractor is dropped: mels come from the TTS)."""
        return cls(vocos.backbone, vocos.head, MEL_SAMPLE_RATE, sample_rate_out)

    @classmethod
    def tiny(cls, seed: int = 0, dim: int = 32, num_layers: int = 1, intermediate_dim: int | None = None,
             frozen: bool = True) -> "MelToWave":
        """Randomly initialised small Vocos with the released model's I/O (100 mels, n_fft 1024, hop 256).

        Offline and fast: for tests and plumbing only; it does not produce speech (:meth:`embedded` does).
        ``frozen=False`` leaves it trainable (``train_vocoder`` fits it).
        """
        from vocos.heads import ISTFTHead
        from vocos.models import VocosBackbone

        for name, value in (("dim", dim), ("num_layers", num_layers), ("intermediate_dim", intermediate_dim)):
            if value is not None or name != "intermediate_dim":
                check_whole(value, name)
        with torch.random.fork_rng():  # seed locally, leave the global RNG stream untouched
            torch.manual_seed(seed)
            backbone = VocosBackbone(input_channels=MEL_BINS, dim=dim, intermediate_dim=intermediate_dim or 2 * dim,
                                     num_layers=num_layers)
            head = ISTFTHead(dim=dim, n_fft=MEL_N_FFT, hop_length=MEL_HOP, padding="same")
        model = cls(backbone, head)
        if not frozen:
            model.requires_grad_(True)
            model.frozen = False
        return model

    @classmethod
    def embedded(cls, path: str | os.PathLike | None = None) -> "MelToWave":
        """The project's own tiny Vocos, fitted offline to espeak readings (``python -m train_vocoder``).

        It sounds buzzy but the recognizers read it: its card records recognizer A's phone error rate on
        vocoded held-out readings. Loads safetensors + a JSON card, never a pickle.
        """
        from safetensors.torch import load_file
        from vocos.heads import ISTFTHead
        from vocos.models import VocosBackbone

        path = Path(path or EMBEDDED_VOCODER)
        card_path, weights = path.with_suffix(".json"), path.with_suffix(".safetensors")
        if not card_path.exists() or not weights.exists():
            raise FileNotFoundError(f"no vocoder at {path} (.json + .safetensors); train one: python -m train_vocoder")
        card = _read_vocoder_card(card_path)
        backbone = VocosBackbone(input_channels=card["n_mels"], dim=card["dim"],
                                 intermediate_dim=card["intermediate_dim"], num_layers=card["num_layers"])
        head = ISTFTHead(dim=card["dim"], n_fft=card["n_fft"], hop_length=card["hop_length"], padding="same")
        model = cls(backbone, head)
        try:
            state = load_file(str(weights))
        except Exception as err:  # SafetensorError (its own kind), OSError: a truncated or foreign file
            raise VocoderLoadError(f"{weights}: not readable safetensors ({first_line(err) or type(err).__name__})") from None
        bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
        if bad:
            raise VocoderLoadError(f"{weights}: weights hold NaN/Inf ({', '.join(bad[:3])})")
        try:
            model.load_state_dict(state)
        except RuntimeError as err:  # missing, unexpected or mis-shaped weights for the card's sizes
            raise VocoderLoadError(f"{weights}: the weights do not fit the card's sizes ({first_line(err)})") from None
        model.card = card
        return model

    def generate(self, mels: torch.Tensor) -> torch.Tensor:
        """``mels`` ``[b, n, 100]`` -> wave ``[b, n * 256]`` at 24 kHz (no resampling)."""
        return self.head(self.backbone(mels.transpose(1, 2)))

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """``mels`` ``[b, n, 100]`` -> wave ``[b, mel_lengths_to_samples(n)]`` at ``sample_rate_out``."""
        wave_24k = self.generate(mels)
        if self.sample_rate_out == self.sample_rate_in:
            return wave_24k
        return AF.resample(wave_24k, self.sample_rate_in, self.sample_rate_out)


class VocoderLoadError(ValueError):
    """A vocoder file pair that cannot be loaded: an unreadable or incomplete card, sizes the mel front end
    does not use, or weights that are damaged or do not fit the card."""


def _read_vocoder_card(path: Path) -> dict:
    """The card of a saved vocoder, checked: its sizes build the model and its mel settings are this code's."""
    from leakloss.textfile import read_json_object

    try:
        card = read_json_object(path, "vocoder card")
    except ValueError as err:
        raise VocoderLoadError(str(err)) from None
    for key in ("dim", "intermediate_dim", "num_layers", "n_mels", "n_fft", "hop_length"):
        value = card.get(key)
        if not is_whole(value, 1):
            raise VocoderLoadError(f"{path}: {key} must be a whole number >= 1, got {value!r}")
    # the mel front end (leakloss.constants) is fixed: weights fitted to other mels would vocode garbage
    for key, want in (("n_mels", MEL_BINS), ("n_fft", MEL_N_FFT), ("hop_length", MEL_HOP),
                      ("sample_rate", MEL_SAMPLE_RATE)):
        if card.get(key, want) != want:
            raise VocoderLoadError(f"{path}: {key} is {card[key]!r}, but the mel front end uses {want} ({MEL_DESCRIPTION})")
    return card


def vocoder_sizes(vocoder: MelToWave) -> dict[str, int]:
    """The sizes :meth:`MelToWave.embedded` rebuilds a saved vocoder from, read off the built model (a config's
    ``intermediate_dim: null`` is the model's ``2 * dim``: the card must say the number)."""
    backbone = vocoder.backbone
    return {"dim": int(backbone.embed.out_channels),
            "intermediate_dim": int(backbone.convnext[0].pwconv1.out_features),
            "num_layers": len(backbone.convnext)}


def save_vocoder(path: str | os.PathLike, vocoder: MelToWave, card: dict) -> None:
    """``path.safetensors`` + ``path.json``, written as one unit (both or neither)."""
    from safetensors.torch import save

    from leakloss.atomic import write_files_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_files_atomic({
        path.with_suffix(".safetensors"): save({k: v.detach().contiguous() for k, v in vocoder.state_dict().items()}),
        path.with_suffix(".json"): json.dumps(card, indent=1, ensure_ascii=False).encode("utf-8"),
    })
