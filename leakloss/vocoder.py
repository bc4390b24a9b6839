"""Differentiable mel -> 16 kHz wave: a frozen Vocos (backbone + head) followed by a 24k -> 16k resampler.

F5-TTS / IndicF5 work on vocos-style log mels (24 kHz, hop 256, 100 bins, ``[b, n, d]``); the leak
recognizers listen at 16 kHz. ``Vocos.decode`` runs under ``torch.inference_mode`` and so cuts the
graph; this module calls ``head(backbone(mel))`` directly so gradients reach the mel.
"""

from __future__ import annotations

import torch
import torchaudio.functional as AF
from torch import nn

MEL_SAMPLE_RATE = 24_000
MEL_HOP = 256
N_MELS = 100
OUT_SAMPLE_RATE = 16_000


def mel_lengths_to_samples(
    n_frames: torch.Tensor | int,
    hop_length: int = MEL_HOP,
    sample_rate_in: int = MEL_SAMPLE_RATE,
    sample_rate_out: int = OUT_SAMPLE_RATE,
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
        sample_rate_out: int = OUT_SAMPLE_RATE,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = head
        self.sample_rate_in = sample_rate_in
        self.sample_rate_out = sample_rate_out
        self.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True) -> "MelToWave":
        # a parent's .train() must not flip the frozen vocoder into training behaviour
        return super().train(False)

    @classmethod
    def from_vocos(cls, vocos: nn.Module, sample_rate_out: int = OUT_SAMPLE_RATE) -> "MelToWave":
        """Wrap a loaded ``vocos.Vocos`` (its feature extractor is dropped: mels come from the TTS)."""
        return cls(vocos.backbone, vocos.head, MEL_SAMPLE_RATE, sample_rate_out)

    @classmethod
    def tiny(cls, seed: int = 0, dim: int = 32, num_layers: int = 1) -> "MelToWave":
        """Randomly initialised small Vocos with the released model's I/O (100 mels, n_fft 1024, hop 256).

        Offline and fast: for tests and plumbing only; it does not produce speech.
        """
        from vocos.heads import ISTFTHead
        from vocos.models import VocosBackbone

        with torch.random.fork_rng():  # seed locally, leave the global RNG stream untouched
            torch.manual_seed(seed)
            backbone = VocosBackbone(input_channels=N_MELS, dim=dim, intermediate_dim=2 * dim, num_layers=num_layers)
            head = ISTFTHead(dim=dim, n_fft=1024, hop_length=MEL_HOP, padding="same")
        return cls(backbone, head)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """``mels`` ``[b, n, 100]`` -> wave ``[b, mel_lengths_to_samples(n)]`` at ``sample_rate_out``."""
        wave_24k = self.head(self.backbone(mels.transpose(1, 2)))  # backbone wants [b, d, n]
        if self.sample_rate_out == self.sample_rate_in:
            return wave_24k
        return AF.resample(wave_24k, self.sample_rate_in, self.sample_rate_out)
