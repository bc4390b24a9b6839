"""`leakloss rerank`: best-of-N over candidate readings, never an unintelligible one; bad input is `error:`."""

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from leakloss.cli import app
from tests.conftest import needs_embedded

runner = CliRunner()
TEXT = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"


def _manifest(tmp_path, rows) -> str:
    path = tmp_path / "candidates.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@needs_embedded
def test_the_intelligible_reading_is_kept_over_noise_and_another_text(tmp_path):
    from leakloss.constants import SAMPLE_RATE
    from leakloss.speech.synth import HELDOUT_TEACHER_VOICE, speak_text

    sf.write(tmp_path / "good.wav", speak_text(TEXT, HELDOUT_TEACHER_VOICE).waveform.numpy(), SAMPLE_RATE)
    sf.write(tmp_path / "noise.wav", np.random.default_rng(0).normal(0, 0.1, SAMPLE_RATE * 2), SAMPLE_RATE)
    other = speak_text("तिमी यो दसैंमा घर कहिले आउँछौ?", HELDOUT_TEACHER_VOICE).waveform.numpy()
    sf.write(tmp_path / "other.wav", other, SAMPLE_RATE)
    manifest = _manifest(tmp_path, [{"text": TEXT, "candidates": ["noise.wav", "good.wav", "other.wav"]},
                                    {"text": TEXT, "candidates": ["noise.wav"]}])
    out = runner.invoke(app, ["rerank", manifest, "--json"])
    assert out.exit_code == 0, out.output
    assert out.stderr == ""
    first, second = (json.loads(line) for line in out.stdout.strip().splitlines())
    assert first["best"].endswith("good.wav") and first["reward"] > 0 and "candidate 1 of 3" in first["reason"]
    # each candidate's own status, as data (it was only in the prose reason)
    assert [(c["candidate"].rsplit("/", 1)[-1], c["status"]) for c in first["candidates"]] == [
        ("noise.wav", "unintelligible"), ("good.wav", "scored"), ("other.wav", "unintelligible")]
    assert first["candidates"][1]["reward"] == first["reward"] and first["candidates"][0]["reward"] == 0.0
    assert second["best"] is None and second["reward"] == 0.0 and "no candidate could be judged" in second["reason"]
    # a candidate's audio warnings (downmixed here) are said, as by `score` (they were dropped)
    sf.write(tmp_path / "good_stereo.wav", np.stack([speak_text(TEXT, HELDOUT_TEACHER_VOICE).waveform.numpy()] * 2, 1),
             SAMPLE_RATE)
    stereo = _manifest(tmp_path, [{"text": TEXT, "candidates": ["good_stereo.wav"]}])
    out = runner.invoke(app, ["rerank", stereo, "--json"])
    assert out.exit_code == 0 and "warning:" in out.stderr and "good_stereo.wav" in out.stderr, out.output
    assert "channel" in out.stderr


@pytest.mark.parametrize("rows, message", [
    (["[1, 2]"], "need"),
    (['{"text": "आज", "candidates": []}'], "at least one path"),
    (['{"text": "आज", "candidates": ["missing.wav"]}'], "missing.wav"),
    (["{not json"], "not JSON"),
    (['{"text": "आज", "candidates": ["a.wav"], "cadidates": ["b.wav"]}'], "unknown field(s) 'cadidates'"),
    ([""], "no line to rerank"),
])
def test_bad_manifests_are_errors_before_any_scoring(tmp_path, rows, message):
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = runner.invoke(app, ["rerank", str(path)])
    assert out.exit_code == 2 and "error:" in out.output and message in out.output


def _unreadable(path) -> None:
    path.write_text("not audio, only a text file named .wav\n", encoding="utf-8")


