"""One home for each constant of the Hindi-base F5: its dims (configs and code), the mel floor and FFT size."""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from leakloss.config import compose_config, config_dir

pytest.importorskip("f5_tts")

from train_f5.model import HindiBaseArch, hindi_base_f5  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "f5_hindi_base"


def _model_dims(cfg) -> dict:
    model = OmegaConf.to_container(cfg.model, resolve=True)
    return {k: v for k, v in model.items() if k not in ("_target_", "seed")}


def test_the_configs_and_the_code_state_the_same_hindi_base_dims():
    code = asdict(HindiBaseArch())
    preset = OmegaConf.to_container(compose_config("finetune_f5", ["f5=embedded"]).f5.arch, resolve=True)
    assert preset == code
    assert _model_dims(compose_config("train_f5")) == code
    defaults = {k: p.default for k, p in inspect.signature(hindi_base_f5).parameters.items() if k in code}
    assert defaults == code


def test_train_f5_yaml_reuses_the_embedded_preset_instead_of_copying_its_dims():
    raw = OmegaConf.load(Path(config_dir()) / "train_f5.yaml")
    assert {"f5": "embedded"} in list(raw.defaults)
    for key in asdict(HindiBaseArch()):
        assert OmegaConf.to_container(raw.model)[key] == f"${{f5.arch.{key}}}", key
    # an override of the model still wins over the preset (the tests' tiny runs use these)
    assert compose_config("train_f5", ["model.dim=32", "model.depth=1"]).model.dim == 32


def test_hindi_base_f5_defaults_build_the_preset_dims():
    model = hindi_base_f5()
    dit = model.transformer
    assert dit.dim == HindiBaseArch.dim and dit.depth == HindiBaseArch.depth
    assert len(dit.transformer_blocks) == HindiBaseArch.depth
    assert dit.transformer_blocks[0].attn.heads == HindiBaseArch.heads


@pytest.mark.skipif(not (SHIPPED / "model.json").is_file(), reason="no shipped Hindi base")
def test_the_shipped_checkpoint_loads_and_the_config_still_describes_it():
    """Saved models carry their dims in the card; a run of today's config writes the same card architecture
    and resumes the committed training checkpoint."""
    from hydra.utils import instantiate
    from safetensors.torch import load_file

    from train_f5.effect import load_base

    model, arch, card = load_base(SHIPPED)  # strict load of the shipped EMA weights
    assert sum(p.numel() for p in model.parameters()) == card["parameters"]
    # a card written before text_embedding_average_upsampling existed lacks it: F5's default layout (False)
    written = {"text_embedding_average_upsampling": False} | card["architecture"]
    assert written == OmegaConf.to_container(compose_config("train_f5").model, resolve=True)
    assert {k: arch.get(k, getattr(HindiBaseArch, k)) for k in asdict(HindiBaseArch())} == asdict(HindiBaseArch())
    fresh = instantiate(compose_config("train_f5").model)
    fresh.load_state_dict(load_file(str(SHIPPED / "model.safetensors")))  # strict: what `python -m train_f5` resumes from
    assert json.loads((SHIPPED / "model.json").read_text(encoding="utf-8"))["mel"] == _mel_description()


def _mel_description() -> str:
    from leakloss.constants import MEL_DESCRIPTION

    return MEL_DESCRIPTION


def test_mel_description_is_what_the_cards_always_said():
    assert _mel_description() == "vocos 24 kHz, n_fft 1024, hop 256, 100 bins"


def test_batches_are_padded_with_the_vocoders_silent_frame():
    from leakloss.constants import MEL_FLOOR
    from leakloss.vocoder import log_mel, silence_past_lengths
    from train_f5.data import joined_batches
    from train_f5.effect import _pad

    silent = math.log(MEL_FLOOR)
    mel, lens = _pad([torch.zeros(3, 100), torch.zeros(5, 100)])
    assert lens.tolist() == [3, 5] and torch.all(mel[0, 3:] == silent) and torch.all(mel[:, :3] == 0)
    assert torch.equal(mel[0, 3:], silence_past_lengths(torch.zeros(1, 5, 100), torch.tensor([3]))[0, 3:5])
    assert torch.all(log_mel(torch.zeros(1, 2400)) == silent)  # the floor of the mels themselves
    items = [(torch.zeros(4 + 3 * i, 100), "क", []) for i in range(3)]
    batch, lens, _, _ = next(joined_batches(["v"] * 3, items.__getitem__, 10_000, 0.0, 0))
    for k in range(batch.shape[0]):
        assert torch.all(batch[k, int(lens[k]):] == silent) and torch.all(batch[k, : int(lens[k])] == 0)


def test_f5s_mel_settings_are_the_vocoders():
    from integrations.f5_tts import MEL_SPEC_KWARGS
    from leakloss.constants import MEL_BINS, MEL_HOP, MEL_N_FFT, MEL_SAMPLE_RATE

    assert MEL_SPEC_KWARGS["n_fft"] == MEL_SPEC_KWARGS["win_length"] == MEL_N_FFT
    assert (MEL_SPEC_KWARGS["hop_length"], MEL_SPEC_KWARGS["n_mel_channels"]) == (MEL_HOP, MEL_BINS)
    assert MEL_SPEC_KWARGS["target_sample_rate"] == MEL_SAMPLE_RATE


def test_average_upsampling_spreads_each_characters_text_state_evenly_over_the_frames():
    """``text_embedding_average_upsampling`` (F5's own option) reaches the DiT: each of 3 characters holds 4 of
    12 frames, one state per character; off, F5's text-then-filler layout."""
    spread = hindi_base_f5(dim=32, depth=1, heads=2, dim_head=16, text_dim=16, conv_layers=1,
                           text_embedding_average_upsampling=True)
    plain = hindi_base_f5(dim=32, depth=1, heads=2, dim_head=16, text_dim=16, conv_layers=1,
                          text_embedding_average_upsampling=False)
    text = torch.tensor([[5, 9, 13]])
    states = spread.transformer.text_embed(text, seq_len=12)[0]
    for k in range(3):
        block = states[4 * k: 4 * k + 4]
        assert torch.allclose(block, block[:1].expand_as(block))
    assert not torch.allclose(states[0], states[4])
    filler = plain.transformer.text_embed(text, seq_len=12)[0]
    assert torch.allclose(filler[3:], torch.zeros_like(filler[3:]))  # F5's filler is masked to zero
    assert not plain.transformer.text_embed.average_upsampling


def test_average_upsampling_is_a_switch_written_to_the_card():
    from leakloss.checks import SettingsError

    with pytest.raises(SettingsError, match="true or false"):
        hindi_base_f5(dim=32, depth=1, heads=2, dim_head=16, text_dim=16, text_embedding_average_upsampling="yes")
    cfg = compose_config("train_f5", ["model.text_embedding_average_upsampling=false"])
    assert OmegaConf.to_container(cfg.model, resolve=True)["text_embedding_average_upsampling"] is False


def test_a_card_written_before_a_switch_existed_reads_as_it_was_trained():
    from integrations.f5_tts import LATER_ARCH_KEYS, written_architecture

    old = {"dim": 192, "depth": 4}
    assert written_architecture(old) == old | {"text_embedding_average_upsampling": False}
    assert written_architecture(old | {"text_embedding_average_upsampling": True})["text_embedding_average_upsampling"]
    assert set(LATER_ARCH_KEYS) <= set(asdict(HindiBaseArch()))  # each later key is a real switch of the model
