"""``python -m train_recognizers.whisper`` end to end on a tiny budget: a folder that Recognizer.load reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SENTENCES = ["नमस्ते।", "म घर जान्छु।", "आज राम्रो दिन हो।"]


@pytest.mark.slow
@pytest.mark.parametrize("encoder, own_length", [("tiny.en", False), ("base", True)])
def test_whisper_trainer_writes_a_loadable_recognizer(tmp_path, monkeypatch, encoder, own_length):
    from leakloss.acoustic.recognizer import EMBEDDED_DIR, Recognizer
    from leakloss.acoustic.whisper_models import WhisperModelNotFoundError, model_dir
    from leakloss.acoustic.whisper_recognizer import WhisperRecognizer, encoder_digest

    if not (EMBEDDED_DIR / "a" / "vocab.json").exists():
        pytest.skip("recognizer a's vocabulary is not built")
    monkeypatch.setenv("LEAKLOSS_CACHE", str(tmp_path / "lc"))  # base is joined here, not in the user's cache
    try:
        encoder_dir = model_dir(encoder)
    except WhisperModelNotFoundError as err:
        pytest.skip(str(err))
    (tmp_path / "s.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-m", "train_recognizers.whisper", f"sentences={tmp_path / 's.txt'}",
         f"cache_dir={tmp_path / 'c'}", "max_minutes=0.05", "roles=[teacher]", "recorded_readings=0",
         "augmentations=0", f"out_dir={tmp_path / 'w'}", f"hydra.run.dir={tmp_path / 'h'}", "head.hidden=16",
         "head.lstm_layers=1", "batch_size=2", "warmup_steps=2", "num_threads=1", f"encoder={encoder}",
         f"own_length={str(own_length).lower()}"],
        check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    card = json.loads((tmp_path / "w" / "card.json").read_text(encoding="utf-8"))
    # 3 sentences: 1 held out, 2 read by the teacher, no recorded voice (none was asked for)
    assert card["train_sentences"] == 2 and card["heldout_sentences"] == 1 and card["readings"] == 2
    assert card["groups"] == {"teacher": 2} and card["recorded_voices"] == [] and card["steps"] > 0
    assert card["final_loss"] is not None and card["final_loss"] == card["final_loss"]  # finite, not NaN
    assert card["real_speech_in_training"] is False
    config = json.loads((tmp_path / "w" / "config.json").read_text(encoding="utf-8"))
    assert config["encoder_sha256"] == encoder_digest(encoder_dir) and config["head"]["hidden"] == 16
    assert config["encoder_name"] == card["encoder"] == encoder and config["own_length"] is own_length
    # cached encoder states and a checkpoint to resume from, all under the cache dir
    assert len(list((tmp_path / "c" / "whisper-states").rglob("*.npy"))) == 2
    assert (tmp_path / "c" / "checkpoints" / "whisper-w" / "state.json").is_file()

    rec = Recognizer.load(str(tmp_path / "w"))
    assert isinstance(rec, WhisperRecognizer) and "@" in rec.name
    assert rec.encoder_name == encoder and rec.frames.own_length is own_length
    assert rec.frames.dim == {"tiny.en": 384, "base": 512}[encoder] == rec.head.config["dim"]
    with torch.no_grad():
        log_probs, frames = rec(torch.zeros(1, 16_000))
    assert log_probs.shape == (1, 50, len(rec.vocab)) and torch.isfinite(log_probs).all()
    assert frames.tolist() == [50]


def test_recorded_training_voices_refuse_the_unseen_family():
    from leakloss.speech import festival
    from train_recognizers.whisper import recorded_training_voices

    for name in festival.UNSEEN_VOICES + festival.UNSEEN_SPEAKER_TWINS:
        with pytest.raises(ValueError, match="kept out"):
            recorded_training_voices(["fest-kal", name])
    assert {v.name for v in recorded_training_voices()} <= set(festival.TRAINING_VOICES)
    assert [v.name for v in recorded_training_voices([])] == []


def test_the_readme_card_describes_what_was_trained():
    """It named espeak Hindi/variant, Piper and a 2-layer LSTM whatever the run trained on."""
    import json
    from pathlib import Path

    from train_recognizers.whisper import card_markdown

    shipped = json.loads((Path(__file__).resolve().parents[2] / "leakloss/assets/recognizers/w/card.json")
                         .read_text(encoding="utf-8"))
    card = dict(shipped, groups={"teacher": 5}, recorded_voices=[], head=dict(shipped["head"], lstm_layers=1),
                sentences_source="mine.txt")
    card.pop("real_speech", None)
    text = card_markdown(card)
    assert "A 1-layer bidirectional LSTM" in text and "training sentences (mine.txt)" in text
    assert "voice groups: teacher; recorded voices: none;" in text
    assert "Piper" not in text and "Hindi" not in text and "real speech: none" in text
    assert "voice groups: festival-diphone" in card_markdown(shipped)  # an older card (no sentences_source) still reads
