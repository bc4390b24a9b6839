"""`leakloss rerank`: best-of-N over candidate readings, never an unintelligible one; bad input is `error:`."""

import json

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