def test_an_unreadable_candidate_is_not_scored_and_the_others_are_ranked(tmp_path, monkeypatch):
    """One corrupt file stopped the reranking of every text; now it is listed as not scored, with its reason."""
    from leakloss.reward import RewardResult
    from leakloss.rewards import choose

    for name, amp in (("a.wav", 0.1), ("b.wav", 0.2)):
        sf.write(tmp_path / name, np.full(16_000, amp, dtype=np.float32), 16_000)
    _unreadable(tmp_path / "bad.wav")
    seen = []

    def fake_rerank(readings, penalty):  # the reward of a wave: its level (no model needed to test the bookkeeping)
        assert penalty == "the penalty"
        seen.append([(text, len(waves)) for text, waves in readings])
        return [choose(text, [RewardResult(float(w.abs().max()), "scored") for w in waves]) for text, waves in readings]

    monkeypatch.setattr("leakloss.rewards.rerank", fake_rerank)
    monkeypatch.setattr("leakloss.penalty.LeakPenalty.load", lambda *args, **kwargs: "the penalty")
    manifest = _manifest(tmp_path, [{"text": TEXT, "candidates": ["a.wav", "bad.wav", "b.wav"]},
                                    {"text": TEXT, "candidates": ["bad.wav", "missing.wav"]},
                                    {"text": TEXT, "candidates": ["b.wav"]}])
    out = runner.invoke(app, ["rerank", manifest, "--json"])
    assert out.exit_code == 1, out.output  # whole output, but not every file was read
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "Traceback" not in out.output and "error:" not in out.stderr
    # the unreadable files are not scored, the others are: one text's waves at a time
    assert seen == [[(TEXT, 2)], [(TEXT, 1)]]
    first, second, third = (json.loads(line) for line in out.stdout.strip().splitlines())
    assert first["best"].endswith("b.wav") and first["status"] == "scored" and first["reward"] == pytest.approx(0.2, abs=1e-3)
    assert first["reason"].startswith("candidate 2 of 3") and "1: not scored" in first["reason"]  # indices: all 3
    assert [c["candidate"] for c in first["not_scored"]] == [str(tmp_path / "bad.wav")]
    assert first["not_scored"][0]["status"] == "failed" and "bad.wav" in first["not_scored"][0]["reason"]
    assert second["best"] is None and second["status"] == "failed" and second["reward"] == 0.0
    assert "no candidate could be scored" in second["reason"] and "missing.wav" in second["reason"]
    assert [Path(c["candidate"]).name for c in second["not_scored"]] == ["bad.wav", "missing.wav"]
    assert third["best"].endswith("b.wav") and third["not_scored"] == []
    # said on stderr too: each unreadable candidate with its line and reason, and the text not ranked
    assert "not scored" in out.stderr and "candidates.jsonl:1: candidate 1:" in out.stderr and "bad.wav" in out.stderr
    assert "not ranked" in out.stderr and "candidates.jsonl:2" in out.stderr and "missing.wav" in out.stderr
    table = runner.invoke(app, ["rerank", manifest])
    assert table.exit_code == 1 and "0.200" in table.stdout and "not scored" in table.stderr, table.output


def test_no_readable_candidate_at_all_is_an_error(tmp_path):
    _unreadable(tmp_path / "bad.wav")
    manifest = _manifest(tmp_path, [{"text": TEXT, "candidates": ["bad.wav"]}, {"text": TEXT, "candidates": ["gone.wav"]}])
    out = runner.invoke(app, ["rerank", manifest, "--json"])
    assert out.exit_code == 2 and out.stdout == "", out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "Traceback" not in out.output and "error:" in out.stderr
    assert "no candidate file could be read" in out.stderr and "bad.wav" in out.stderr and "gone.wav" in out.stderr


@needs_embedded
def test_a_corrupt_candidate_among_real_readings(tmp_path):
    from leakloss.constants import SAMPLE_RATE
    from leakloss.speech.synth import HELDOUT_TEACHER_VOICE, speak_text

    sf.write(tmp_path / "good.wav", speak_text(TEXT, HELDOUT_TEACHER_VOICE).waveform.numpy(), SAMPLE_RATE)
    sf.write(tmp_path / "noise.wav", np.random.default_rng(0).normal(0, 0.1, SAMPLE_RATE * 2), SAMPLE_RATE)
    _unreadable(tmp_path / "corrupt.wav")
    manifest = _manifest(tmp_path, [{"text": TEXT, "candidates": ["corrupt.wav", "noise.wav", "good.wav"]}])
    out = runner.invoke(app, ["rerank", manifest, "--json"])
    assert out.exit_code == 1, out.output
    assert out.exception is None or isinstance(out.exception, SystemExit), repr(out.exception)
    assert "Traceback" not in out.output
    (line,) = (json.loads(x) for x in out.stdout.strip().splitlines())
    assert line["best"].endswith("good.wav") and line["reward"] > 0 and line["status"] == "scored"
    assert line["reason"].startswith("candidate 2 of 3") and "0: not scored" in line["reason"]
    assert "1: unintelligible" in line["reason"]
    assert len(line["not_scored"]) == 1 and line["not_scored"][0]["candidate"].endswith("corrupt.wav")
    assert line["not_scored"][0]["reason"] and "corrupt.wav" in out.stderr and "not scored" in out.stderr


def test_a_model_that_does_not_load_is_one_error_line_with_exit_2(tmp_path, monkeypatch):
    # a broken shipped head was a traceback with exit 1, which this command means "some files were not read"
    from leakloss.constants import SAMPLE_RATE
    from leakloss.heads import HeadLoadError
    from leakloss.penalty import LeakPenalty

    sf.write(tmp_path / "a.wav", np.random.default_rng(0).normal(0, 0.1, SAMPLE_RATE), SAMPLE_RATE)

    def broken(*args, **kwargs):
        raise HeadLoadError("rawconv.json: no thresholds")

    monkeypatch.setattr(LeakPenalty, "load", broken)
    out = runner.invoke(app, ["rerank", _manifest(tmp_path, [{"text": TEXT, "candidates": ["a.wav"]}])])
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output
    assert "error: rawconv.json: no thresholds" in out.stderr
