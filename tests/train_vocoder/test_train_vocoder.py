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
