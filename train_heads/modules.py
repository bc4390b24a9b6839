"""LightningModules for the MLP heads (57 site features) and the raw-conv head (conv-layer-4 frames)."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from leakloss.heads import MLPHead, RawConvHead


class _HeadModule(L.LightningModule):
    """Shared steps: subclasses give ``scores(batch) -> logits [b]`` and ``_step(batch, stage) -> loss``."""

    head: torch.nn.Module
    lr: float
    weight_decay: float

    def forward(self, x: Tensor) -> Tensor:
        return self.head(x)

    #: the optimizer step at which the training loss first was not finite (None: never); the run stops there
    diverged_at: int | None = None

    def training_step(self, batch, _):
        loss = self._step(batch, "train")
        if not torch.isfinite(loss):  # trained on to the last epoch and refused only at the export: stop here
            self.diverged_at = int(self.global_step) + 1
            self.trainer.should_stop = True
            return None
        return loss

    def validation_step(self, batch, _):
        self._step(batch, "val")

    def predict_step(self, batch, _):
        return torch.sigmoid(self.scores(batch).float())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.head.parameters(), lr=self.lr, weight_decay=self.weight_decay)


class MLPHeadModule(_HeadModule):
    def __init__(self, head: MLPHead, lr: float = 3e-3, weight_decay: float = 1e-3) -> None:
        super().__init__()
        self.head, self.lr, self.weight_decay = head, lr, weight_decay
        self.save_hyperparameters(ignore=["head"])

    def scores(self, batch) -> Tensor:
        return self.head(batch["x"])

    def _step(self, batch, stage: str) -> Tensor:
        x, y = batch["x"], batch["y"]
        loss = F.binary_cross_entropy_with_logits(self.head(x), y)
        self.log(f"{stage}/loss", loss, prog_bar=True, batch_size=x.shape[0], on_epoch=True, on_step=False)
        return loss


class RawConvHeadModule(_HeadModule):
    """Trained on word crops; the loss is on the pooled site score (per-frame logits are the signal)."""

    def __init__(self, head: RawConvHead, lr: float = 2e-3, weight_decay: float = 1e-3, outside_weight: float = 0.1) -> None:
        super().__init__()
        self.head, self.lr, self.weight_decay, self.outside_weight = head, lr, weight_decay, outside_weight
        self.save_hyperparameters(ignore=["head"])

    def scores(self, batch) -> Tensor:
        return RawConvHead.pool(self.head(batch["feats"]), batch["mask"])

    def _step(self, batch, stage: str) -> Tensor:
        # each member learns on its own (the mean of their losses): an ensemble, not one wider model
        members = self.head.member_logits(batch["feats"])  # [m, b, g]
        outside = batch["valid"] & ~batch["mask"]  # frames outside the site are not leaks: keep them quiet
        losses = []
        for frame_logits in members:
            pooled = RawConvHead.pool(frame_logits, batch["mask"])
            loss = F.binary_cross_entropy_with_logits(pooled, batch["y"])
            if outside.any():
                loss = loss + self.outside_weight * F.binary_cross_entropy_with_logits(
                    frame_logits[outside], torch.zeros_like(frame_logits[outside]))
            losses.append(loss)
        loss = torch.stack(losses).mean()
        self.log(f"{stage}/loss", loss, prog_bar=True, batch_size=members.shape[1], on_epoch=True, on_step=False)
        return loss
