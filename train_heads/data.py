"""DataModules over cached feature tables (see :mod:`leakloss.pairs.features`)."""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from leakloss.pairs.features import ConvTable, FeatureTable


class EpochShuffle(torch.utils.data.Sampler):
    """Shuffles with ``seed + epoch``: Lightning calls ``set_epoch``, so a run resumed from a checkpoint
    sees exactly the order an uninterrupted run would.

    A run resumed in the middle of an epoch sets ``skip`` (the rows of that epoch's order already trained on:
    whole batches, :class:`train_heads.callbacks.TimeBudget`); the next iteration leaves them out, and ``skipped``
    says how many it left out (as :class:`leakloss.acoustic.recognizer_training.LengthBucketSampler` does)."""

    def __init__(self, n: int, seed: int = 0) -> None:
        self.n, self.seed, self.epoch = n, seed, 0
        self.skip = self.skipped = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        self.skipped, self.skip = self.skip, 0
        return iter(torch.randperm(self.n, generator=g).tolist()[self.skipped:])

    def __len__(self) -> int:
        return self.n


class _Rows(Dataset):
    def __init__(self, table: FeatureTable) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, i: int) -> dict:
        return {"x": self.table.x[i], "y": self.table.y[i]}


class FeatureDataModule(L.LightningDataModule):
    """Train/dev rows of one contrast kind; held-out rows are only read by the evaluation."""

    def __init__(self, table: FeatureTable, kind: str, batch_size: int = 64, seed: int = 0) -> None:
        super().__init__()
        self.table, self.kind, self.batch_size, self.seed = table, kind, batch_size, seed
        self.train = table.select(kind=kind, split="train")
        self.dev = table.select(kind=kind, split="dev")
        self.heldout = table.select(kind=kind, split="heldout")

    def train_dataloader(self):
        return DataLoader(_Rows(self.train), batch_size=self.batch_size, sampler=EpochShuffle(len(self.train), self.seed))

    def val_dataloader(self):
        return DataLoader(_Rows(self.dev if len(self.dev) else self.train), batch_size=512)


class _Crops(Dataset):
    def __init__(self, table: ConvTable) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, i: int) -> tuple:
        return self.table.feats[i], self.table.masks[i], self.table.y[i]


def collate_crops(batch) -> dict:
    feats, masks, ys = zip(*batch)
    g = max(f.shape[-1] for f in feats)
    c = feats[0].shape[0]
    x = torch.zeros(len(feats), c, g)
    mask = torch.zeros(len(feats), g, dtype=torch.bool)
    valid = torch.zeros(len(feats), g, dtype=torch.bool)
    for i, (f, m) in enumerate(zip(feats, masks)):
        x[i, :, : f.shape[-1]] = f
        mask[i, : m.numel()] = m
        valid[i, : f.shape[-1]] = True
    return {"feats": x, "mask": mask, "valid": valid, "y": torch.stack(list(ys)).float()}


class ConvDataModule(L.LightningDataModule):
    def __init__(self, table: ConvTable, batch_size: int = 32, seed: int = 0) -> None:
        super().__init__()
        self.table, self.batch_size, self.seed = table, batch_size, seed
        self.train = table.select(split="train")
        self.dev = table.select(split="dev")
        self.heldout = table.select(split="heldout")

    def train_dataloader(self):
        return DataLoader(_Crops(self.train), batch_size=self.batch_size, sampler=EpochShuffle(len(self.train), self.seed),
                          collate_fn=collate_crops)

    def val_dataloader(self):
        return DataLoader(_Crops(self.dev if len(self.dev) else self.train), batch_size=64, collate_fn=collate_crops)
