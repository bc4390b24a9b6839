"""The differentiable leak signal: per-frame leak probability and an auxiliary loss over contrast sites.

:class:`LeakPenalty` runs a frozen recognizer's conv stack to layer 4 (5 ms frames) and the frozen
reference-free raw-conv head on a batch of 16 kHz waveforms — or of F5 mels, vocoded by a frozen
Vocos (backbone + head) and resampled — and returns ``(loss, parts)``: the mean over the given sites of
``-log(1 - p)`` (p the soft-max pooled leak probability; non-saturating), and detached parts for logging
(per-site probabilities, their means per contrast kind and contrast). No parameter of recognizer, head
or vocoder receives a gradient; the input does.

:func:`leak_reward` turns the same signal into a [0, 1] reward (1 = no leak) for GRPO/best-of-N;
it is NOT differentiable (computed under ``no_grad``); ``leak_reward.higher_is_better = True``.

Shapes: b batch, t samples (16 kHz), n mel frames, d mel bins (100), g conv frames (5 ms), k sites.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from leakloss.functional.leak import leak_penalty_from_logits, site_masks
from leakloss.heads import RawConvHead, load_head
from leakloss.schema import KINDS
from leakloss.timing import TimedSite

SHIPPED_HEADS = Path(__file__).resolve().parent / "assets" / "heads"


class LeakParts(NamedTuple):
    """Detached parts of the penalty, for logging."""

    penalty: Tensor  # scalar
    per_kind: dict  # "deletion"/"quality" -> scalar mean site probability
    per_contrast: dict  # e.g. "ʌ->∅", "ʌi̯->ɛː" -> scalar
    active_sites: Tensor  # number of sites with frames in the input
    site_probs: Tensor  # [k]
    frame_probs: Tensor  # [b, g] per-frame leak probability (5 ms)


class LeakPenalty(nn.Module):
    """``forward(waves=..., wave_lengths=..., sites=...)`` or ``forward(mels=..., mel_lengths=..., sites=...)``."""

    def __init__(self, recognizer: nn.Module, head: RawConvHead, mel_to_wave: nn.Module | None = None,
                 conv_layer: int = 4, pad_s: float = 0.02) -> None:
        super().__init__()
        self.recognizer, self.head, self.mel_to_wave = recognizer, head.eval(), mel_to_wave
        self.conv_layer, self.pad_s = conv_layer, pad_s
        for module in (recognizer, head, mel_to_wave):
            if module is not None:
                module.requires_grad_(False)

    def train(self, mode: bool = True) -> "LeakPenalty":  # frozen: always eval
        return super().train(False)

    @classmethod
    def load(cls, recognizer: str = "a", head_path: str | Path | None = None, mel_to_wave: nn.Module | None = None,
             device: str | torch.device = "cpu") -> "LeakPenalty":
        from leakloss.acoustic.recognizer import Recognizer

        from leakloss.heads import check_recognizer

        head, card = load_head(head_path or SHIPPED_HEADS / "rawconv.safetensors")
        rec = Recognizer.load(recognizer if head_path else card.recognizer, device=device)
        check_recognizer(card, rec.name)
        return cls(rec, head, mel_to_wave).to(device)

    def frame_logits(self, waves: Tensor, wave_lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``[b, t]`` -> per-frame leak logits ``[b, g]`` (fp32) and valid frame counts ``[b]``."""
        feats, frames = self.recognizer.conv_features(waves, self.conv_layer, wave_lengths)
        return self.head(feats).float(), frames

    def forward(self, waves: Tensor | None = None, wave_lengths: Tensor | None = None, mels: Tensor | None = None,
                mel_lengths: Tensor | None = None, sites: Sequence[Sequence[TimedSite]] = ()) -> tuple[Tensor, LeakParts]:
        if mels is not None:
            if self.mel_to_wave is None:
                raise ValueError("mel input needs a mel_to_wave vocoder (leakloss.vocoder.MelToWave)")
            from leakloss.vocoder import mel_lengths_to_samples

            waves = self.mel_to_wave(mels)
            if mel_lengths is not None:
                wave_lengths = torch.as_tensor(mel_lengths_to_samples(mel_lengths), device=waves.device).clamp(
                    max=waves.shape[-1])
        if waves is None:
            raise ValueError("give waves or mels")
        if len(sites) != waves.shape[0]:
            raise ValueError(f"sites must have one list per item: {len(sites)} lists for {waves.shape[0]} items")
        logits, frames = self.frame_logits(waves, wave_lengths)
        masks, index = site_masks(sites, logits.shape[-1], hop_s=self.recognizer.conv_hop_s(self.conv_layer), pad_s=self.pad_s, frame_lengths=frames,
                                  device=logits.device)
        item = torch.tensor([b for b, _ in index], dtype=torch.long, device=logits.device)
        loss, probs = leak_penalty_from_logits(logits, masks, item)
        active = masks.any(-1)
        return loss, self._parts(loss, probs, active, index, logits)

    @staticmethod
    def _parts(loss, probs, active, index, logits) -> LeakParts:
        def mean_where(keep: list[bool]) -> Tensor:
            sel = torch.tensor(keep, dtype=torch.bool, device=probs.device) & active
            return probs[sel].mean().detach() if bool(sel.any()) else probs.new_zeros(())

        per_kind = {k: mean_where([s.kind == k for _, s in index]) for k in KINDS}
        contrasts = sorted({s.contrast for _, s in index})
        per_contrast = {c: mean_where([s.contrast == c for _, s in index]) for c in contrasts}
        return LeakParts(loss.detach(), per_kind, per_contrast, active.sum().detach(), probs.detach(),
                         torch.sigmoid(logits).detach())


