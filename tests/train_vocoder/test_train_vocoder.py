"""The vocoder trainer end to end on a tiny budget: it writes a loadable vocoder with a complete card."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vocos")


@pytest.mark.slow
def test_train_vocoder_writes_a_loadable_vocoder(tmp_path):
    from leakloss.config import compose_config
    from leakloss.vocoder import MelToWave
    from train_vocoder.__main__ import run

    run(compose_config("train_vocoder", ["minutes=0.05", "audio_minutes=0.2", "vocoder.dim=16", "vocoder.num_layers=1",
                                         "vocoder.intermediate_dim=48", "batch=2", "heldout_sentences=1",
                                         f"out={tmp_path / 'v'}"]))
    card = json.loads((tmp_path / "v.json").read_text())
    assert card["steps"] > 0 and card["dim"] == 16 and card["heldout_per_recognizer_a"]["sentences"] == 1
    assert 0 <= card["heldout_per_recognizer_a"]["vocoded"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.json", "v.safetensors"]
    assert MelToWave.embedded(tmp_path / "v").card == card


@pytest.mark.parametrize("override, message", [
    ("batch=0", r"batch must be a whole number >= 1, got 0"),
    ("lr=nan", r"lr must be a finite number in \(0, inf\), got nan"),
    ("minutes=-1", r"minutes must be a finite number in \(0, inf\)"),
    ("frames=0", r"frames must be a whole number >= 5"),
    ("frames=4", r"frames must be a whole number >= 5"),  # failed in torch.stft after the synthesis
    ("seed=-1", r"seed must be a whole number in \[0, 4294967295\], got -1"),
    ("vocoder.frozen=true", r"vocoder: it has nothing to train"),  # failed in backward() after the synthesis
    # the model's own settings: were Hydra's report (exit 1) after the audio was synthesised
    ("vocoder.dim=0", r"vocoder: ValueError: dim must be a whole number >= 1, got 0"),
    ("vocoder.num_layers=-1", r"vocoder: ValueError: num_layers must be a whole number >= 1, got -1"),
    ("vocoder.intermediate_dim=abc", r"vocoder: ValueError: intermediate_dim must be a whole number >= 1, got 'abc'"),
    ("vocoder._target_=nope.Nope", r"vocoder: ImportError: Error loading 'nope.Nope': ModuleNotFoundError"),
])
def test_settings_that_cannot_work_are_refused_before_any_audio(override, message, monkeypatch):
    import train_vocoder.__main__ as entry
    from leakloss.checks import SettingsError
    from leakloss.config import compose_config

    monkeypatch.setattr(entry, "readings", lambda *a, **k: pytest.fail("audio was synthesised"))
    with pytest.raises(SettingsError, match=message):
        entry.run(compose_config("train_vocoder", [override]))


def test_out_is_a_file_stem_in_a_writable_folder(tmp_path, monkeypatch):
    import train_vocoder.__main__ as entry
    from leakloss.checks import SettingsError
    from leakloss.config import compose_config

    monkeypatch.setattr(entry, "readings", lambda *a, **k: pytest.fail("audio was synthesised"))
    with pytest.raises(SettingsError, match="give a file stem"):
        entry.run(compose_config("train_vocoder", [f"out={tmp_path}"]))
    (tmp_path / "file").write_text("x")
    with pytest.raises(SettingsError, match="is not a folder"):
        entry.run(compose_config("train_vocoder", [f"out={tmp_path / 'file' / 'sub' / 'v'}"]))
    with pytest.raises(SettingsError, match=r"no '\.' in its last part"):  # run-0.5 wrote run-0.safetensors
        entry.run(compose_config("train_vocoder", [f"out={tmp_path / 'run-0.5'}"]))
    entry.check_settings(compose_config("train_vocoder"))  # the shipped settings pass


def test_the_card_gives_the_built_models_sizes_and_the_sentences_really_read(tmp_path, monkeypatch):
    """``intermediate_dim: null`` (the tiny factory's 2 * dim) wrote a card that could not be loaded, and the card
    hashed the whole training split although only the first sentences were read."""
    import hashlib

    import torch

    import train_vocoder.__main__ as entry
    from leakloss.config import compose_config
    from leakloss.speech.corpus import builtin_sentences, split_sentences
    from leakloss.vocoder import MelToWave

    monkeypatch.setattr(entry, "readings", lambda *a, **k: [torch.randn(24_000) * 0.1] * 3)
    monkeypatch.setattr(entry, "heldout_per", lambda *a, **k: (0.1, 0.2, 1))
    card = entry.run(compose_config("train_vocoder", ["minutes=0.005", "vocoder.dim=8", "vocoder.num_layers=1",
                                                      "vocoder.intermediate_dim=null", "batch=1", "frames=5",
                                                      f"out={tmp_path / 'v'}"]))
    assert (card["dim"], card["intermediate_dim"], card["num_layers"]) == (8, 16, 1)
    assert MelToWave.embedded(tmp_path / "v").card == card
    train, _ = split_sentences(builtin_sentences())
    assert card["train_sentences"] == 3 and len(card["train_voices"]) == 3
    assert card["train_sentences_sha256"] == hashlib.sha256("\n".join(train[:3]).encode()).hexdigest()
    assert card["training_minutes"] <= card["run_minutes"]


def test_a_diverging_fit_stops_at_its_first_nan_loss(tmp_path, monkeypatch):
    import torch

    import train_vocoder.__main__ as entry
    from leakloss.checks import UntrainedError
    from leakloss.config import compose_config

    monkeypatch.setattr(entry, "readings", lambda *a, **k: [torch.randn(24_000) * 0.1])
    monkeypatch.setattr(entry, "heldout_per", lambda *a, **k: pytest.fail("a diverged fit went on to the check"))
    with pytest.raises(UntrainedError, match=r"the loss is not finite at step \d+ \(the training diverged"):
        entry.run(compose_config("train_vocoder", ["minutes=1", "lr=1e30", "vocoder.dim=8", "vocoder.num_layers=1",
                                                   "batch=1", "frames=5", f"out={tmp_path / 'v'}"]))
    assert list(tmp_path.iterdir()) == []


def test_a_folder_in_the_way_of_the_card_is_refused_before_any_audio(tmp_path, monkeypatch):
    """It was found after the whole training, leaving new weights beside no card."""
    import train_vocoder.__main__ as entry
    from leakloss.checks import SettingsError
    from leakloss.config import compose_config

    monkeypatch.setattr(entry, "readings", lambda *a, **k: pytest.fail("audio was synthesised"))
    (tmp_path / "v.json").mkdir()
    with pytest.raises(SettingsError, match=r"v\.json is in the way"):
        entry.run(compose_config("train_vocoder", [f"out={tmp_path / 'v'}"]))


def test_a_run_that_took_no_step_saves_nothing(tmp_path, monkeypatch):
    """Its default output is the shipped vocoder: a budget too small for one step saved an untrained one."""
    import torch

    import train_vocoder.__main__ as entry
    from leakloss.checks import UntrainedError
    from leakloss.config import compose_config

    monkeypatch.setattr(entry, "readings", lambda *a, **k: [torch.zeros(24_000)])
    with pytest.raises(UntrainedError, match="no training step ran"):
        entry.run(compose_config("train_vocoder", ["minutes=1e-9", "vocoder.dim=16", "vocoder.num_layers=1",
                                                   "vocoder.intermediate_dim=48", f"out={tmp_path / 'v'}"]))
    assert list(tmp_path.iterdir()) == []


def test_the_entry_point_prints_one_error_line_and_exits_2(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "train_vocoder", "lr=nan", f"out={tmp_path / 'v'}",
                        f"hydra.run.dir={tmp_path / 'h'}"], cwd=root, env=dict(os.environ, PYTHONPATH=str(root)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == "error: lr must be a finite number in (0, inf), got nan"
    assert "Traceback" not in r.stderr and not (tmp_path / "v.safetensors").exists()
