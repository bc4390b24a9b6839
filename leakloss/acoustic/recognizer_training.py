"""Training the embedded phone recognizers from scratch with CTC on the synthetic corpus.

Library side only (typed arguments); the Hydra entry point is ``python -m train_recognizers``.
Shapes: b batch, t samples, f frames, v vocabulary, n label length.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import Dataset

from leakloss.checks import check_whole
from leakloss.speech.augment import random_augment
from leakloss.speech.corpus import Corpus, CorpusItem
from leakloss.text.phones import NEPALI_PHONES, canonical

BLANK, UNK = "<pad>", "<unk>"


@dataclass(frozen=True)
class RecognizerArchitecture:
    """Size of a small ``Wav2Vec2ForCTC`` (standard 7-layer conv strides: 20 ms frames, 5 ms at layer 4)."""

    conv_channels: int = 64
    hidden_size: int = 256
    num_layers: int = 6
    num_heads: int = 4
    intermediate_size: int = 1024
    pos_conv_kernel: int = 32
    pos_conv_groups: int = 8

    def __post_init__(self) -> None:  # a 0-layer or 0-width model built, trained and shipped without a word
        for name in ("conv_channels", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                     "pos_conv_kernel", "pos_conv_groups"):
            check_whole(getattr(self, name), name)
        for name in ("num_heads", "pos_conv_groups"):
            if self.hidden_size % getattr(self, name):
                raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by {name} ({getattr(self, name)})")


def build_vocab(label_sequences: Sequence[Sequence[str]]) -> dict[str, int]:
    """Blank first, then every canonical phone seen or in the Nepali inventory, then ``<unk>``."""
    phones = {canonical(p) for seq in label_sequences for p in seq} | {canonical(p) for p in NEPALI_PHONES}
    vocab = {BLANK: 0}
    for p in sorted(phones):
        vocab[p] = len(vocab)
    vocab[UNK] = len(vocab)
    return vocab


def build_model(arch: RecognizerArchitecture, vocab: dict[str, int], seed: int):
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    torch.manual_seed(seed)
    config = Wav2Vec2Config(
        vocab_size=len(vocab), pad_token_id=vocab[BLANK], hidden_size=arch.hidden_size,
        num_hidden_layers=arch.num_layers, num_attention_heads=arch.num_heads,
        intermediate_size=arch.intermediate_size, conv_dim=(arch.conv_channels,) * 7,
        conv_stride=(5, 2, 2, 2, 2, 2, 2), conv_kernel=(10, 3, 3, 3, 3, 2, 2), feat_extract_norm="layer",
        do_stable_layer_norm=True, num_conv_pos_embeddings=arch.pos_conv_kernel,
        num_conv_pos_embedding_groups=arch.pos_conv_groups, hidden_dropout=0.05, attention_dropout=0.05,
        activation_dropout=0.05, feat_proj_dropout=0.05, final_dropout=0.05, layerdrop=0.0,
        mask_time_prob=0.05, mask_time_length=5, ctc_loss_reduction="mean", ctc_zero_infinity=True,
    )
    return Wav2Vec2ForCTC(config)


class CorpusCTCDataset(Dataset):
    """Corpus readings as (waveform, canonical label ids); augmentation seeded per (epoch, item).

    ``epoch`` is the epoch being read: a :class:`LengthBucketSampler` given this dataset sets it as each epoch
    starts (its own epoch, which a resumed run restores from its checkpoint), so every epoch hears another
    augmented copy of each reading. The seed is ``hash((seed, epoch, i))``: a tuple of ints hashes the same in
    every process (``PYTHONHASHSEED`` randomises str and bytes hashes, never int ones)."""

    def __init__(self, corpus: Corpus, items: Sequence[CorpusItem], vocab: dict[str, int], augment: bool, seed: int = 0):
        self.corpus, self.items, self.vocab, self.augment, self.seed = corpus, list(items), vocab, augment, seed
        self.epoch = 0
        self._cache: dict[int, Tensor] = {}

    def __len__(self) -> int:
        return len(self.items)

    def labels(self, item: CorpusItem) -> list[int]:
        return [self.vocab.get(canonical(p), self.vocab[UNK]) for p in item.phones]

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        if i not in self._cache:
            self._cache[i] = self.corpus.audio(self.items[i])
        wave = self._cache[i]
        if self.augment:
            g = torch.Generator().manual_seed(hash((self.seed, self.epoch, i)) & 0x7FFFFFFF)
            wave = random_augment(wave, g)
        return wave, torch.tensor(self.labels(self.items[i]), dtype=torch.long)


def collate_ctc(batch: Sequence[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    waves, labels = zip(*batch)
    wave_lengths = torch.tensor([w.numel() for w in waves])
    label_lengths = torch.tensor([l.numel() for l in labels])
    x = torch.zeros(len(waves), int(wave_lengths.max()))
    y = torch.full((len(labels), int(label_lengths.max())), -100, dtype=torch.long)
    for i, (w, l) in enumerate(zip(waves, labels)):
        x[i, : w.numel()] = w
        y[i, : l.numel()] = l
    return {"waves": x, "wave_lengths": wave_lengths, "labels": y, "label_lengths": label_lengths}


class LengthBucketSampler(torch.utils.data.Sampler):
    """Batches of similar length (less padding), order shuffled per epoch with the seed.

    A resumed run sets ``epoch`` and ``skip`` (batches of that epoch already trained on) from its checkpoint; the
    epoch being iterated is ``epoch - 1`` afterwards, and ``skipped`` says how many of its batches were left out.
    ``dataset`` (a :class:`CorpusCTCDataset`): its ``epoch`` is set to the epoch being iterated as each starts, so
    its augmentation follows the epochs, a resumed run's included. (Not a ``set_epoch`` method: Lightning calls
    that with its own epoch count, which starts at 0 again in a resumed run.)"""

    def __init__(self, lengths: Sequence[float], batch_size: int, seed: int = 0, shuffle: bool = True,
                 dataset: CorpusCTCDataset | None = None):
        self.lengths, self.batch_size, self.seed, self.shuffle = list(lengths), batch_size, seed, shuffle
        self.dataset = dataset
        self.epoch = 0
        self.skip = self.skipped = 0

    def __iter__(self):
        if self.dataset is not None:  # before the loader reads an item (or copies the dataset to its workers)
            self.dataset.epoch = self.epoch
        rng = random.Random(self.seed + self.epoch)
        order = sorted(range(len(self.lengths)), key=lambda i: (self.lengths[i], rng.random() if self.shuffle else 0))
        batches = [order[i: i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        if self.shuffle:
            rng.shuffle(batches)
        self.epoch += 1
        self.skipped, self.skip = self.skip, 0
        return iter(batches[self.skipped:])

    def __len__(self) -> int:
        return (len(self.lengths) + self.batch_size - 1) // self.batch_size


class PrintProgress(L.Callback):
    """One plain line every ``every`` steps (a progress bar is unreadable in logs)."""

    def __init__(self, every: int = 50) -> None:
        self.every = every
        self._start = None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        import time

        self._start = self._start or time.time()
        step = trainer.global_step
        if outputs is None or (isinstance(outputs, dict) and "loss" not in outputs):
            return  # a skipped step (a non-finite loss stops the run: RecognizerModule.diverged_at)
        if step % self.every == 0:
            loss = float(outputs["loss"]) if isinstance(outputs, dict) else float(outputs)
            print(f"step {step} loss {loss:.3f} elapsed {time.time() - self._start:.0f}s", flush=True)


class RecognizerModule(L.LightningModule):
    def __init__(self, arch: RecognizerArchitecture, vocab: dict[str, int], seed: int = 0, lr: float = 1e-3,
                 warmup_steps: int = 300, total_steps: int = 5000, budget_minutes: float | None = None,
                 done_steps: int = 0, spent_minutes: float = 0.0):
        """The learning rate warms up over ``warmup_steps`` then follows a cosine to 5% over
        ``total_steps`` or, when ``budget_minutes`` is given, over that much wall time: on a shared CPU
        the step rate is unknown in advance, and a run cut by time must still end annealed. A resumed run
        gives the steps and minutes its checkpoint had already spent, so the schedule goes on where it stopped."""
        super().__init__()
        self.vocab, self.lr, self.warmup, self.total = vocab, lr, warmup_steps, total_steps
        self.budget_s = budget_minutes * 60 if budget_minutes else None
        self.done_steps, self.spent_s = done_steps, spent_minutes * 60
        self.diverged_at: int | None = None  #: the step whose loss was not finite (the run stopped there)
        self._t0: float | None = None
        self.model = build_model(arch, vocab, seed)

    def _normalize(self, waves: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        mask = torch.arange(waves.shape[1], device=waves.device)[None] < lengths[:, None]
        n = lengths.clamp(min=1)[:, None].float()
        mean = (waves * mask).sum(-1, keepdim=True) / n
        var = (((waves - mean) * mask) ** 2).sum(-1, keepdim=True) / n
        return (waves - mean) / torch.sqrt(var + 1e-7) * mask, mask

    def training_step(self, batch, _):
        x, mask = self._normalize(batch["waves"], batch["wave_lengths"])
        out = self.model(x, attention_mask=mask.long(), labels=batch["labels"])
        if not torch.isfinite(out.loss):
            # was trained on for the whole budget and found only at the end: stop here, step nothing
            self.diverged_at = int(self.global_step) + 1
            self.trainer.should_stop = True
            return None
        self.log("train/ctc", out.loss, prog_bar=True, batch_size=x.shape[0])
        return out.loss

    def validation_step(self, batch, _):
        x, mask = self._normalize(batch["waves"], batch["wave_lengths"])
        out = self.model(x, attention_mask=mask.long(), labels=batch["labels"])
        self.log("val/ctc", out.loss, prog_bar=True, batch_size=x.shape[0])

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.01, betas=(0.9, 0.98))

        import math
        import time

        def schedule(step: int) -> float:
            if self._t0 is None:
                self._t0 = time.time()
            step += self.done_steps
            if step < self.warmup:
                return (step + 1) / self.warmup
            if self.budget_s is not None:
                progress = min((self.spent_s + time.time() - self._t0) / self.budget_s, 1.0)
            else:
                progress = min((step - self.warmup) / max(self.total - self.warmup, 1), 1.0)
            return 0.05 + 0.95 * 0.5 * (1 + math.cos(progress * math.pi))

        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.LambdaLR(opt, schedule),
                                                    "interval": "step"}}


#: what :func:`save_recognizer` writes (an ``out_dir`` holding other files is refused, never emptied)
RECOGNIZER_FILES = ("model.safetensors", "config.json", "vocab.json", "card.json")


def save_recognizer(model, vocab: dict[str, int], out_dir: str | Path, card: dict) -> Path:
    """Write ``model.safetensors`` + ``config.json`` + ``vocab.json`` + ``card.json`` atomically (temp folder, rename)."""
    from leakloss.atomic import atomic_directory

    out_dir = Path(out_dir)
    with atomic_directory(out_dir, owned=RECOGNIZER_FILES) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        (tmp / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
        (tmp / "card.json").write_text(json.dumps(card, ensure_ascii=False, indent=1), encoding="utf-8")
    return out_dir
