"""Training the Whisper CTC head: cached encoder states, a dataset over them, the CTC step and checkpoints.

The encoder is frozen, so its hidden states are computed once per reading (clean, and ``augmentations``
seeded copies through :func:`leakloss.speech.augment.augment_chain`) and cached as float16 ``.npy`` files keyed
by the reading, the augmentation index and the encoder's hash; the head then trains on them in minutes.
Shapes: l encoder states, f frames, d width, n label length, b batch.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from leakloss.acoustic.recognizer_training import UNK
from leakloss.checks import check_same_run
from leakloss.text.phones import canonical


@dataclass(frozen=True)
class StatesItem:
    """One cached reading: where its states are and its label ids."""

    path: Path
    labels: tuple[int, ...]
    frames: int
    group: str  # corpus role or voice family: for per-group monitoring


def labels_for(phones: Sequence[str], vocab: dict[str, int]) -> tuple[int, ...]:
    """Canonical phone ids; a phone outside the vocabulary is ``<unk>`` (counted by the caller)."""
    return tuple(vocab.get(canonical(p), vocab[UNK]) for p in phones)


def cache_states(frames, wave: Tensor, path: Path) -> int:
    """Encoder states of one wave, saved as float16 ``[l, f, d]`` at ``path`` (atomic); returns f."""
    from leakloss.acoustic.whisper_recognizer import encoder_states

    if path.exists():
        return int(np.load(path, mmap_mode="r").shape[1])
    with torch.no_grad():
        states, n = encoder_states(frames, wave[None].float())
    arr = states[0, :, : int(n[0])].to(torch.float16).numpy()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp.npy")
    try:
        np.save(tmp, arr)
        os.replace(tmp, path)
    except BaseException:  # a failed write (disk full, interrupt) leaves no half-written temporary behind
        tmp.unlink(missing_ok=True)
        raise
    return arr.shape[1]


def augmentation_seed(item_id: str, k: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{item_id}/{k}".encode()).digest()[:4], "little")


class StatesDataset(torch.utils.data.Dataset):
    """Cached states, read from disk when an item is drawn (the OS page cache keeps what fits), with
    SpecAugment-style masks when ``augment``. They were all loaded into memory once: 18,531 states of Whisper base
    (33 GB of float16 on disk with the 1,000 extra prompts) were killed for memory on a 24 GiB machine."""

    def __init__(self, items: Sequence[StatesItem], augment: bool, seed: int = 0) -> None:
        self.items = list(items)
        self.augment = augment
        self.rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        x = torch.from_numpy(np.load(self.items[i].path).astype(np.float32))  # [l, f, d]
        if self.augment:
            f, d = x.shape[1], x.shape[2]
            for _ in range(2):  # two time masks of up to 6 frames, two channel masks of up to 32 dims
                w = self.rng.randint(0, min(6, max(f // 8, 1)))
                s = self.rng.randint(0, max(f - w, 0))
                x[:, s:s + w] = 0
                w = self.rng.randint(0, 32)
                s = self.rng.randint(0, d - w)
                x[:, :, s:s + w] = 0
        return x, torch.tensor(self.items[i].labels, dtype=torch.long)


def collate_states(batch: Sequence[tuple[Tensor, Tensor]]) -> dict[str, Tensor]:
    """-> ``states [b, l, f, d]`` (zero-padded), ``frames [b]``, ``labels [b, n]`` (-1 padded), ``label_lengths``."""
    b = len(batch)
    l, _, d = batch[0][0].shape
    f = max(x.shape[1] for x, _ in batch)
    n = max(len(y) for _, y in batch)
    states = torch.zeros(b, l, f, d)
    labels = torch.full((b, max(n, 1)), -1, dtype=torch.long)
    for i, (x, y) in enumerate(batch):
        states[i, :, : x.shape[1]] = x
        labels[i, : len(y)] = y
    return {"states": states, "frames": torch.tensor([x.shape[1] for x, _ in batch]),
            "labels": labels, "label_lengths": torch.tensor([len(y) for _, y in batch])}


def batches_by_length(items: Sequence[StatesItem], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches of similar length (sorted within shuffled chunks of 50 batches)."""
    order = list(range(len(items)))
    rng.shuffle(order)
    chunk = batch_size * 50
    out = []
    for c in range(0, len(order), chunk):
        part = sorted(order[c:c + chunk], key=lambda i: items[i].frames)
        out += [part[j:j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(out)
    return out


def ctc_step(head, batch: dict[str, Tensor], blank: int) -> Tensor:
    """Mean CTC loss per label (fp32 log-softmax); readings whose labels cannot fit their frames are zeroed."""
    logits = head(batch["states"], batch["frames"])
    log_probs = torch.log_softmax(logits.float(), -1).transpose(0, 1)
    labels = batch["labels"].clamp(min=0)
    loss = torch.nn.functional.ctc_loss(log_probs, labels, batch["frames"], batch["label_lengths"], blank=blank,
                                        reduction="sum", zero_infinity=True)
    return loss / batch["label_lengths"].sum().clamp(min=1)


def cosine_lr(step: int, warmup: int, progress: float, base: float) -> float:
    """Warm-up over ``warmup`` steps, then cosine annealing over the time budget (``progress`` in [0, 1])."""
    if step < warmup:
        return base * (step + 1) / warmup
    return base * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


#: What a training checkpoint folder holds (anything else there is refused, not deleted).
CHECKPOINT_FILES = ("checkpoint.safetensors", "state.json")


def save_checkpoint(folder: Path, head, optimizer, state: dict) -> None:
    """Head + Adam moments as safetensors, the counters as JSON (written atomically; never pickles)."""
    from safetensors.torch import save_file

    from leakloss.atomic import atomic_directory

    tensors = {f"head.{k}": v.detach().cpu().contiguous() for k, v in head.state_dict().items()}
    opt = optimizer.state_dict()
    for pid, s in opt["state"].items():
        for key, value in s.items():
            tensors[f"opt.{pid}.{key}"] = torch.as_tensor(value).detach().cpu().contiguous()
    bad = [k for k, v in tensors.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:  # a diverged head saved here was resumed by every later run, which then failed the same way
        raise ValueError(f"not checkpointing non-finite weights ({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''})")
    with atomic_directory(folder, owned=CHECKPOINT_FILES) as tmp:  # never a folder of someone else's files
        save_file(tensors, str(tmp / "checkpoint.safetensors"))
        (tmp / "state.json").write_text(json.dumps(state), encoding="utf-8")


def load_checkpoint(folder: Path, head, optimizer) -> dict | None:
    from safetensors.torch import load_file

    if not (folder / "state.json").exists():
        return None
    tensors = load_file(str(folder / "checkpoint.safetensors"))
    bad = [k for k, v in tensors.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:  # written before checkpoints refused NaN weights: resuming it fails again at every rerun
        raise ValueError(f"it holds non-finite weights ({', '.join(bad[:3])}): the run that wrote it diverged")
    head.load_state_dict({k[5:]: v for k, v in tensors.items() if k.startswith("head.")})
    opt = optimizer.state_dict()
    for pid in (pid for group in opt["param_groups"] for pid in group["params"]):  # every group's moments
        keys = [k for k in tensors if k.startswith(f"opt.{pid}.")]
        if keys:
            opt["state"][pid] = {k.split(".", 2)[2]: tensors[k] for k in keys}
    optimizer.load_state_dict(opt)
    return json.loads((folder / "state.json").read_text(encoding="utf-8"))


def check_resumable(ckpt_dir: Path, identity: dict) -> None:
    """:class:`~leakloss.checks.ResumeError` when ``ckpt_dir`` holds a checkpoint that cannot be read or that a
    run on other data or settings wrote (continuing from it would ship its weights under this run's card); the
    run it recorded (``state.json``'s ``"run"``) is compared by :func:`~leakloss.checks.check_same_run`."""
    state_file = ckpt_dir / "state.json"
    if not state_file.exists():
        return
    check_same_run(state_file, identity, where=f"checkpoint_dir={ckpt_dir}", values=False,
                   remedy="delete it, or give another checkpoint_dir, to start afresh")


def check_run_folders(out_dir, owned, checkpoint_dir) -> None:
    """:class:`~leakloss.checks.SettingsError` unless a recognizer training may replace ``out_dir`` (it holds only
    ``owned`` files: ``out_dir=.`` emptied the folder) and ``checkpoint_dir`` (only checkpoint files), and the two
    are separate folders (the saves replaced each other). Shared by the Whisper and the wav2vec2 trainings."""
    from leakloss.atomic import replace_problem
    from leakloss.checks import SettingsError

    for key, folder, files in (("out_dir", out_dir, owned), ("checkpoint_dir", checkpoint_dir, CHECKPOINT_FILES)):
        problem = replace_problem(Path(str(folder)).expanduser(), files)
        if problem is not None:
            raise SettingsError(f"{key}: {problem}")
    ckpt, out = (Path(str(p)).expanduser().resolve() for p in (checkpoint_dir, out_dir))
    if ckpt == out or out in ckpt.parents or ckpt in out.parents:
        raise SettingsError(f"checkpoint_dir ({ckpt}) and out_dir ({out}) must be separate folders, not one "
                            "inside the other")
