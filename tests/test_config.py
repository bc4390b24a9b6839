"""The shipped configs: package data found with importlib.resources, and every group option composes."""

from pathlib import Path

import lightning as L
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from leakloss.checks import SettingsError, UntrainedError
from leakloss.config import ENTRY_CONFIGS, compose_config, config_dir, run_unsaved_fit

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


@pytest.mark.parametrize("entry", ENTRY_CONFIGS)
def test_every_entry_config_composes_and_resolves(entry):
    cfg = compose_config(entry)
    resolved = OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves (??? is filled at run time)
    assert isinstance(resolved, dict) and resolved


def test_whisper_recognizer_config_builds_its_head():
    from leakloss.acoustic.recognizer import EMBEDDED
    from leakloss.acoustic.whisper_recognizer import WhisperPhoneHead

    cfg = compose_config("train_whisper_recognizer", ["head.hidden=16", "head.lstm_layers=1"])
    head = instantiate(cfg.head, n_states=5, dim=384, vocab_size=60)
    assert isinstance(head, WhisperPhoneHead) and head.config["hidden"] == 16 and head.config["dropout"] == 0.15
    assert cfg.name in EMBEDDED and Path(cfg.out_dir).parts[-3:] == ("assets", "recognizers", cfg.name)
    assert cfg.max_minutes > 0 and cfg.warmup_steps < cfg.max_steps


def test_override_problem_names_a_mistyped_key_a_bad_group_and_a_run_dir_under_a_file(tmp_path):
    from leakloss.config import override_problem

    assert override_problem("train_heads", ["experiment=smoke"]) is None
    assert override_problem("train_heads", ["--cfg", "job"]) is None  # Hydra's own flags: left to Hydra
    assert override_problem("train_heads", ["nosuchkey=1"]).startswith("nosuchkey=1: Could not override 'nosuchkey'")
    assert "experiment=nosuch" in override_problem("train_heads", ["experiment=nosuch"])
    (tmp_path / "file").write_text("x")
    problem = override_problem("train_vocoder", [f"hydra.run.dir={tmp_path / 'file' / 'run'}"])
    assert problem.startswith("hydra.run.dir ") and "is not a folder" in problem


@pytest.mark.parametrize("module", ["train_heads", "train_recognizers", "train_recognizers.whisper", "train_vocoder",
                                    "train_f5", "integrations.finetune_f5"])
def test_python_dash_m_entry_points_report_a_mistyped_override_in_one_line(module, tmp_path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", module, "nosuchkey=1", f"hydra.run.dir={tmp_path / 'run'}"], cwd=root,
                       env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]  # Hydra printed a multi-line report and exited 1
    assert r.stderr.strip().splitlines() == [r.stderr.strip().splitlines()[0]]
    assert r.stderr.startswith("error: nosuchkey=1 ") and "Could not override 'nosuchkey'" in r.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("clip", ["nan", "-1"])
def test_check_trainer_refuses_a_gradient_clip_lightning_would_fail_on_mid_training(clip):
    """gradient_clip_val=nan built a trainer and failed inside the first optimizer step, after the corpus."""
    from leakloss.checks import SettingsError
    from leakloss.config import check_trainer, compose_config

    cfg = compose_config("train_heads", [f"+trainer.gradient_clip_val={clip}"])
    with pytest.raises(SettingsError, match=r"trainer.gradient_clip_val must be a finite number >= 0 or null, got"):
        check_trainer(cfg.trainer)
    check_trainer(compose_config("train_heads").trainer)  # the shipped settings pass


def test_defaults_that_retrain_a_shipped_model_name_the_package_copy(tmp_path, monkeypatch):
    """From any cwd (a wheel install) the default outputs are the models the library loads: a relative
    leakloss/assets/... wrote a stray tree under the cwd and left the shipped model unchanged."""
    from pathlib import Path

    from leakloss.acoustic.recognizer import EMBEDDED_DIR
    from leakloss.config import compose_config

    monkeypatch.chdir(tmp_path)
    assert Path(compose_config("train_recognizer", ["recognizer_arch=b"]).out_dir) == EMBEDDED_DIR / "b"
    assert Path(compose_config("train_whisper_recognizer").out_dir) == EMBEDDED_DIR / "w"
    export = Path(compose_config("train_heads", ["experiment=default"]).export_dir)
    assert export.is_absolute() and export == EMBEDDED_DIR.parent / "heads" and (export / "deletion.json").is_file()
    # the committed F5 Hindi base: "no checkpoint at checkpoints/f5_hindi_base/..." outside the repository root
    monkeypatch.delenv("LEAKLOSS_F5_HINDI_BASE", raising=False)
    base = Path(compose_config("finetune_f5", ["f5=embedded"]).f5.checkpoint)
    assert base.is_absolute() and base.is_file()
    assert Path(compose_config("train_f5").out_dir) == base.parent


def test_shared_data_defaults_do_not_depend_on_the_cwd(tmp_path, monkeypatch):
    """``../shared/...`` was read from the cwd: from outside the repository root the whisper recognizer
    trained without its extra sentences and refused its real clips."""
    from pathlib import Path

    from leakloss.config import compose_config
    from leakloss.paths import shared_path
    from leakloss.speech.real import default_dir

    monkeypatch.delenv("LEAKLOSS_SHARED", raising=False)
    repo_shared = Path(__file__).resolve().parents[2] / "shared"
    monkeypatch.chdir(tmp_path)
    cfg = compose_config("train_whisper_recognizer")
    assert Path(cfg.real_dir) == repo_shared / "data" / "real-nepali-speech" == default_dir()
    assert Path(cfg.extra_sentences) == repo_shared / "data" / "nepali-prompts" / "prompts.tsv"
    monkeypatch.setenv("LEAKLOSS_SHARED", str(tmp_path / "elsewhere"))
    assert Path(compose_config("train_whisper_recognizer").real_dir) == tmp_path / "elsewhere" / "data" / "real-nepali-speech"
    monkeypatch.setenv("LEAKLOSS_SHARED", "rel")  # a relative one is read from the cwd once, then absolute
    assert Path(shared_path("x")) == tmp_path / "rel" / "x"


@pytest.mark.parametrize("raised, code, says", [
    (SettingsError("lr: must be > 0, got 0"), 2, "error: lr: must be > 0, got 0"),
    (UntrainedError("the fit made no step"), 1, "error: the fit made no step"),
    (KeyboardInterrupt(), 130, "error: interrupted: nothing saved"),
])
def test_run_unsaved_fit_turns_refusals_and_ctrl_c_into_one_error_line(raised, code, says, capsys):
    def run(cfg):
        raise raised

    with pytest.raises(SystemExit) as exit_info:
        run_unsaved_fit(run, {})
    assert exit_info.value.code == code
    err = capsys.readouterr().err
    assert err.startswith(says) and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_run_unsaved_fit_runs_the_fit_once():
    calls = []
    run_unsaved_fit(calls.append, {"lr": 1})
    assert calls == [{"lr": 1}]
