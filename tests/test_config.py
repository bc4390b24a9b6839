"""The shipped configs: package data found with importlib.resources, and every group option composes."""

from pathlib import Path

import lightning as L
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from leakloss.config import ENTRY_CONFIGS, compose_config, config_dir

CONF = Path(config_dir())
# Which entry config uses each group (the head group is mounted as head@heads.NAME).
GROUPS = {"train_heads": ["data", "recognizer", "trainer", "logger", "experiment"],
          "train_recognizer": ["recognizer_arch", "trainer"],
          "finetune_f5": ["f5", "trainer"]}
REQUIRED = {"data/manifest": ["data.manifest=x.jsonl"]}


def options():
    for entry, groups in GROUPS.items():
        for group in groups:
            for yaml in sorted((CONF / group).glob("*.yaml")):
                yield entry, group, yaml.stem


def test_configs_are_package_data_inside_leakloss():
    assert CONF.parent.name == "leakloss" and (CONF / "train_heads.yaml").is_file()
    assert all((CONF / f"{name}.yaml").is_file() for name in ENTRY_CONFIGS)


def test_every_yaml_belongs_to_a_tested_group():
    tested = {group for groups in GROUPS.values() for group in groups} | {"head"}
    groups = {p.parent.name for p in CONF.rglob("*.yaml") if p.parent != CONF}
    assert groups == tested


@pytest.mark.parametrize("entry, group, option", list(options()))
def test_every_group_option_composes_and_instantiates(entry, group, option, monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = compose_config(entry, [f"{group}={option}", *REQUIRED.get(f"{group}/{option}", [])])
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    if trainer_cfg.get("accelerator") == "gpu" and not torch.cuda.is_available():
        trainer_cfg["accelerator"] = "cpu"
    trainer_cfg.update(logger=False, enable_checkpointing=False, default_root_dir=str(tmp_path))
    assert isinstance(instantiate(trainer_cfg), L.Trainer)
    if entry == "train_recognizer":
        assert instantiate(cfg.recognizer_arch.arch) is not None
    if group == "logger" and cfg.logger and "_target_" in cfg.logger:
        assert instantiate(cfg.logger, save_dir=str(tmp_path)) is not None


def test_train_vocoder_config_instantiates_its_vocoder():
    pytest.importorskip("vocos")
    cfg = compose_config("train_vocoder", ["vocoder.dim=8", "vocoder.intermediate_dim=16", "vocoder.num_layers=1"])
    vocoder = instantiate(cfg.vocoder)
    mel = torch.randn(1, 5, 100)
    assert vocoder.generate(mel).shape[-1] == 5 * 256


def test_compose_reports_a_bad_override():
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose_config("train_heads", ["trainer=nope"])
