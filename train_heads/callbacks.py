"""Callbacks for head training: per-epoch caught/false-flag rates per pair kind and contrast, PR curves.

They log through the trainer's logger; only the PR-curve upload touches wandb, and only when the
logger is a WandbLogger (the library itself never imports wandb).
"""

from __future__ import annotations

import lightning as L
import torch

from leakloss.pairs.features import FeatureTable


class RatesCallback(L.Callback):
    """On each validation end: caught and false-flag rates at the flag threshold on the dev rows,
    per pair kind and per contrast (ungated: the gates need both recognizers)."""

    def __init__(self, table: FeatureTable, flag: float = 0.5, prefix: str = "dev") -> None:
        self.table, self.flag, self.prefix = table, flag, prefix

    @torch.no_grad()
    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if not len(self.table):
            return
        scores = torch.sigmoid(module(self.table.x.to(module.device)).float()).cpu()
        flagged = scores >= self.flag
        groups: dict[str, list[int]] = {}
        for i, m in enumerate(self.table.meta):
            for key in (f"pair_{m['pair_kind']}", f"contrast_{m['contrast']}"):
                groups.setdefault(key, []).append(i)
        for key, idx in groups.items():
            idx_t = torch.tensor(idx)
            y = self.table.y[idx_t] > 0.5
            f = flagged[idx_t]
            if y.any():
                module.log(f"{self.prefix}/{key}/caught", f[y].float().mean(), on_epoch=True)
            if (~y).any():
                module.log(f"{self.prefix}/{key}/false_flags", f[~y].float().mean(), on_epoch=True)

    @torch.no_grad()
    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        from lightning.pytorch.loggers import WandbLogger

        if not isinstance(trainer.logger, WandbLogger) or not len(self.table):
            return
        import wandb

        scores = torch.sigmoid(module(self.table.x.to(module.device)).float()).cpu()
        probs = torch.stack([1 - scores, scores], dim=1).numpy()
        trainer.logger.experiment.log({f"{self.prefix}/pr_curve": wandb.plot.pr_curve(
            self.table.y.long().numpy(), probs, labels=["no change", "changed"])})
