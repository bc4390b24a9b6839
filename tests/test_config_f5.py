"""The f5 presets choose their backbone class by ``_target_`` (``hydra.utils.instantiate``), with the preset's arch."""

from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from leakloss.config import compose_config, config_dir

pytest.importorskip("f5_tts")

PRESETS = sorted(p.stem for p in (Path(config_dir()) / "f5").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_f5_preset_instantiates_its_backbone_with_its_arch(preset):
    from f5_tts.model import DiT

    from leakloss.constants import MEL_BINS

    f5 = compose_config("finetune_f5", [f"f5={preset}"]).f5
    assert "_target_" in f5.backbone and "_target_" not in f5.arch  # arch stays F5's own arch kwargs
    arch = OmegaConf.to_container(f5.arch, resolve=True)
    with torch.device("meta"):  # shapes only: Base is 336 M parameters
        dit = instantiate(f5.backbone, **arch, mel_dim=MEL_BINS, text_num_embeds=5)
    assert isinstance(dit, DiT) and dit.dim == arch["dim"] and len(dit.transformer_blocks) == arch["depth"]
    assert dit.text_embed.text_embed.weight.shape == (6, arch["text_dim"])  # F5 adds the filler row


def test_train_f5_composes_with_the_embedded_preset():
    cfg = compose_config("train_f5")
    assert cfg.f5.name == "hindi_base_f5" and cfg.model.dim == cfg.f5.arch.dim