def place_sites(wave: Tensor, text: str, recognizer, finder=None) -> list[TimedSite]:
    """Testable sites of ``text`` placed in time on ``wave`` (forced alignment of the Nepali phones).

    Returns ``[]`` when the alignment fails or there is no testable site (the item contributes zero).
    """
    from leakloss.acoustic.align import align_words
    from leakloss.text.sites import SiteFinder

    finder = finder or SiteFinder()
    words = [w for w in finder(text) if w.skipped is None]
    if not any(w.testable_sites for w in words):
        return []
    with torch.no_grad():
        log_probs, frames = recognizer(wave[None])
    n = int(frames[0])
    alignment = align_words(log_probs[0, :n], n, [w.nepali for w in words], recognizer.phoneset,
                            recognizer.frame_rate, words=[w.word for w in words])
    if not alignment.ok:
        return []
    out = []
    for k, w in enumerate(words):
        wa = alignment.word(k)
        if wa is None:
            continue
        spans = wa.phone_spans
        for s in w.testable_sites:
            a, b = spans[s.position]
            out.append(TimedSite(a, max(b, a + 0.01), s.kind, s.contrast, w.word))
    return out


SITE_CACHE_VERSION = 1


def place_dataset_sites(items: Sequence[tuple[Tensor, str]], recognizer, cache: str | Path | None = None,
                        finder=None) -> list[list[TimedSite]]:
    """Sites of every ``(wave16k [t], text)`` training item placed on its ground-truth audio, once.

    With ``cache`` (e.g. ``DATASET_DIR/leak_sites.jsonl``) the placements are stored next to the dataset,
    one JSON line per item keyed by a hash of (audio, text, recognizer id), and reused: a training run
    aligns each utterance once, not once per step. Items whose alignment fails get ``[]`` (they then
    contribute zero to the penalty). The file is rewritten atomically when anything new was placed.
    """
    import hashlib
    import json

    from leakloss.text.sites import SiteFinder

    finder = finder or SiteFinder()
    cache = Path(cache) if cache is not None else None
    known: dict[str, list[dict]] = {}
    if cache is not None and cache.exists():
        for line in cache.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("version") == SITE_CACHE_VERSION:
                known[row["key"]] = row["sites"]
    out, added = [], 0
    for wave, text in items:
        h = hashlib.sha256(wave.detach().float().cpu().numpy().tobytes())
        h.update(f"|{text}|{recognizer.name}".encode())
        key = h.hexdigest()
        if key not in known:
            known[key] = [vars(s) for s in place_sites(wave, text, recognizer, finder)]
            added += 1
        out.append([TimedSite(**d) for d in known[key]])
    if cache is not None and added:
        from leakloss.atomic import write_text_atomic

        cache.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cache, "".join(json.dumps({"version": SITE_CACHE_VERSION, "key": k, "sites": v},
                                                    ensure_ascii=False) + "\n" for k, v in known.items()))
    return out


@torch.no_grad()
def leak_reward(waveforms: Sequence[Tensor] | Tensor, texts: Sequence[str], penalty: LeakPenalty | None = None,
                recognizer=None) -> Tensor:
    """``[b]`` reward in [0, 1]: 1 - mean leak probability over the testable sites of each reading
    (1.0 when a reading has no testable site or cannot be aligned). Not differentiable."""
    penalty = penalty or LeakPenalty.load()
    recognizer = recognizer or penalty.recognizer
    rewards = []
    for wave, text in zip(waveforms, texts):
        sites = place_sites(wave, text, recognizer)
        if not sites:
            rewards.append(1.0)
            continue
        _, parts = penalty(waves=wave[None], sites=[sites])
        active = parts.site_probs[: len(sites)]
        rewards.append(float(1.0 - active.mean()))
    ref = waveforms[0] if len(waveforms) else torch.zeros(())
    return torch.tensor(rewards, dtype=torch.float32, device=ref.device)


leak_reward.higher_is_better = True  # type: ignore[attr-defined]
