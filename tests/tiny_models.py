"""Tiny recognizer/head folders and test clips on disk, for the CLI and batch tests (no embedded models needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from leakloss.heads import HeadCard, MLPHead, save_head
from tests.conftest import build_tiny_recognizer

TEXT = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"


def save_tiny_models(root: Path) -> dict[str, Path]:
    """``root/a``, ``root/b`` (save_pretrained folders + vocab.json) and ``root/heads``; returns the paths."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("a", "b"):
        rec = build_tiny_recognizer(seed=1 if name == "a" else 2)
        rec.model.save_pretrained(root / name)
        (root / name / "vocab.json").write_text(json.dumps(rec.vocab, ensure_ascii=False), encoding="utf-8")
    for kind in ("deletion", "quality"):
        save_head(root / "heads" / kind, MLPHead(), HeadCard(kind, {}, "b", "1"))
    return {"a": root / "a", "b": root / "b", "heads": root / "heads"}


def speechlike(seconds: float = 1.0, rate: int = 16_000, seed: int = 0, amp: float = 0.3) -> np.ndarray:
    """A voiced-sounding test clip ``[t]``: a few harmonics with a slow envelope plus a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    f0 = 120 + 20 * np.sin(2 * np.pi * 1.5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    x = sum(np.sin(k * phase) / k for k in range(1, 6)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    x = x / np.abs(x).max() * amp + 0.01 * rng.standard_normal(t.shape)
    return x.astype(np.float32)


def write_clip(path: Path, seconds: float = 1.0, seed: int = 0, **kw) -> Path:
    sf.write(path, speechlike(seconds, seed=seed, **kw), 16_000, subtype="PCM_16")
    return path


def truncate_wav(path: Path) -> Path:
    """Cut a WAV's data in half but keep its header (which still declares the full data size)."""
    data = path.read_bytes()
    path.write_bytes(data[: 44 + (len(data) - 44) // 2])
    return path


#: A tiny local Vocos folder's config.yaml: the released charactr/vocos-mel-24khz layout at small sizes.
TINY_VOCOS_CONFIG = """\
feature_extractor:
  class_path: vocos.feature_extractors.MelSpectrogramFeatures
  init_args: {sample_rate: 24000, n_fft: 1024, hop_length: 256, n_mels: 100, padding: center}
backbone:
  class_path: vocos.models.VocosBackbone
  init_args: {input_channels: 100, dim: 8, intermediate_dim: 16, num_layers: 1}
head:
  class_path: vocos.heads.ISTFTHead
  init_args: {dim: 8, n_fft: 1024, hop_length: 256, padding: same}
"""


def write_vocos_folder(folder: Path, weights: str = "model.safetensors", seed: int = 0):
    """A local Vocos folder (``config.yaml`` + ``model.safetensors`` or ``pytorch_model.bin``) of a tiny randomly
    initialised Vocos built by Vocos' own classes; returns that Vocos."""
    import torch
    from vocos import Vocos
    from vocos.feature_extractors import MelSpectrogramFeatures
    from vocos.heads import ISTFTHead
    from vocos.models import VocosBackbone

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    vocos = Vocos(MelSpectrogramFeatures(), VocosBackbone(100, 8, 16, 1), ISTFTHead(8, 1024, 256)).eval()
    (folder / "config.yaml").write_text(TINY_VOCOS_CONFIG, encoding="utf-8")
    state = {k: v.detach().clone().contiguous() for k, v in vocos.state_dict().items()}
    if weights == "model.safetensors":
        from safetensors.torch import save_file

        save_file(state, str(folder / weights))
    else:
        torch.save(state, folder / weights)
    return vocos
