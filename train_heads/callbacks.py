"""Callbacks for head training: per-epoch caught/false-flag rates per pair kind and contrast, PR curves; the
time budget (:class:`TimeBudget`).

They log through the trainer's logger; only the PR-curve upload touches wandb, and only when the
logger is a WandbLogger (the library itself never imports wandb).
"""

from __future__ import annotations

import time
from pathlib import Path

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


class BudgetSpent(Exception):
    """Raised by :class:`TimeBudget` to end a fit between two batches of an epoch; the pipeline catches it and
    exports what was trained."""


class TimeBudget(L.Callback):
    """A head's training-time budget (``max_minutes``; None: no budget) and the resume in the middle of an epoch.

    The minutes spent go into the checkpoints, so a resumed run counts the time of the runs before it. When the
    budget runs out on an epoch's last batch, the epoch ends as usual (validation, best-epoch and resume
    checkpoints) and the training stops. When it runs out in the middle of an epoch, the training stops there
    (:class:`BudgetSpent`), after writing ``save_to`` (the head's ``resume/last.ckpt``, when it resumes), which
    records how many batches of that epoch were trained: a rerun from it skips exactly those
    (:class:`train_heads.data.EpochShuffle` ``skip``) and finishes the epoch, so it trains what one uninterrupted run
    with the longer budget would. (Lightning's ``max_time`` stopped there too, but its checkpoint counted the cut
    epoch as done: the rerun went on with the next epoch and the rest of the cut one was never trained.)"""

    def __init__(self, minutes: float | None = None, save_to: str | Path | None = None) -> None:
        self.budget_minutes = None if minutes is None else float(minutes)
        self.save_to = None if save_to is None else str(save_to)
        self.earlier_minutes = 0.0  #: spent by the runs this one resumes (from the checkpoint)
        self.batches = 0  #: batches of the current epoch trained (the epoch left unfinished, after a stop)
        self.resume_skip = 0  #: batches of the checkpoint's unfinished epoch its run trained
        self.spent = False  #: the budget ended the training
        self._start: float | None = None
        self._cut = False

    def minutes(self) -> float:
        """Training minutes spent, the resumed runs' included."""
        return self.earlier_minutes + ((time.monotonic() - self._start) / 60 if self._start is not None else 0.0)

    def state_dict(self) -> dict:
        # only the checkpoint written in the middle of an epoch (below) has batches of it: Lightning writes the
        # epoch-end checkpoints after the last batch, before the epoch counts as ended
        return {"minutes": self.minutes(), "batches_in_epoch": self.batches if self._cut else 0}

    def load_state_dict(self, state_dict: dict) -> None:
        self.earlier_minutes = float(state_dict["minutes"])
        self.batches = self.resume_skip = int(state_dict["batches_in_epoch"])

    def _over(self) -> bool:
        return self.budget_minutes is not None and self.minutes() >= self.budget_minutes

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.resume_skip:  # Lightning goes on counting from the checkpoint's batch; the loader skips those batches
            loader = trainer.train_dataloader
            sampler = getattr(loader, "sampler", None)
            if not hasattr(sampler, "skip"):
                raise TypeError(f"resuming in the middle of an epoch needs a sampler with `skip` "
                                f"(train_heads.data.EpochShuffle), not {type(sampler).__name__}")
            sampler.skip = self.resume_skip * loader.batch_size
        if self._over():  # spent by the runs before: nothing more to train
            self.spent = True
            raise BudgetSpent(f"the time budget of {self.budget_minutes:g} min was spent before this run")
        self._start = time.monotonic()

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        self.batches = batch_idx + 1
        if not self._over():
            return
        self.spent = True
        if self.batches >= trainer.num_training_batches:  # the epoch's last batch: it ends as usual, then the fit
            trainer.should_stop = True
            return
        if self.save_to is not None:
            self._cut = True
            try:
                trainer.save_checkpoint(self.save_to)
            finally:
                self._cut = False
        raise BudgetSpent(f"the time budget of {self.budget_minutes:g} min ran out after {self.batches} of "
                          f"{trainer.num_training_batches} batches of epoch {trainer.current_epoch}")

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.batches = 0

    def _stop_clock(self) -> None:  # the minutes the card gives are the training's, not the export's after it
        self.earlier_minutes, self._start = self.minutes(), None

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._stop_clock()

    def on_exception(self, trainer: L.Trainer, module: L.LightningModule, exception: BaseException) -> None:
        self._stop_clock()
