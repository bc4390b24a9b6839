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
