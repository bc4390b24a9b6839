"""experiment=whisper_frame: the reference-free frame head on a Whisper recognizer's encoder states."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from leakloss.config import compose_config
from leakloss.heads import RawConvHead, load_head

ROOT = Path(__file__).resolve().parents[2]


def test_the_experiment_trains_only_the_frame_head_on_wb_with_real_speech_negatives():
    cfg = compose_config("train_heads", ["experiment=whisper_frame"])
    assert list(cfg.heads) == ["rawconv"] and dict(cfg.recognizer) == {"a": "wb", "b": "wb"}
    hcfg = cfg.heads.rawconv
    assert hcfg.recipe.real_speech is True and hcfg.recognizer == "a"
    from leakloss.penalty import SHIPPED_HEADS

    shipped = json.loads((SHIPPED_HEADS / "rawconv.json").read_text(encoding="utf-8"))
    assert hcfg.frame_layer == shipped["features"]["layer"] == 4  # the experiment retrains the shipped head
    assert hcfg.max_minutes > 0 and hcfg.resume is True
    # every voice family the corpus has: the Festival/flite training voices, the unseen family held out
    assert "flite-awb" in cfg.data.recorded_voices and "fest-slt" in cfg.data.heldout_recorded_voices
    assert not set(cfg.data.recorded_voices) & set(cfg.data.heldout_recorded_voices)


@pytest.mark.parametrize("budget", ["0", "nan"])
def test_a_time_budget_that_trains_nothing_is_refused(budget, tmp_path):
    from leakloss.checks import SettingsError
    from train_heads.pipeline import check_settings

    cfg = compose_config("train_heads", ["experiment=whisper_frame", f"heads.rawconv.max_minutes={budget}",
                                         f"out_dir={tmp_path / 'out'}", f"export_dir={tmp_path / 'export'}"])
    with pytest.raises(SettingsError, match="max_minutes"):
        check_settings(cfg)


@pytest.mark.slow
def test_whisper_frame_on_w_end_to_end(tmp_path):
    """A tiny run on recognizer w (espeak pairs of 6 sentences, 2 real training-speaker clips with one augmented
    copy each, short vowels of one sentence by one teacher voice, 2 epochs): a
    loadable head whose card names w and its frames, and a LeakPenalty that loads on it by itself."""
    from leakloss.acoustic.recognizer import Recognizer, RecognizerLoadError

    try:
        Recognizer.load("w")
    except (RecognizerLoadError, FileNotFoundError) as err:
        pytest.skip(f"recognizer w not loadable here: {err}")
    out = subprocess.run(
        [sys.executable, "-m", "train_heads", "experiment=whisper_frame", "recognizer.a=w", "recognizer.b=w",
         "data.max_sentences=6", "data.short_vowel_sentences=1", "data.short_vowel_train_sentences=1",
         "data.short_vowel_teacher_voices=1",
         "data.recorded_voices=[]", "data.heldout_recorded_voices=[]", "data.real_speech_clips=2",
         # every path once, at its smallest (the suite's slowest test otherwise: 170 s on 2 cores, 127-149 s with
         # every teacher voice's short vowels)
         "heads.rawconv.recipe.real_augment_copies=1",
         "heads.rawconv.max_epochs=2", "heads.rawconv.max_minutes=3", "logger=none", "progress=false",
         f"cache_dir={tmp_path / 'cache'}", f"export_dir={tmp_path / 'export'}", f"out_dir={tmp_path / 'out'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=3000)
    assert out.returncode == 0, out.stderr[-3000:]
    head, card = load_head(tmp_path / "export" / "rawconv")
    assert isinstance(head, RawConvHead) and card.recognizer.startswith("w@")
    assert card.features["source"] == "whisper-states" and card.features["hop_s"] == pytest.approx(0.02)
    assert card.features["channels"] == head.in_channels == 384
    assert card.training["steps"] > 0 and card.training["max_minutes"] == 3
    from leakloss.speech.real import real_clips

    if real_clips(split="train"):  # the shared recordings are optional; when present, they are used
        assert "real training-speaker clips added (1 augmented copies each" in out.stdout
        assert "cut-schwa sites" in out.stdout
    else:
        assert "no real recordings of training speakers found" in out.stderr
    rows = json.loads((tmp_path / "export" / "heldout.json").read_text())
    assert sum(r["total"] for r in rows) > 0
    from leakloss.penalty import LeakPenalty

    penalty = LeakPenalty.load(head_path=tmp_path / "export" / "rawconv.safetensors")
    assert penalty.recognizer.name == card.recognizer and penalty.frame_hop_s == pytest.approx(0.02)
    # a rerun resumes from the last checkpoint (its budget counts): no second full training
    again = subprocess.run(out.args, cwd=ROOT, capture_output=True, text=True, timeout=3000)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from" in again.stdout


def test_real_rows_are_drawn_repeat_times_in_training_and_once_elsewhere():
    import torch

    from leakloss.pairs.features import ConvTable
    from train_heads.recipes import ConvFrameRecipe, with_real_rows

    def table(splits):
        return ConvTable([torch.zeros(2, 3)] * len(splits), [torch.ones(3, dtype=torch.bool)] * len(splits),
                         torch.zeros(len(splits)), [{"split": s} for s in splits])

    out = with_real_rows(table(["train", "dev"]), table(["train", "train", "dev"]), repeat=4)
    assert [m["split"] for m in out.meta].count("train") == 1 + 2 * 4
    assert [m["split"] for m in out.meta].count("dev") == 2 and len(out.feats) == len(out.masks) == len(out.y)
    assert len(with_real_rows(table(["train"]), table(["train"]), repeat=1)) == 2
    with pytest.raises(ValueError, match="real_repeat"):
        ConvFrameRecipe(real_speech=True, real_repeat=0)
