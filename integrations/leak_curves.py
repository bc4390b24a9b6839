"""Leak curves during training: every N steps, synthesise a fixed probe set with the model being
trained, and log the leak penalty per contrast kind and contrast and the share of flagged sites.

``LeakCurveCallback`` is a Lightning callback; it logs through ``trainer.logger`` (W&B line plots with
a ``WandbLogger``, a CSV with ``CSVLogger``) and also appends to its own CSV. For F5's Trainer, call
:meth:`ProbeSet.measure` from a step hook (see ``integrations/f5_tts.py``: ``LeakCurveLogger``).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import lightning as L
import torch

from leakloss.penalty import LeakPenalty
from leakloss.site_placement import place_sites
from leakloss.timing import TimedSite


class ProbeSet:
    """Fixed probe sentences with their sites placed on reference audio (e.g. the teacher's reading).

    The model's syntheses are assumed time-aligned with the reference only roughly, so each synthesis
    is aligned again with the recognizer to place its sites. With ``words``, only the sites of ``words[i]`` in
    ``texts[i]`` count (e.g. an unseen test word said in a phrase whose other words the model trained on).
    """

    def __init__(self, texts: Sequence[str], penalty: LeakPenalty, words: Sequence[str] | None = None) -> None:
        self.texts, self.penalty = list(texts), penalty
        if words is not None and len(words) != len(self.texts):
            raise ValueError(f"one word per probe text: {len(words)} words for {len(self.texts)} texts")
        self.words = None if words is None else list(words)

    @torch.no_grad()
    def measure(self, waves: Sequence[torch.Tensor]) -> dict[str, float]:
        per_contrast: dict[str, list[float]] = {}
        per_kind: dict[str, list[float]] = {}
        flags_by_kind: dict[str, list[bool]] = {}
        flags = sites_total = 0
        if len(waves) != len(self.texts):
            raise ValueError(f"one probe wave per probe text: {len(waves)} waves for {len(self.texts)} texts")
        for i, (wave, text) in enumerate(zip(waves, self.texts, strict=True)):
            sites: list[TimedSite] = place_sites(wave, text, self.penalty.recognizer)
            if self.words is not None:
                sites = [s for s in sites if s.word == self.words[i]]
            if not sites:
                continue
            _, parts = self.penalty(waves=wave[None], sites=[sites])
            for s, p, active in zip(sites, parts.site_probs.tolist(), parts.site_active.tolist(), strict=True):
                if not active:  # a site without frames in the wave has no probability to report
                    continue
                per_contrast.setdefault(s.contrast, []).append(p)
                per_kind.setdefault(s.kind, []).append(p)
                flags_by_kind.setdefault(s.kind, []).append(p >= self.penalty.flag_threshold)
                flags += p >= self.penalty.flag_threshold
                sites_total += 1
        row = {f"leak_probe/{k}": sum(v) / len(v) for k, v in per_kind.items()}
        row |= {f"leak_probe/contrast/{k}": sum(v) / len(v) for k, v in per_contrast.items()}
        # no site measured (the model's speech could not be aligned): not scored, NaN -- "0% flagged" read as success
        row["leak_probe/flagged_share"] = flags / sites_total if sites_total else float("nan")
        row |= {f"leak_probe/flagged_share/{k}": sum(v) / len(v) for k, v in flags_by_kind.items()}
        row |= {f"leak_probe/sites/{k}": float(len(v)) for k, v in flags_by_kind.items()}
        row["leak_probe/sites"] = float(sites_total)
        return row


class LeakCurveCallback(L.Callback):
    """Every ``every`` training steps: ``synthesize(module, texts) -> [wave16k]``, measure, log."""

    def __init__(self, probe: ProbeSet, synthesize: Callable[[L.LightningModule, list[str]], list[torch.Tensor]],
                 every: int = 100, csv_path: str | Path | None = None) -> None:
        from leakloss.checks import check_whole

        every = check_whole(every, "every")
        self.probe, self.synthesize, self.every = probe, synthesize, every
        self.csv_path = Path(csv_path) if csv_path else None
        self.rows: list[tuple[int, dict]] = []
        self._last_step = -1  # the global step probed last

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        step = trainer.global_step
        # under accumulate_grad_batches several batches end at one global step: probe it once; under DDP every
        # rank synthesised the probes and appended the same rows to the one CSV: rank 0 alone
        if step == 0 or step % self.every or step == self._last_step or not trainer.is_global_zero:
            return
        self._last_step = step
        was_training = module.training
        module.eval()
        try:
            row = self.probe.measure(self.synthesize(module, self.probe.texts))
        finally:
            module.train(was_training)
        self.rows.append((step, row))
        if trainer.logger is not None:  # NaN (nothing aligned) stays in the CSV, and is not sent as a value
            trainer.logger.log_metrics({k: v for k, v in row.items() if math.isfinite(v)}, step=step)
        if self.csv_path is not None:
            new = not self.csv_path.exists()
            self.csv_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.csv_path, "a", newline="") as f:
                w = csv.writer(f)
                if new:
                    w.writerow(["step", "name", "value"])
                w.writerows([step, k, v] for k, v in row.items())
