"""Content supervision for pretraining: a CTC loss on F5's one-step clean-mel estimate through a frozen recognizer.

Flow matching must discover on its own which frames say which characters; DMOSpeech teaches content directly
with a CTC loss on its student's output. Here the estimate ``x1_hat = x_t + (1 - t) * pred`` (ground truth
outside the infilled span) is vocoded by the frozen embedded Vocos and read by a frozen phone recognizer
(A hears espeak ``hi`` at ~5% PER); the CTC loss against the phones espeak said is added to the flow loss,
weighted by ``mean_b(t_b ** 2)`` as the leak penalty is (the one-step estimate is noise at small t).

No parameter of the recognizer or the vocoder trains; the gradient reaches the F5 through ``x1_hat``.
Items whose targets do not fit their frames (CTC impossible) contribute zero (``zero_infinity``), and a
non-finite loss is never returned: it is reported in :class:`ContentParts` and replaced by zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from leakloss.vocoder import MelToWave, mel_lengths_to_samples, silence_past_lengths


class ContentParts(NamedTuple):
    """Detached parts of the content loss, for logging."""

    ctc: Tensor  # mean CTC loss per target phone over the scored items (before the t**2 weight)
    items: int  # items scored
    nonfinite: bool  # the loss was NaN/Inf and was replaced by zero


def phone_targets(phones: Sequence[str], vocab: dict[str, int], unk: str) -> list[int]:
    """espeak phones -> the recognizer's label ids (canonical phone classes, unknown ones to ``unk``)."""
    from leakloss.text.phones import canonical

    return [vocab.get(canonical(p), vocab[unk]) for p in phones]


def ctc_content_loss(log_probs: Tensor, frames: Tensor, targets: Sequence[Sequence[int]], blank: int) -> Tensor:
    """Mean over items of the CTC loss per target phone: ``log_probs [b, f, v]`` (log-softmax), ``frames [b]``,
    ``targets`` b lists of ids. Impossible alignments (more targets than frames) count zero."""
    flat = torch.tensor([i for t in targets for i in t], dtype=torch.long, device=log_probs.device)
    target_lengths = torch.tensor([len(t) for t in targets], dtype=torch.long, device=log_probs.device)
    loss = F.ctc_loss(log_probs.float().transpose(0, 1), flat, frames.long(), target_lengths, blank=blank,
                      reduction="none", zero_infinity=True)
    return (loss / target_lengths.clamp(min=1)).mean()


class ContentCTC(nn.Module):
    """Frozen vocoder + recognizer: ``(mels [b, n, d], mel_lengths [b], targets) -> (loss, ContentParts)``."""

    def __init__(self, recognizer: nn.Module, vocoder: MelToWave) -> None:
        super().__init__()
        self.recognizer, self.vocoder = recognizer, vocoder
        self.requires_grad_(False)

    def train(self, mode: bool = True) -> "ContentCTC":  # frozen helpers stay in eval mode
        return super().train(False)

    @classmethod
    def load(cls, recognizer: str = "a", device: str | torch.device = "cpu") -> "ContentCTC":
        from leakloss.acoustic.recognizer import Recognizer

        return cls(Recognizer.load(recognizer, device=device), MelToWave.embedded()).to(device)

    def targets(self, phones: Sequence[str]) -> list[int]:
        from leakloss.acoustic.recognizer_training import UNK

        return phone_targets(phones, self.recognizer.vocab, UNK)

    def forward(self, mels: Tensor, mel_lengths: Tensor, targets: Sequence[Sequence[int]]) -> tuple[Tensor, ContentParts]:
        keep = [i for i, t in enumerate(targets) if len(t) > 0]
        if not keep:
            return mels.new_zeros((), dtype=torch.float32), ContentParts(mels.new_zeros(()), 0, False)
        index = torch.tensor(keep, device=mels.device)
        mels, mel_lengths = mels.index_select(0, index), mel_lengths.index_select(0, index)
        targets = [targets[i] for i in keep]
        waves = self.vocoder(silence_past_lengths(mels, mel_lengths))
        wave_lengths = mel_lengths_to_samples(mel_lengths).clamp(max=waves.shape[-1])
        if not bool(torch.isfinite(waves).all()):  # a diverged estimate: the recognizer refuses NaN audio
            loss = 0.0 * waves.float().nan_to_num(0.0, 0.0, 0.0).sum()
            return loss, ContentParts(loss.detach(), len(keep), True)
        log_probs, frames = self.recognizer(waves.float(), wave_lengths)
        loss = ctc_content_loss(log_probs, frames, targets, self.recognizer.blank)
        nonfinite = not bool(torch.isfinite(loss))
        if nonfinite:
            loss = loss.new_zeros(()) + 0.0 * loss.nan_to_num(0.0, 0.0, 0.0)
        return loss, ContentParts(loss.detach(), len(keep), nonfinite)
