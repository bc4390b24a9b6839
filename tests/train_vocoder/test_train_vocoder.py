"""The vocoder trainer end to end on a tiny budget: it writes a loadable vocoder with a complete card."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vocos")


@pytest.mark.slow
def test_train_vocoder_writes_a_loadable_vocoder(tmp_path):
    from train_vocoder.__main__ import main

    from leakloss.vocoder import MelToWave

    main(["--minutes", "0.05", "--audio-minutes", "0.2", "--dim", "16", "--layers", "1", "--batch", "2",
          "--heldout-sentences", "1", "--out", str(tmp_path / "v")])
    card = json.loads((tmp_path / "v.json").read_text())
    assert card["steps"] > 0 and card["dim"] == 16 and card["heldout_per_recognizer_a"]["sentences"] == 1
    assert 0 <= card["heldout_per_recognizer_a"]["vocoded"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.json", "v.safetensors"]
    assert MelToWave.embedded(tmp_path / "v").card == card
