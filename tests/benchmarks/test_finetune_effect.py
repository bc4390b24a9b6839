"""``benchmarks/finetune_effect.py``: bad arguments are refused at once (``--item-fraction 0`` was a traceback from
inside the run, ``--seeds 0`` minutes of work for ``nan`` figures)."""

from __future__ import annotations

import pytest

from tests.conftest import load_benchmark


@pytest.mark.parametrize("argv", [["--seeds", "0"], ["--steps", "0"], ["--test-words", "0"], ["--threads", "0"],
                                  ["--item-fraction", "0"], ["--item-fraction", "1.5"], ["--item-fraction", "nan"]])
def test_bad_arguments_are_refused(argv, monkeypatch, capsys):
    bench = load_benchmark("finetune_effect")
    monkeypatch.setattr(bench, "run_effect", lambda *a, **k: pytest.fail("refuse before the experiment"))
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2 and "need --seeds" in capsys.readouterr().err


def test_the_default_run_trains_the_plain_and_penalty_arms_60_updates(monkeypatch, tmp_path):
    # the four arms took 7 minutes or more alone, plain and penalty at 120 updates 5.5: over the 5-minute rule
    bench = load_benchmark("finetune_effect")
    (tmp_path / "model.safetensors").write_bytes(b"")
    seen = {}

    def stop(settings, **kwargs):
        seen["arms"], seen["steps"] = settings.arms, settings.steps
        raise SystemExit(0)

    monkeypatch.setattr(bench, "run_effect", stop)
    with pytest.raises(SystemExit):
        bench.main(["--base-dir", str(tmp_path)])
    assert seen["arms"] == ("plain", "penalty") and seen["steps"] == 60
    with pytest.raises(SystemExit):
        bench.main(["--base-dir", str(tmp_path), "--arms", "plain", "penalty", "paired", "reward"])
    assert seen["arms"] == ("plain", "penalty", "paired", "reward")
