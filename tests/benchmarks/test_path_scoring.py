"""``benchmarks/path_scoring.py``: bad arguments are refused (``--repeats 0`` printed a speedup of 0.0), and the
docstring names every key of the last line."""

from __future__ import annotations

import pytest

from tests.conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("path_scoring")


def test_zero_repeats_is_refused(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench, "build_workload", lambda **k: pytest.fail("refuse before measuring"))
    with pytest.raises(SystemExit) as exc:
        bench.main(["--repeats", "0"])
    assert exc.value.code == 2 and "--repeats" in capsys.readouterr().err


def test_the_docstring_names_the_last_lines_keys(bench):
    assert "batched_speedup=X.X features_realtime=Y.Y" in " ".join(bench.__doc__.split())
